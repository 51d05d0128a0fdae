"""Reproducers (toolkit/reexec/repro.py): extracted subgraphs cast only FP16-stored inputs, and repro files read
back and feed the reproducer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.dtype_models import CPU_MODELS, FEED
from tests.graphs import mlp_model
from tests.faultkinds import builders as fk
from toolkit.config.schema import Config
from toolkit.ir.load import load_model
from toolkit.ir.weights import has_mapped
from toolkit.reexec.repro import write_repro


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


@pytest.mark.parametrize("node", ["mm0", "mm1", "mm2"])
def test_reproducer_of_a_model_with_weights_on_disk_holds_them(tmp_path, node):
    """A weight the loader left on disk (toolkit.ir.weights) is read into the reproducer, which then runs from
    its own folder and gives x @ W computed with numpy."""
    src = tmp_path / "model"
    src.mkdir()
    path, inits = mlp_model(src, np.random.default_rng(5))
    model = load_model(path)
    assert has_mapped(model)
    i = int(node[2:])
    x = np.random.default_rng(6).standard_normal((1, 16, inits[f"W{i}"].shape[0])).astype(np.float32)
    folder = write_repro(model, [node], {f"x{i}": x, f"m{i}": x @ inits[f"W{i}"]}, Config().to_dict(),
                         tmp_path / "repro", stored_fp16=())
    (tmp_path / "model").rename(tmp_path / "moved")  # nothing may refer back to the model's folder
    sub = onnx.load(str(folder / "model.onnx"))
    got = onnxruntime.InferenceSession(sub.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {f"x{i}": x})[0]
    np.testing.assert_allclose(got, x @ inits[f"W{i}"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("text", [None, "MaxAbsoluteError<=1e-3", "CosineSimilarity<0.999,RMSE=off"])
def test_the_reproducer_command_judges_with_the_diagnosis_lines(text, tmp_path):
    """Kind: a diagnosis run with lines of the user's (--thresholds/--atol): README.txt's command carries them,
    so the reproducer judges as the diagnosis did (it gave a PASS where the diagnosis failed); lines of a tensor
    the reproducer does not hold are left out (its command would be refused)."""
    import shlex

    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.reexec.repro import write_repro

    model = CPU_MODELS["STRING"]
    feeds = {"x": FEED}
    from toolkit.ort.reference import ReferenceRunner

    golden = {**ReferenceRunner(model).run(feeds), **feeds}
    lines = resolve_thresholds(None if text is None else text + ",nowhere:CosineSimilarity<0.5")
    folder = write_repro(model, [model.graph.node[-1].name], golden, Config().to_dict(), tmp_path / "repro",
                         thresholds=lines)
    run = next(line for line in (folder / "README.txt").read_text().splitlines() if line.startswith("Run:"))
    args = shlex.split(run[len("Run:"):])
    if text is None:
        assert "--thresholds" not in args
        return
    written = resolve_thresholds(args[args.index("--thresholds") + 1])
    assert dict(written) == dict(lines) and written.explicit == lines.explicit and not written.per_tensor
