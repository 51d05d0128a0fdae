"""Test builders shared by test_tasks.py, test_compare.py."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from toolkit.compare.tasks import RESULT_KEYS, run_check, run_tasks

CHECKS = '''
import numpy as np

def ok(g, n, m): return {"name": "ok", "passed": True, "value": 1.0, "detail": "fine"}
def np_true(g, n, m): return {"name": "np_true", "passed": np.bool_(True), "value": 1, "detail": "numpy bool"}
def str_false(g, n, m): return {"name": "acc", "passed": "false", "value": 0.1, "detail": "accuracy dropped"}
def int_one(g, n, m): return {"name": "acc", "passed": 1, "value": 0.1, "detail": "x"}
def none_passed(g, n, m): return {"name": "acc", "passed": None, "value": 0.1, "detail": "x"}
def array_passed(g, n, m): return {"name": "acc", "passed": np.array([True, False]), "value": 0.1, "detail": "x"}
def list_passed(g, n, m): return {"name": "acc", "passed": [True], "value": 0.1, "detail": "x"}
def missing_key(g, n, m): return {"value": 1}
def returns_int(g, n, m): return 5
def returns_none(g, n, m): return None
def returns_list(g, n, m): return [("name", "x"), ("passed", True), ("value", 1), ("detail", "")]
def _differ(g, n): return any(not np.array_equal(np.asarray(g[k]), np.asarray(v)) for k, v in n.items() if k in g)
def raises(g, n, m):  # raises on device outputs that differ from the reference (a check the run breaks)
    if _differ(g, n):
        raise KeyError("nope")
    return {"name": "raises", "passed": True, "value": 0.0, "detail": "the reference"}
def fails_on_device(g, n, m): return {"name": "exact", "passed": not _differ(g, n), "value": None, "detail": "bits"}
def always_false(g, n, m): return {"name": "never", "passed": False, "value": None, "detail": "never passes"}
def mutates(g, n, m):  # changes what it is given: must change nothing of the caller's
    for k in n:
        if isinstance(n[k], np.ndarray) and n[k].size:
            n[k][...] = 0
            g[k][...] = 0
    return {"name": "mutates", "passed": True, "value": None, "detail": ""}
def always_raises(g, n, m): return 1 / 0  # a broken check: raises on the reference itself
'''

#: function -> text the failing detail must hold (besides the function's label)
BAD = {
    "str_false": "'passed' = 'false' (str)",
    "int_one": "'passed' = 1 (int)",
    "none_passed": "'passed' = None (NoneType)",
    "array_passed": "'passed' = array([ True, False]) (numpy.ndarray of shape (2,))",
    "list_passed": "'passed' = [True] (list)",
    "missing_key": "without key(s) 'name', 'passed', 'detail'",
    "returns_int": "returned 5 (int), not a dict",
    "returns_none": "returned None (NoneType), not a dict",
    "returns_list": "(list), not a dict",
}

GOOD = {"ok": True, "np_true": True}

@pytest.fixture()
def checks_module(tmp_path, monkeypatch):
    """A user module ``r3checks`` on sys.path (and its folder for subprocesses)."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "r3checks.py").write_text(CHECKS)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("r3checks", None)
    yield folder
    sys.modules.pop("r3checks", None)

def _assert_task_results(tasks: list[dict]) -> None:
    """Results of GOOD + raises + fails_on_device on device outputs that differ from the reference."""
    by_label = {}
    for t in tasks:
        assert set(RESULT_KEYS) <= set(t)
        assert type(t["passed"]) is bool  # a Python bool, whatever the check returned
        by_label[t["name"]] = t
    assert by_label["exact"]["passed"] is False and not by_label["exact"].get("fails_on_reference")
    raised = by_label["r3checks:raises"]
    assert raised["passed"] is False and raised["detail"] == "task check r3checks:raises raised KeyError: 'nope'"
    for name, passed in GOOD.items():
        assert by_label[name]["passed"] is passed
