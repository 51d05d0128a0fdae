"""Cells of the device profilers' CSVs brought to one form (toolkit/logs/profcells.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from toolkit.logs.profcells import model_names


def test_model_name_placeholders_are_no_name():
    cells = pd.Series(["N/A", " n/a ", "resnet50", "", None, np.nan, "NA", "none", "N/A-model"], dtype=object)
    assert model_names(cells).tolist() == ["", "", "resnet50", "", "", "", "", "", "N/A-model"]
