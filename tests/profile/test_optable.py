"""Profiler op tables (toolkit/profile/optable.py): integer columns, and op statistics per time kind."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit.profile.optable import OP_STATISTIC_COLUMNS, integer_columns


def test_integer_columns_keeps_fractional_values():
    df = pd.DataFrame({"Task ID": [0.0, 2.0, np.nan], "Stream ID": [1.0, 1.5, 2.0], "Task Duration(us)": [1.0] * 3})
    out = integer_columns(df)
    assert out.to_csv(index=False).splitlines()[1:] == ["0,1.0,1.0", "2,1.5,1.0", ",2.0,1.0"]
    assert df["Task ID"].dtype == float  # the input is not modified


def test_op_statistic_is_per_time_kind():
    """Ratio(%) within each Time Kind, computed here by hand; the Time Kind column comes after the profiler's."""
    from toolkit.profile.optable import PROFILER_STATISTIC_COLUMNS, op_statistic, op_summary_frame

    rows = [{"Op Name": "c1", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 30.0, "Time Kind": "simulated"},
            {"Op Name": "c2", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 10.0, "Time Kind": "simulated"},
            {"Op Name": "r", "OP Type": "Relu", "Task Type": "AI_VECTOR_CORE", "Task Duration(us)": 60.0, "Time Kind": "simulated"},
            {"Op Name": "c1", "OP Type": "Conv", "Task Type": "HOST_CPU", "Task Duration(us)": 900.0, "Time Kind": "measured"},
            {"Op Name": "pp", "OP Type": "PostProcess", "Task Type": "HOST_CPU", "Task Duration(us)": 100.0, "Time Kind": "measured"},
            {"Op Name": "d", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 5.0, "Time Kind": ""}]
    stat = op_statistic(op_summary_frame(rows))
    assert list(stat.columns) == PROFILER_STATISTIC_COLUMNS + ["Time Kind"] == OP_STATISTIC_COLUMNS
    got = {(r["Time Kind"], r["OP Type"]): (r["Count"], r["Total Time(us)"], r["Ratio(%)"]) for r in stat.to_dict("records")}
    assert got == {("simulated", "Relu"): (1, 60.0, 60.0), ("simulated", "Conv"): (2, 40.0, 40.0),
                   ("measured", "Conv"): (1, 900.0, 90.0), ("measured", "PostProcess"): (1, 100.0, 10.0),
                   ("device", "Conv"): (1, 5.0, 100.0)}
    assert stat["Time Kind"].tolist() == ["simulated", "simulated", "measured", "measured", "device"]
