"""toolkit.ort.reference.ReferenceRunner on models onnxruntime itself refuses to load: a one-line ModelError
quoting onnxruntime's reason (exit 1), never onnxruntime's exception (exit 3)."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit.core.errors import ModelError
from toolkit.ort.reference import ReferenceRunner


def _chain():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
             helper.make_node("Neg", ["b"], ["y"], name="neg")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("tensor", ["a", "b"])
@pytest.mark.parametrize("elem", [TensorProto.INT64, TensorProto.BOOL, TensorProto.STRING, TensorProto.DOUBLE])
@pytest.mark.parametrize("expose", [True, False])
def test_a_value_info_type_the_op_contradicts_is_a_model_error(tensor, elem, expose):
    model = _chain()
    model.graph.value_info.append(helper.make_tensor_value_info(tensor, elem, [2, 3]))
    with pytest.raises(Exception) as ort_exc:  # independent: onnxruntime refuses the model as it is
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert "Type" in str(ort_exc.value)
    with pytest.raises(ModelError) as exc:
        ReferenceRunner(model, expose=expose)
    text = str(exc.value)
    assert "\n" not in text and "onnxruntime cannot load the model" in text and tensor in text


SHARED = r"""
import json, sys
import numpy as np
from toolkit.ir.load import load_model
from toolkit.ir.weights import mapped_initializers
from toolkit.ort.reference import ReferenceRunner

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

model = load_model(sys.argv[1])
maps = mapped_initializers(model)
touched = sum(float(np.asarray(m, np.float64).sum()) for m in maps.values())  # every page, as kernels read them
before = rss()
x = np.load(sys.argv[2])
runner = ReferenceRunner(model, expose=False)
out = runner.run({"x": x})
grown = rss() - before  # the session alive: what it holds is counted
print(json.dumps({"grown": grown, "y": np.asarray(out["y"]).tolist()}))
"""


@pytest.mark.parametrize("inline", [True, False])
def test_the_reference_reads_mapped_weights_in_place_without_mapping_them_again(tmp_path, inline):
    """Kind: weights left on disk (lifted from the model file, or external data) are read by the FP32
    reference session through the process's own memory maps: building and running it grows RSS by far less
    than the weights (onnxruntime mapping or reading the file itself doubled them), and the output is
    onnxruntime's own on the same model."""
    import json
    import subprocess
    import sys

    import numpy as np
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((512, 16384)).astype(np.float32)  # 32 MiB each
    w2 = rng.standard_normal((16384, 512)).astype(np.float32) / 128
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
                           helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 512])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    if inline:
        onnx.save(model, path)
    else:
        onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=1024)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = subprocess.run([sys.executable, "-c", SHARED, str(path), str(tmp_path / "x.npy")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    weights = w1.nbytes + w2.nbytes
    assert got["grown"] < 0.25 * weights, (got["grown"], weights)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.asarray(got["y"], np.float32), want, rtol=1e-5, atol=1e-4)
