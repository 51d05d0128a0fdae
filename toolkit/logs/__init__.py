"""Logging and log/profile parsing.

- :mod:`toolkit.logs.plog`: npuscope's logger (plog-style lines; NPUSCOPE_LOG_LEVEL, NPUSCOPE_LOG_TO_STDOUT).
- :mod:`toolkit.logs.registry`, :mod:`toolkit.logs.detect`, :mod:`toolkit.logs.parsers`: one parser per
  input format, each turning a file into a :class:`~toolkit.logs.registry.ParseResult` (an op summary in the
  profiler's columns, other tables, a malformed-record count).
- :mod:`toolkit.logs.findings`: findings over an op summary (CPU fallbacks, Casts, transfers, launch overhead).
- :mod:`toolkit.commands.parse_log`: ``npuscope parse-log``.
"""
