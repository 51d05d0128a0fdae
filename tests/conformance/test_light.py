"""The "light" model zoo shipped with onnx (onnx/backend/test/data/light) through NpuRuntime (force_fp32).

Inputs are made exactly as onnx's backend runner makes them for these models
(``Runner.generate_dummy_data(x, seed=0, random=False)`` for each non-initializer graph input); expected outputs
are the stored ``light_<name>_output_<i>.pb`` files; the comparison is the runner's
(``assert_similar_outputs``) with the model's own rtol/atol from ``onnx.backend.test.case.model``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance import cases as C

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512"]


def test_light_zoo_is_complete():
    found = C.light_models()
    assert sorted(found) == sorted(MODELS)
    for lm in found.values():
        assert lm.path.is_file() and lm.expected, lm.name
        assert lm.rtol >= 1e-3 and lm.atol == 1e-7


def test_inputs_follow_the_runner():
    case = C.light_case(C.light_models()["squeezenet"])
    (x,) = case.inputs
    n = x.size
    assert x.dtype == np.float32 and x.shape == (1, 3, 224, 224)
    np.testing.assert_array_equal(x, (np.arange(n).reshape(x.shape) / n).astype(np.float32))
    assert case.outputs[0].shape == (1, 1000, 1, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_stored_outputs(name):
    case = C.light_case(C.light_models()[name])
    outs = C.run_engine(case.model, C.feeds_of(case))
    why = C.compare(case.outputs, outs, case.rtol, case.atol)
    assert why is None, f"{name}: {why} (rtol={case.rtol}, atol={case.atol})"
