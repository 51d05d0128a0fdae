"""Built-in parse-log formats, one module each. ``toolkit.logs.registry.ORDER`` is the detection order (the registry
sorts by it; formats registered from elsewhere come after, in registration order).

onnxruntime profiles are Chrome traces too, so ort_profile comes before chrome_trace; fusion_result before
the CSVs; compare results (msaccucmp, msprobe) before the profiler CSVs; op_summary CSVs (then torch_npu kernel_details, msprof fusion_op) before op_statistic and kernel_times; compile.log before plog lines.
"""

from toolkit.logs.parsers import (
    api_statistic_csv,
    chrome_trace,
    compile_log,
    fusion_op_csv,
    fusion_result,
    kernel_details_csv,
    kernel_times_csv,
    msaccucmp_csv,
    msprobe_compare_csv,
    op_statistic_csv,
    op_summary_csv,
    ort_profile,
    plog_lines,
    task_time_csv,
)
from toolkit.logs.registry import ORDER

#: The built-in parser modules (imported here, so their parsers are registered).
BUILT_IN = (ort_profile, chrome_trace, fusion_result, msaccucmp_csv, msprobe_compare_csv, op_summary_csv,
            kernel_details_csv, task_time_csv, api_statistic_csv, fusion_op_csv, op_statistic_csv, kernel_times_csv,
            compile_log, plog_lines)
__all__ = ["BUILT_IN", "ORDER"]
