"""Compare two sets of tensor dumps (``npuscope compare-dumps GOLDEN TARGET``): ONNX golden .npy dumps, device
dumps converted to .npy, ``npuscope run --dump`` folders and Polygraphy RunResults JSON, matched by name (with
a fusion mapping file and/or the model) and compared with compare's metrics, advisor and report.

Modules: ``names`` (file-name conventions, registered parsers), ``entry`` (DumpEntry/DumpSet, safe .npy reader),
``readers`` (one side → DumpSet), ``mapping`` (fused op → original nodes), ``match`` (pairs in order),
``table`` (metrics per pair → result.csv rows), the command and its report: toolkit.commands.compare_dumps, toolkit.report.dumps_html.
User documentation: docs/compare-dumps.md.
"""
