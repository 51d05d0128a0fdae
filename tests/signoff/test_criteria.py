"""Signoff criteria (toolkit/signoff/criteria.py): min_cosine on tensors that could not be compared, non-finite
output values, unique criterion names, and messages that never contradict their status or print a value as
the limit."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit.signoff.criteria import Result, check_unique


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_show_rule_used_by_tune_summary():
    from toolkit.signoff.criteria import show

    v = 0.9999999999999741
    text = show(v, 1.0, digits=10)
    assert float(text) != 1.0 and float(text) < 1.0
    assert show(0.5, 1.0, digits=10) == "0.5"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_duplicate_criterion_names_are_an_internal_error():
    ok = [Result("a", "outputs", True, "a"), Result("b", "outputs", True, "b")]
    assert check_unique(ok) is ok
    with pytest.raises(RuntimeError, match="same name twice: a"):
        check_unique(ok + [Result("a", "outputs", False, "a again")])


def _rows_evidence(rows, layers=None, run_ms=()):
    from toolkit.signoff.criteria import Evidence

    return Evidence(outputs=["y"], output_rows={"y": rows}, layers=layers, tasks=[], plan=None, run_ms=list(run_ms),
                    inputs=[f"in{i}" for i in range(len(rows))])


NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


@pytest.mark.parametrize("metric, limit, worst", [
    ("CosineSimilarity", 0.9999999749, 0.9999999748911433), ("CosineSimilarity", 0.9999999749, 0.99999997490001),
    ("CosineSimilarity", 1.0, 0.9999999999999998), ("CosineSimilarity", 0.99, 0.98999999),
    ("MaxAbsoluteError", 0.0059595, 0.005959510803222656), ("MaxAbsoluteError", 0.0059595, 0.0059594999999),
    ("MaxAbsoluteError", 1e-3, 1e-3)])
def test_signoff_output_messages_never_contradict_their_status(metric, limit, worst):
    from toolkit.signoff.criteria import check_outputs

    (r,) = check_outputs({"y": {metric: limit}}, _rows_evidence([{metric: worst}]))
    m = re.search(rf"worst {NUM} over .* \(needs (>=|<=) {NUM}\)", r.message)
    assert m, r.message
    value, op, line = float(m.group(1)), m.group(2), float(m.group(3))
    assert line == limit
    assert r.passed == (value >= line if op == ">=" else value <= line) == (worst >= limit if op == ">=" else
                                                                            worst <= limit), r.message


def test_signoff_layer_and_latency_messages_print_limits_exactly():
    from toolkit.signoff.criteria import check_latency, check_layers

    layers = pd.DataFrame([{"NodeName": "n", "TensorName": "t", "OpType": "Relu", "CosineSimilarity": 0.9999999748,
                            "CompareFailReason": "", "DataType": "float32", "NPUDump": "float16", "Abnormal": False,
                            "OverFlow": False}])
    (r,) = check_layers({"min_cosine": 0.9999999749}, _rows_evidence([], layers))
    m = re.search(rf"lowest CosineSimilarity {NUM} at 't' \(needs >= {NUM}\)", r.message)
    assert m and float(m.group(2)) == 0.9999999749 and float(m.group(1)) < float(m.group(2)) and not r.passed
    (r,) = check_latency({"source": "host", "max_ms": 5.0, "statistic": "max"}, _rows_evidence([], run_ms=[5.0000001]))
    m = re.search(rf"max {NUM} ms per input set \(budget {NUM} ms", r.message)
    assert m and float(m.group(2)) == 5.0 and float(m.group(1)) > 5.0 and not r.passed


C08 = Path("/work/shared/cases/fp16/c08_softplus_exp_overflow")


# ------------------------------------------------------------------ tensors / outputs that could not be compared
def _layers(rows: list[dict]):
    import pandas as pd

    base = {"NodeName": "n", "OpType": "Relu", "CosineSimilarity": float("nan"), "CompareFailReason": "",
            "DataType": "float32", "NPUDump": "float16", "Abnormal": False, "OverFlow": False}
    ok = {**base, "TensorName": "fine", "CosineSimilarity": 0.9995}
    return pd.DataFrame([ok] + [{**base, **r} for r in rows])


def _evidence(layers=None, rows=None):
    from toolkit.signoff.criteria import Evidence

    return Evidence(outputs=["y"], output_rows={"y": rows or []}, layers=layers, tasks=[], plan=None, run_ms=[],
                    inputs=[f"in{i}" for i in range(len(rows or []))])


NOT_COMPARABLE = {
    "non_finite": {"CompareFailReason": "no position where both tensors are finite"},
    "shape": {"CompareFailReason": "shape mismatch: device (2,) vs golden (3,)"},
    "dtype": {"CompareFailReason": "dtype class mismatch: device int32 (integer) vs golden float32 (float)"},
    "not_stored": {"CompareFailReason": "not stored by the NPU plan"},
    "not_exposed": {"CompareFailReason": "not exposed by the reference run (non-tensor or unknown type)"},
    "dataset_partial": {"CompareFailReason": "not compared on 1 of 3 input(s)"},
    "float_nan_no_reason": {},
}
SAME_BY_CONSTRUCTION = {
    "fused": {"CompareFailReason": "fused into kernel k0"},
    "folded": {"CompareFailReason": "computed at compile time (constant folding)"},
    "integer": {"DataType": "int64", "NPUDump": "int64"},  # compared by ExactMatchRate, cosine not applicable
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("kind", sorted(NOT_COMPARABLE))
def test_min_cosine_fails_on_a_tensor_that_could_not_be_compared(kind):
    from toolkit.signoff.criteria import check_layers

    (r,) = check_layers({"min_cosine": 0.99}, _evidence(_layers([{"TensorName": "bad", **NOT_COMPARABLE[kind]}])))
    assert not r.passed and "1 not comparable" in r.message and "bad" in r.message, r.message
    assert [x["tensor"] for x in r.evidence["not_comparable"]] == ["bad"]
    assert r.evidence["worst"] == pytest.approx(0.9995)  # the comparable tensor is still reported


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("kind", sorted(SAME_BY_CONSTRUCTION))
def test_min_cosine_passes_tensors_that_need_no_cosine(kind):
    from toolkit.signoff.criteria import check_layers

    (r,) = check_layers({"min_cosine": 0.99}, _evidence(_layers([{"TensorName": "t", **SAME_BY_CONSTRUCTION[kind]}])))
    assert r.passed and r.evidence["not_comparable"] == [], r.message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_min_cosine_fails_when_only_graph_inputs_were_compared():
    import pandas as pd

    from toolkit.signoff.criteria import check_layers

    df = pd.DataFrame([{"NodeName": "x", "TensorName": "x", "OpType": "Input", "CosineSimilarity": 1.0,
                        "CompareFailReason": "", "DataType": "float32", "NPUDump": "float32"},
                       {"NodeName": "c", "TensorName": "c", "OpType": "Conv", "CosineSimilarity": float("nan"),
                        "CompareFailReason": "fused into kernel k", "DataType": "float32", "NPUDump": ""}])
    (r,) = check_layers({"min_cosine": 0.5}, _evidence(df))
    assert not r.passed and "no tensor besides the graph inputs" in r.message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("metric, values, reason", [
    ("CosineSimilarity", [0.9999, float("nan")], "no position where both tensors are finite"),
    ("RelativeEuclideanDistance", [float("nan")], "shape mismatch: device (2,) vs golden (3,)"),
    ("MaxAbsoluteError", [float("inf")], ""),
    ("CosineSimilarity", [], ""),
])
def test_outputs_limit_fails_on_a_value_that_is_not_finite(metric, values, reason):
    from toolkit.signoff.criteria import check_outputs

    rows = [{metric: v, "CompareFailReason": reason if np.isnan(v) else ""} for v in values]
    (r,) = check_outputs({"y": {metric: 0.5}}, _evidence(rows=rows))
    assert not r.passed, r.message
    if reason:
        assert reason in r.message and reason in r.evidence["compare_fail_reasons"]


# ------------------------------------------------------------------ numbers in messages
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("value, limits, want", [
    (0.9999998, (), "0.9999998"), (1.0, (), "1"), (-0.99999999, (), "-0.99999999"),
    (0.98999999, (0.99,), "0.98999999"), (0.2000004, (0.2,), "0.2000004"), (0.123456789, (), "0.123457"),
    (0.99, (0.99,), "0.99"), (float("nan"), (), "nan"),
])
def test_show_never_prints_a_different_value_as_one_or_as_the_limit(value, limits, want):
    from toolkit.signoff.criteria import show

    assert show(value, *limits) == want


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_cosine_just_below_one_is_not_printed_as_one():
    from toolkit.signoff.criteria import check_layers, check_outputs

    cos = float(np.float32(1) - np.finfo(np.float32).eps)  # 0.99999988
    (r,) = check_outputs({"y": {"CosineSimilarity": 0.5}}, _evidence(rows=[{"CosineSimilarity": cos}]))
    assert "worst 0.9999999 " in r.message and "worst 1 " not in r.message  # 1 - 1.19e-7 to 7 digits
    only = _layers([{"TensorName": "t", "CosineSimilarity": cos}]).iloc[1:].reset_index(drop=True)
    (r,) = check_layers({"min_cosine": 0.5}, _evidence(only))
    assert "lowest CosineSimilarity 0.9999999 " in r.message
