"""Compare two sets of tensor dumps (``npuscope compare-dumps GOLDEN TARGET``): ONNX golden .npy dumps, device
dumps converted to .npy or the raw device dump files themselves, ``npuscope run --dump`` folders and Polygraphy
RunResults JSON, matched by name (with a fusion mapping file and/or the model) and compared with compare's
metrics, advisor and report.

Modules: ``names`` (file-name conventions, registered parsers), ``entry`` (DumpEntry/DumpSet, safe .npy reader),
``readers`` (one side → DumpSet), ``raw`` / ``raw_writer`` / ``dump_proto`` (raw device dump files and their
DumpData header), ``layouts`` (device layouts → ONNX layout), ``to_device``
(ONNX layout → device layouts), ``export`` (a simulated run written as raw device dumps, one file per kernel), ``raw_entries`` (raw files and unreadable names as
entries), ``nested`` (the device's nested folder layout), ``mapping`` (fused op → original nodes), ``match``
(pairs in order; fused groups from a mapping or from a dump folder's kernels), ``dump_plan`` (the plan the pairs imply, for the advisor), ``sides`` (a golden of lower precision than the target: swapped sides), ``table`` (metrics per pair → result.csv rows); the command and its report are toolkit.commands.compare_dumps
and toolkit.report.dumps_html.
User documentation: docs/compare-dumps.md.
"""
