"""One module per CLI verb; each command function is the Python API of its verb."""
