"""Test builders shared by test_diagnose.py, test_diagnose.py."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import TensorProto as TP

from tests.dtype_models import _graph_model, _noise_row, _save
from tests.faultkinds import builders as fk
from toolkit.compare.layerwise import golden_range
from toolkit.compare.metrics import compare_tensors, parse_thresholds
from toolkit.config.schema import Config
from toolkit.core.records import Finding
from toolkit.diagnose import _verdict, diagnose, prepare
from toolkit.engine import Session


def rows(diag):
    return diag.table.set_index("TensorName")
