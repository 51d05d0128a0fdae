"""Task checks (toolkit/compare/tasks.py): every kind of return value is judged, bools keep their value, name and
detail types are checked."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from toolkit.compare.tasks import RESULT_KEYS, run_check, run_tasks
from tests.compare.task_fixtures import CHECKS, BAD, GOOD, checks_module, _assert_task_results


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_run_tasks_judges_every_kind_of_return_value(checks_module):
    specs = [f"r3checks:{f}" for f in [*GOOD, "raises", "fails_on_device"]]
    tasks = run_tasks(None, specs, {"y": np.zeros(2)}, {"y": np.ones(2)}, onnx.ModelProto())
    assert len(tasks) == len(specs)
    _assert_task_results(tasks)


@pytest.mark.parametrize("fn", [*BAD, "always_raises"])
@pytest.mark.parametrize("npu", [{"y": np.ones(2)}, {"y": np.zeros(2)}])
def test_a_check_that_cannot_judge_the_reference_itself_is_a_usage_error(checks_module, fn, npu):
    """Kind: a broken check. One that raises or returns no valid result even when given the FP32 reference as
    the device outputs cannot judge any run: a one-line usage error naming it and what is wrong, not a FAIL of
    the model. One that raises only on device outputs (`raises`) stays a failing result (test above)."""
    from toolkit.core.errors import UsageError

    with pytest.raises(UsageError, match=f"r3checks:{fn} .* FP32 reference") as e:
        run_tasks(None, [f"r3checks:{fn}"], {"y": np.zeros(2)}, npu, onnx.ModelProto())
    assert "\n" not in str(e.value)
    assert BAD.get(fn, "raised ZeroDivisionError") in str(e.value)


def test_a_check_failing_the_reference_too_says_so(checks_module):
    res = run_tasks(None, ["r3checks:always_false"], {"y": np.zeros(2)}, {"y": np.ones(2)}, onnx.ModelProto())[0]
    assert res["passed"] is False and res["fails_on_reference"] is True
    assert "fails the FP32 reference too" in res["detail"] and "never passes" in res["detail"]


def test_a_check_gets_copies_and_changes_nothing_of_ours(checks_module):
    golden, npu = {"y": np.arange(4.0)}, {"y": np.arange(4.0) + 1}
    res = run_tasks(None, ["r3checks:mutates"], golden, npu, onnx.ModelProto())[0]
    assert res["passed"] is True
    np.testing.assert_array_equal(golden["y"], np.arange(4.0))
    np.testing.assert_array_equal(npu["y"], np.arange(4.0) + 1)


@pytest.mark.parametrize("passed, expected", [(True, True), (False, False), (np.True_, True), (np.False_, False)])
def test_bools_keep_their_value(passed, expected):
    def check(g, n, m):
        return {"name": "c", "passed": passed, "value": None, "detail": ""}
    res = run_check(check, {}, {}, onnx.ModelProto())
    assert res["passed"] is expected


@pytest.mark.parametrize("bad, what", [({"name": "", "passed": True, "value": 1, "detail": ""}, "'name' = ''"),
                                       ({"name": 3, "passed": True, "value": 1, "detail": ""}, "'name' = 3 (int)"),
                                       ({"name": "c", "passed": True, "value": 1, "detail": None},
                                        "'detail' = None (NoneType)")])
def test_name_and_detail_types_are_checked(bad, what):
    from toolkit.core.errors import UsageError

    def check(g, n, m):
        return bad
    with pytest.raises(UsageError) as e:
        run_check(check, {}, {}, onnx.ModelProto())
    assert what in str(e.value) and check.__qualname__ in str(e.value)


def test_a_raised_message_is_kept_whole_in_the_failing_detail():
    def check(g, n, m):  # raises on device outputs only, with parentheses at the end of its message
        if n["y"] != g["y"]:
            raise ValueError("bad value (x)")
        return {"name": "c", "passed": True, "value": None, "detail": ""}
    res = run_check(check, {"y": 0}, {"y": 1}, onnx.ModelProto())
    assert res["passed"] is False and res["detail"].endswith("raised ValueError: bad value (x)"), res["detail"]
