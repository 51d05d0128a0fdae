"""ONNX backend node conformance cases through NpuRuntime (force_fp32, fusion level 2).

The acceptance bar: over the float node cases that are not excluded, the pass rate is at least
``conformance.MIN_PASS_RATE`` (0.95). Exclusions are computed (plain onnxruntime cannot load/run a case or does
not match its expected outputs), never listed by hand; every one is written with its reason to
``reports/conformance/excluded.csv`` and every case's outcome to ``results.csv`` by the full sweep (slow).
The fast test runs a deterministic sample (every 10th float case in name order) against the same bar.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.conformance import cases as C

EXCLUSION_KINDS = {"ort_load", "ort_run", "ort_mismatch"}


def _check(results, label):
    rate, passed, counted = C.pass_rate(results)
    print(f"\n[{label}] " + C.summary(results))
    for r in results:
        if r.status == "fail" and r.float_case:
            print(f"  FAIL {r.case}: {r.kind}: {r.reason[:160]}")
    for r in results:
        if r.status == "excluded":
            assert r.kind in EXCLUSION_KINDS and r.reason, f"{r.case}: exclusion without a reason"
    assert counted > 0
    assert rate >= C.MIN_PASS_RATE, f"float pass rate {rate:.4f} ({passed}/{counted}) < {C.MIN_PASS_RATE}"
    return rate


def test_cases_are_collected_and_classified():
    cases = C.node_cases()
    assert len(cases) > 1500
    assert [c.name for c in cases] == sorted(c.name for c in cases)
    by_name = {c.name: c for c in cases}
    assert C.is_float_case(by_name["test_relu"])
    assert not C.is_float_case(by_name["test_shape"])  # int64 output
    assert C.is_float_case(by_name["test_if_seq"])  # sequence of float tensors
    assert sum(C.is_float_case(c) for c in cases) > 1000


def test_sample_pass_rate(tmp_path):
    """Every 10th float case (deterministic): same bar as the full sweep."""
    floats = [c for c in C.node_cases() if C.is_float_case(c)]
    results = [C.evaluate(c) for c in floats[::10]]
    assert len(results) > 100  # the sample really covers the node cases
    C.write_csvs(results, prefix="sample_")
    _check(results, "sample: every 10th float node case")


@pytest.mark.slow
def test_full_node_sweep():
    """Every node case; writes reports/conformance/results.csv and excluded.csv."""
    results = [C.evaluate(c) for c in C.node_cases()]
    res_p, exc_p = C.write_csvs(results)
    with open(exc_p, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == sum(r.status == "excluded" for r in results)
    assert all(row["reason"] for row in rows)
    _check(results, "all node cases")


# ------------------------------------------------------------------ the harness itself
def _case(name, nodes, inputs, outputs, feeds, expected, opset=17):
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return C.Case(name, model, feeds, expected, 1e-3, 1e-7)


def _vi(name, elem=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


def test_exclusion_when_plain_onnxruntime_cannot_load():
    case = _case("no_such_op", [helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.none")],
                 [_vi("x")], [_vi("y")], [np.ones((2, 3), np.float32)], [np.ones((2, 3), np.float32)])
    case.model.opset_import.append(helper.make_opsetid("example.none", 1))
    kind, reason = C.exclusion(case)
    assert kind == "ort_load" and "onnxruntime" in reason
    assert C.evaluate(case).status == "excluded"


def test_exclusion_when_expected_outputs_disagree_with_onnxruntime():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    case = _case("wrong_expected", [helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")], [x], [x + 1])
    assert C.exclusion(case)[0] == "ort_mismatch"


def test_passing_and_failing_comparison_use_case_tolerance():
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    ok = _case("relu", [helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")], [x], [np.maximum(x, 0)])
    assert C.evaluate(ok).status == "pass"
    assert C.compare([np.float32([1.0])], [np.float32([1.0 + 2e-3])], 1e-3, 1e-7) is not None
    assert C.compare([np.float32([1.0])], [np.float32([1.0 + 5e-4])], 1e-3, 1e-7) is None
    assert C.compare([np.float32([1.0])], [np.float64([1.0])], 1e-3, 1e-7) is not None  # dtype must match
    assert C.compare([[np.float32([1.0])]], [[np.float32([1.0])]], 1e-3, 1e-7) is None  # sequences
    assert C.compare([None], [None], 1e-3, 1e-7) is None  # empty optional


def test_results_csv_lists_reasons(tmp_path):
    results = [C.Result("a", True, "pass"), C.Result("b", True, "excluded", "ort_load", "cannot load: X"),
               C.Result("c", False, "fail", "mismatch", "output 0: ...")]
    res_p, exc_p = C.write_csvs(results, tmp_path)
    rows = list(csv.DictReader(open(exc_p, encoding="utf-8")))
    assert rows == [{"case": "b", "float": "1", "kind": "ort_load", "reason": "cannot load: X"}]
    assert [r["status"] for r in csv.DictReader(open(res_p, encoding="utf-8"))] == ["pass", "excluded", "fail"]
    rate, passed, counted = C.pass_rate(results)
    assert (rate, passed, counted) == (1.0, 1, 1)
