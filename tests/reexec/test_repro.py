"""Reproducers (toolkit/reexec/repro.py): extracted subgraphs cast only FP16-stored inputs, and repro files read
back and feed the reproducer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.dtype_models import CPU_MODELS, FEED
from tests.faultkinds import builders as fk
from toolkit.config.schema import Config


def _model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """``inputs`` / ``outputs``: [(name, shape)] of float tensors; ``inits``: {name: array}."""
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def scale_chain(rows=4, dim=64, factor=30000.0, seed=0, relu=True):
    """x -> MatMul 'mm' -> Mul 'scale' (x factor) -> Div 'unscale' (/ factor) -> [Relu 'relu'] -> MatMul 'mm2' -> y."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Mul", ["mm", "big"], ["scaled"], name="scale"),
             helper.make_node("Div", ["scaled", "big2"], ["unscaled"], name="unscale")]
    last = "unscaled"
    if relu:
        nodes.append(helper.make_node("Relu", ["unscaled"], ["r"], name="relu"))
        last = "r"
    nodes.append(helper.make_node("MatMul", [last, "W2"], ["y"], name="mm2"))
    m = _model(nodes, [("x", [rows, dim])], [("y", [rows, dim])],
               {"W": w, "big": np.array(factor, np.float32), "big2": np.array(factor, np.float32), "W2": w.T.copy()})
    x = fk.fp16_exact(rng.standard_normal((rows, dim)).astype(np.float32))
    return m, {"x": x}


def rows(diag):
    return diag.table.set_index("TensorName")


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_extract_subgraph_casts_only_fp16_stored_inputs():
    from toolkit.reexec.repro import extract_subgraph

    model, feeds = scale_chain()
    ref = fk.reference(model, feeds)
    sub, ins, exp = extract_subgraph(model, ["unscale"], ref, stored_fp16={"mm"})
    assert list(ins) == ["scaled"] and ins["scaled"].dtype == np.float32  # 'scaled' not FP16-stored: as is
    sub, ins, exp = extract_subgraph(model, ["unscale"], ref, stored_fp16={"scaled"})
    assert list(ins) == ["scaled__fp16"] and ins["scaled__fp16"].dtype == np.float16
    onnx.checker.check_model(sub)
    np.testing.assert_array_equal(ins["scaled__fp16"], ref["scaled"].astype(np.float16))
    import onnxruntime as ort

    sess = ort.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, ins)[0]
    np.testing.assert_allclose(out, ref["scaled"].astype(np.float16).astype(np.float32) / np.float32(30000.0))


@pytest.mark.parametrize("name", ["STRING", "BFLOAT16", "INT4"])
def test_repro_files_read_back_and_feed_the_reproducer(name, tmp_path):
    from toolkit.reexec.repro import write_repro
    from toolkit.inputs.npz import load_npz
    from toolkit.inputs.spec import input_specs
    from toolkit.ort.reference import ReferenceRunner

    model = CPU_MODELS[name]
    feeds = {"x": FEED}
    golden = ReferenceRunner(model).run(feeds)
    golden.update(feeds)
    last = model.graph.node[-1].name
    folder = write_repro(model, [last], golden, Config().to_dict(), tmp_path / "repro")
    sub = onnx.load(folder / "model.onnx")
    for fname in ("inputs.npz", "expected.npz"):
        with np.load(folder / fname, allow_pickle=False) as z:
            assert all(z[k].dtype.kind in "biufU" for k in z.files)
    loaded = load_npz(folder / "inputs.npz", input_specs(sub))
    for k, v in loaded.items():
        ref = np.asarray(golden[k])
        assert v.dtype == ref.dtype and v.tolist() == ref.tolist()
