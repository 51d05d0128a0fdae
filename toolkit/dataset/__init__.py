"""Dataset runs: one command over a folder of thousands of ``.npz`` inputs, streamed, in parallel, resumable.

Modules: ``source`` (the sorted input files, loaded one at a time), ``worker`` (compile once, evaluate one
input into a small per-layer record), ``store`` (per-input results written atomically; the run manifest;
resume), ``runner`` (serial, ``--jobs N`` process pool, ``--ray ADDRESS`` backends), ``aggregate`` (per-layer
worst / mean / percentiles over inputs, streamed from the store), ``report`` (the HTML section), ``workflow``
(the compare / diagnose / signoff entry points). User documentation: docs/datasets.md.
"""
