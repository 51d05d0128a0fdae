"""Built-in parse-log formats, one module each. :data:`ORDER` is the detection order (toolkit.logs.registry
sorts by it; formats registered from elsewhere come after, in registration order).

onnxruntime profiles are Chrome traces too, so ort_profile comes before chrome_trace; fusion_result before
the CSVs; op_summary CSVs before op_statistic and kernel_times; compile.log before plog lines.
"""

import importlib

ORDER = ("ort_profile", "chrome_trace", "fusion_result", "op_summary_csv", "op_statistic_csv", "kernel_times_csv",
         "compile_log", "plog_lines")

for _module in ORDER:
    importlib.import_module(f"{__name__}.{_module}")
