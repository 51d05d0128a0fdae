"""One module per CLI verb; each command function is the Python API of its verb.

Each command function returns a dict with ``summary`` (lines for the terminal), ``out`` (the output folder)
and the files written, and raises toolkit.core.errors.UserError subclasses for user mistakes."""
