"""Shape gears (issue #7): a few precompiled shapes with padding instead of one compile per input shape.

- :mod:`toolkit.gears.spec` — gears from a Config (converter syntax: dynamic_batch_size, dynamic_dims, pad_value).
- :mod:`toolkit.gears.session` — GearSession: one plan per gear, smallest fitting gear, pad, slice outputs back.
- :mod:`toolkit.gears.padding` — padding sensitivity: padded vs exact run, layer by layer over the valid region.
- :mod:`toolkit.gears.dp` — the K gears minimising expected padded work (exact DP) and power-of-two baselines.
- :mod:`toolkit.commands.gears` — the ``gears`` command, and compile/run with gears.
"""
