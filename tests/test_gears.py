"""Shape gears: config parsing, gear runs against onnxruntime on the exact input, output slicing, padding
sensitivity (unmasked Softmax named, masked variant clean), and the compile/run CLI with gears."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit import samples
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError, ModelError
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, pad_feeds
from toolkit.gears.spec import parse_gears

MASKED_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32;64,64"}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------------------------- config
def test_parse_dims_and_batch_gears():
    spec = parse_gears(Config.from_dict({**MASKED_CFG, "pad_value": "mask:0;x:-1.5"}))
    assert spec.kind == "dims" and spec.slots == (("x", 1), ("mask", 1))
    assert spec.gears == ((16, 16), (32, 32), (64, 64))
    assert spec.shapes((32, 32)) == {"x": (1, 32, 64), "mask": (1, 32)}
    assert spec.pad_values == {"x": -1.5, "mask": 0.0}
    b = parse_gears(Config.from_dict({"input_shape": "x:-1,3,8,8", "dynamic_batch_size": "1,2,4,8",
                                      "pad_value": {"x": 2}}))
    assert b.kind == "batch" and b.gears == ((1,), (2,), (4,), (8,)) and b.pad_values == {"x": 2.0}
    assert parse_gears(Config()) is None


@pytest.mark.parametrize("data,msg", [
    ({"input_shape": "x:1,-1;m:1,-1", "dynamic_dims": "16;32"}, "gear 1 '16' has 1 value\\(s\\) but input_shape has 2"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16;0"}, "'0' is not a positive integer"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16;abc"}, "'abc' is not a positive integer"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16"}, "gives 1 gear\\(s\\); the converter takes 2 to 100"),
    ({"input_shape": "x:1,-1", "dynamic_dims": ";".join(str(i) for i in range(1, 102))}, "gives 101 gear"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "16;16"}, "repeats gear 16"),
    ({"input_shape": "x:-1,-1", "dynamic_dims": "1,2;2,4", "dynamic_batch_size": "1,2"}, "exclusive"),
    ({"input_shape": "x:1,-1"}, "has -1 dims but no gears"),
    ({"input_shape": "x:1,16", "dynamic_dims": "16;32"}, "needs input_shape with -1"),
    ({"input_shape": "x:1,-1", "dynamic_batch_size": "1,2"}, "batch dim \\(dim 0\\) only.*x dim 1"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;16", "pad_value": "y:0"}, "names 'y', which is not an input"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;16", "pad_value": "x:abc"}, "expected a number"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;16", "pad_value": "x:nan"}, "NaN"),
    ({"input_shape": "x:1,16", "pad_value": "x:0"}, "no gears pad anything"),
    ({"input_shape": "x:1,-2", "dynamic_dims": "8;16"}, "sizes >= 1 \\(or -1 for a gear dim\\)"),
    ({"input_shape": "x:-1,3", "dynamic_batch_size": [1, 2]}, "expected a string like \"1,2,4,8\""),
])
def test_bad_gear_configs_are_one_line_errors(data, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        Config.from_dict(data)
    _one_line(exc)


def test_single_shape_commands_refuse_gear_dims():
    cfg = Config.from_dict(MASKED_CFG)
    with pytest.raises(ConfigError, match="only 'compile' and 'run' choose a gear") as exc:
        cfg.input_shapes()
    _one_line(exc)


# ----------------------------------------------------------------------------------------------- padding
def test_pad_feeds_by_hand():
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(1, 2, 3), "m": np.ones((1, 2), np.int64)}
    out = pad_feeds(feeds, {"x": (1, 4, 3), "m": (1, 4)}, {"x": -7.0})
    want_x = np.full((1, 4, 3), -7.0, np.float32)
    want_x[0, :2] = [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_array_equal(out["x"], want_x)
    np.testing.assert_array_equal(out["m"], np.array([[1, 1, 0, 0]]))
    assert out["m"].dtype == np.int64
    with pytest.raises(InputError, match="not an integer"):
        pad_feeds(feeds, {"m": (1, 4)}, {"m": 0.5})


# ----------------------------------------------------------------------------------------------- gear runs
@pytest.fixture(scope="module")
def masked_model():
    return samples.build_transformer_seq_masked()


@pytest.mark.parametrize("mode", ["force_fp32", "allow_mix_precision"])
def test_masked_transformer_gears_match_onnxruntime_on_the_exact_input(masked_model, mode):
    gs = GearSession(masked_model, Config.from_dict({**MASKED_CFG, "precision_mode": mode}))
    # below the first gear, at a gear, between gears, at the largest gear
    for length, gear, padded in ((8, 16, True), (16, 16, False), (24, 32, True), (40, 64, True), (64, 64, False)):
        feeds = samples.transformer_seq_masked_inputs(1, length)
        run = gs.run(feeds)
        assert run.gear == (gear, gear) and run.padded is padded
        ref = _ort(masked_model, feeds)[0]  # onnxruntime at the exact, unpadded shape
        got = run.outputs["y"]
        assert got.shape == (1, length, 64) == ref.shape
        if mode == "force_fp32":
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)
        else:  # FP16 storage: within FP16 noise of the largest value
            np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3 * np.abs(ref).max())
    assert sorted(gs.sessions) == [(16, 16), (32, 32), (64, 64)]  # compiled lazily, once each


def test_input_above_the_largest_gear_names_the_gears(masked_model):
    gs = GearSession(masked_model, Config.from_dict(MASKED_CFG))
    with pytest.raises(InputError) as exc:
        gs.run(samples.transformer_seq_masked_inputs(0, 65))
    msg = _one_line(exc)
    assert 'dynamic_dims "16,16;32,32;64,64"' in msg and "x[1]=65" in msg
    assert not gs.sessions  # refused before compiling anything


def test_input_not_matching_static_dims(masked_model):
    gs = GearSession(masked_model, Config.from_dict(MASKED_CFG))
    with pytest.raises(InputError, match="input_shape says 'x:1,N,64'"):
        gs.run({"x": np.zeros((1, 8, 32), np.float32), "mask": np.ones((1, 8), np.float32)})


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_batch_gears_slice_the_batch_back():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", ["N", 3])], [("y", ["N", 3])])
    gs = GearSession(m, Config.from_dict({"input_shape": "x:-1,3", "dynamic_batch_size": "1,2,4",
                                          "precision_mode": "force_fp32"}))
    x = np.array([[-1, 2, -3], [4, -5, 6], [7, 8, -9]], np.float32)
    run = gs.run({"x": x})
    assert run.gear == (4,) and run.run.outputs["y"].shape == (4, 3)
    np.testing.assert_array_equal(run.outputs["y"], np.maximum(x, 0))


def _flatten_model(transpose: bool):
    shape = helper.make_tensor("flat", TensorProto.INT64, [2], [1, -1])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="swap", perm=[0, 2, 1])] if transpose else []
    nodes.append(helper.make_node("Reshape", ["xt" if transpose else "x", "flat"], ["y"], name="flatten"))
    return _model(nodes, [("x", [1, "seq", 4])], [("y", [1, "seq_x_4"])], [shape])


def test_flattened_output_is_cut_to_the_inferred_exact_size():
    m = _flatten_model(transpose=False)
    gs = GearSession(m, Config.from_dict({"input_shape": "x:1,-1,4", "dynamic_dims": "4;8",
                                          "precision_mode": "force_fp32"}))
    x = np.arange(24, dtype=np.float32).reshape(1, 6, 4)
    run = gs.run({"x": x})
    assert run.gear == (8,) and run.run.outputs["y"].shape == (1, 32)
    np.testing.assert_array_equal(run.outputs["y"], x.reshape(1, 24))  # padded rows come last once flattened


def test_transposed_flatten_is_caught_by_padding_sensitivity():
    m = _flatten_model(transpose=True)
    x = np.arange(24, dtype=np.float32).reshape(1, 6, 4) + 1
    gs = GearSession(m, Config.from_dict({"input_shape": "x:1,-1,4", "dynamic_dims": "4;8",
                                          "precision_mode": "force_fp32"}))
    wrong = gs.run({"x": x}).outputs["y"]  # leading 24 of the padded flatten: not the exact flatten
    assert wrong.shape == (1, 24) and not np.array_equal(wrong, x.transpose(0, 2, 1).reshape(1, 24))
    rep = padding_sensitivity(m, {"x": x}, {"x": (1, 8, 4)})
    assert [(f.subject, f.evidence["op_type"]) for f in rep.findings] == [("flatten", "Reshape")]
    assert rep.summary["outputs_leak"] == ["y"]


def test_output_of_unknown_size_is_refused():
    graph = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"], name="nonzero")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2, "nnz"])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    gs = GearSession(m, Config.from_dict({"input_shape": "x:1,-1", "dynamic_dims": "4;8"}))
    x = np.array([[0, 1, 2, 0, 3, 4]], np.float32)
    with pytest.raises(ModelError, match="output 'y' axis 1 \\('nnz'\\) has size 4 in gear 8 but the exact "
                                         "input gives an unknown size") as exc:
        gs.run({"x": x})
    _one_line(exc)


# ----------------------------------------------------------------------------------------------- sensitivity
def _target(feeds, n):
    return {k: v.shape[:1] + (n,) + v.shape[2:] for k, v in feeds.items()}


def test_padding_sensitivity_names_the_unmasked_softmax():
    m = samples.build_transformer_seq()
    feeds = samples.transformer_seq_inputs(0, 24)
    rep = padding_sensitivity(m, feeds, _target(feeds, 32))
    assert [(f.kind, f.subject, f.evidence["op_type"]) for f in rep.findings] == [("padding_leak", "attn_softmax",
                                                                                  "Softmax")]
    assert rep.findings[0].evidence["first"] and rep.findings[0].evidence["reduces_padded_axis"]
    assert rep.summary["first_leak"] == {"tensor": "attn_softmax", "node": "attn_softmax", "op_type": "Softmax"}
    assert rep.summary["outputs_leak"] == ["y"]
    # independent check of the finding: the padded run's valid tokens really differ from the exact run
    padded = pad_feeds(feeds, _target(feeds, 32), {})
    assert np.abs(_ort(m, padded)[0][:, :24] - _ort(m, feeds)[0]).max() > 1e-2
    # and everything before the Softmax is clean
    before = rep.table[rep.table["Index"] < rep.table.set_index("Tensor").loc["attn_softmax", "Index"]]
    assert set(before["Status"]) == {"clean"}


def test_padding_sensitivity_masked_variant_is_clean():
    m = samples.build_transformer_seq_masked()
    feeds = samples.transformer_seq_masked_inputs(0, 24)
    rep = padding_sensitivity(m, feeds, _target(feeds, 32), {"mask": 0.0})
    assert rep.findings == [] and rep.summary["leaks"] == 0 and rep.summary["first_leak"] is None
    # the Softmax does reduce over the padded key axis: the mask is what makes it safe
    assert bool(rep.table.set_index("Tensor").loc["attn_softmax", "ReducesPaddedAxis"])
    # padding the mask with 1 unmasks the padded keys: the Softmax leaks again
    rep1 = padding_sensitivity(m, feeds, _target(feeds, 32), {"mask": 1.0})
    assert [f.subject for f in rep1.findings] == ["attn_softmax"]


def test_padding_sensitivity_names_mean_pooling_and_not_masked_pooling():
    pool = _model([helper.make_node("ReduceMean", ["x"], ["y"], name="mean_pool", axes=[1], keepdims=0)],
                  [("x", [1, "seq", 4])], [("y", [1, 4])])
    feeds = {"x": np.random.RandomState(0).rand(1, 5, 4).astype(np.float32)}
    rep = padding_sensitivity(pool, feeds, {"x": (1, 8, 4)})
    assert [(f.subject, f.evidence["op_type"]) for f in rep.findings] == [("mean_pool", "ReduceMean")]
    # masked mean: sum(x * mask) / sum(mask) over the sequence
    nodes = [helper.make_node("Unsqueeze", ["mask", "ax2"], ["m3"], name="mask_unsqueeze"),
             helper.make_node("Mul", ["x", "m3"], ["xm"], name="mask_mul"),
             helper.make_node("ReduceSum", ["xm", "ax1"], ["s"], name="masked_sum", keepdims=0),
             helper.make_node("ReduceSum", ["mask", "ax1"], ["n"], name="mask_count", keepdims=1),
             helper.make_node("Div", ["s", "n"], ["y"], name="masked_mean")]
    inits = [helper.make_tensor("ax1", TensorProto.INT64, [1], [1]), helper.make_tensor("ax2", TensorProto.INT64, [1], [2])]
    masked = _model(nodes, [("x", [1, "seq", 4]), ("mask", [1, "seq"])], [("y", [1, 4])], inits)
    feeds["mask"] = np.ones((1, 5), np.float32)
    rep = padding_sensitivity(masked, feeds, {"x": (1, 8, 4), "mask": (1, 8)})
    assert rep.findings == [] and rep.summary["leaks"] == 0
    np.testing.assert_allclose(_ort(masked, feeds)[0], feeds["x"].mean(axis=1), rtol=1e-6)


# ----------------------------------------------------------------------------------------------- CLI
def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_compile_and_run_cli_with_gears(tmp_path):
    cfg = tmp_path / "gears.json"
    cfg.write_text(json.dumps({**MASKED_CFG, "pad_value": "mask:0"}))
    r = _cli("compile", "transformer_seq_masked", "--config", cfg, "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "c" / "gears.json").read_text())
    assert [g["label"] for g in meta["gears"]] == ["16x16", "32x32", "64x64"]
    for g in meta["gears"]:
        plan = json.loads((tmp_path / "c" / g["folder"] / "plan.json").read_text())
        assert plan["config"]["input_shape"] == g["input_shape"]
    feeds = samples.transformer_seq_masked_inputs(2, 20)
    np.savez(tmp_path / "in.npz", **feeds)
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert "gear 32x32" in r.stdout and "padding is safe" in r.stdout
    with np.load(tmp_path / "r" / "outputs.npz") as z:
        y = z["y"]
    ref = _ort(samples.build_transformer_seq_masked(), feeds)[0]
    np.testing.assert_allclose(y, ref, rtol=0, atol=2e-3 * np.abs(ref).max())
    assert json.loads((tmp_path / "r" / "gear.json").read_text())["padded"] is True
    big = samples.transformer_seq_masked_inputs(2, 70)
    np.savez(tmp_path / "big.npz", **big)
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "big.npz", "--out", tmp_path / "b")
    assert r.returncode == 2 and 'gears are dynamic_dims "16,16;32,32;64,64"' in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_run_cli_reports_the_unmasked_softmax(tmp_path):
    cfg = tmp_path / "gears.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64", "dynamic_dims": "16;32"}))
    r = _cli("run", "transformer_seq", "--config", cfg, "--out", tmp_path / "r")
    # the leak reaches the output y: the outputs are wrong, so exit 1, but everything is still written
    assert r.returncode == 1, r.stderr
    assert "first at 'attn_softmax' (Softmax)" in r.stdout and "FAILED: padding to gear 32 changes output(s) y" in r.stdout
    rep = json.loads((tmp_path / "r" / "padding.json").read_text())
    assert [(f["subject"], f["severity"]) for f in rep["findings"]] == [("attn_softmax", "error")]
    assert rep["outputs_leak"] == ["y"] and (tmp_path / "r" / "outputs.npz").is_file()
    bad = _cli("diagnose", "transformer_seq", "--config", cfg, "--out", tmp_path / "d")
    assert bad.returncode == 2 and "only 'compile' and 'run' choose a gear" in bad.stderr


@pytest.mark.slow
def test_ppocr_rec_width_gears_keep_the_decoded_text():
    from toolkit import zoo
    from toolkit.inputs import realistic_inputs

    m = onnx.load(str(zoo.fetch("ppocr_rec")))
    feeds = realistic_inputs("ppocr_rec")  # rendered text, width 320
    ref = _ort(m, feeds)[0]
    gs = GearSession(m, Config.from_dict({"input_shape": "x:1,3,48,-1", "dynamic_dims": "240;480"}))
    run = gs.run(feeds)
    y = run.outputs["softmax_11.tmp_0"]
    assert run.gear == (480,) and run.run.outputs["softmax_11.tmp_0"].shape[1] > y.shape[1]
    assert y.shape == ref.shape  # the time axis is cut to the exact run's length (rule 3)
    np.testing.assert_array_equal(y.argmax(-1), ref.argmax(-1))  # same CTC path, same text
    rep = padding_sensitivity(m, feeds, {"x": (1, 3, 48, 480)})
    assert rep.summary["first_leak"]["op_type"] == "Conv"  # the edge columns see padding through the windows
