"""Gear sessions (toolkit/gears/session.py): gear runs against onnxruntime on the exact input, output slicing,
feeds checked like the CLI's, gear dims on static model dims, and pad values."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from toolkit.commands.common import config_from_dict, load_config
from toolkit import samples
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError, ModelError
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, pad_feeds

GEAR_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32", "precision_mode": "force_fp32"}


def _feeds(length: int) -> dict:
    rng = np.random.default_rng(length)
    return {"x": rng.standard_normal((1, length, 64)).astype(np.float32), "mask": np.ones((1, length), np.float32)}


def test_gear_session_takes_a_dict_and_a_sample_name():
    gs = GearSession("transformer_seq_masked", dict(GEAR_CFG))
    feeds = _feeds(10)
    got = gs.run(feeds)
    m = samples.build_transformer_seq_masked()
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.gear == (16, 16) and got.outputs["y"].shape == ref.shape == (1, 10, 64)
    np.testing.assert_allclose(got.outputs["y"], ref, rtol=0, atol=1e-5)


def test_gear_session_config_types():
    m = samples.build_transformer_seq_masked()
    assert GearSession(m, Config.from_dict(GEAR_CFG)).spec.gears == ((16, 16), (32, 32))
    with pytest.raises(ConfigError, match="needs gears"):  # None: the defaults, which have no gears
        GearSession(m, None)
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        GearSession(m, {**GEAR_CFG, "bogus": 1})
    with pytest.raises(ConfigError, match="repeats gear"):  # a dict is validated like a config file
        GearSession(m, {**GEAR_CFG, "dynamic_dims": "16,16;16,16"})
    for bad in (5, "x:1,-1", [GEAR_CFG]):
        with pytest.raises(TypeError, match="config must be a toolkit.config.schema.Config, a dict"):
            GearSession(m, bad)
    with pytest.raises(TypeError, match="model must be"):
        GearSession(3, GEAR_CFG)


@pytest.fixture(scope="module")
def masked_session():
    return GearSession(samples.build_transformer_seq_masked(), GEAR_CFG)


def test_gear_session_feeds_checked_like_the_cli(masked_session):
    feeds = _feeds(10)
    with pytest.raises(TypeError, match=r"\{input name: numpy array\} dict"):
        masked_session.run(feeds["x"])
    with pytest.raises(InputError, match="dtype float64.*cast"):
        masked_session.run({**feeds, "x": feeds["x"].astype(np.float64)})
    with pytest.raises(TypeError, match="'x' is a list, not a numpy array"):
        masked_session.run({**feeds, "x": feeds["x"].tolist()})
    with pytest.raises(InputError, match=r"unexpected \['z'\]"):
        masked_session.run({**feeds, "z": np.zeros(1, np.float32)})
    assert not masked_session.sessions  # every refusal came before a gear compiled


MASKED_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32;64,64"}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


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


def _float_model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_batch_gears_slice_the_batch_back():
    m = _float_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", ["N", 3])], [("y", ["N", 3])])
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
    return _float_model(nodes, [("x", [1, "seq", 4])], [("y", [1, "seq_x_4"])], [shape])


def test_flattened_output_is_cut_to_the_inferred_exact_size():
    m = _flatten_model(transpose=False)
    gs = GearSession(m, Config.from_dict({"input_shape": "x:1,-1,4", "dynamic_dims": "4;8",
                                          "precision_mode": "force_fp32"}))
    x = np.arange(24, dtype=np.float32).reshape(1, 6, 4)
    run = gs.run({"x": x})
    assert run.gear == (8,) and run.run.outputs["y"].shape == (1, 32)
    np.testing.assert_array_equal(run.outputs["y"], x.reshape(1, 24))  # padded rows come last once flattened


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


# ------------------------------------------------------------------------------ -1 on a static dim (kind)
def test_gear_dim_on_a_static_model_dim_is_refused_before_any_gear_compiles():
    m = _float_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", [1, 3])], [("y", [1, 3])])
    with pytest.raises(ConfigError, match=r"-1 marks dim 0 of 'x' as a gear dim, but that dim is static \(1\)") as exc:
        GearSession(m, config_from_dict({"input_shape": "x:-1,3", "dynamic_batch_size": "1,2,4"}))
    _one_line(exc)
    dyn = _float_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", ["N", 3])], [("y", ["N", 3])])
    GearSession(dyn, Config.from_dict({"input_shape": "x:-1,3", "dynamic_batch_size": "1,2,4"}))  # fine: N is dynamic
    with pytest.raises(ConfigError, match="input 'x' dim 1 is 3 in the model but 4 was given"):
        GearSession(dyn, config_from_dict({"input_shape": "x:-1,4", "dynamic_batch_size": "1,2"}))


@pytest.mark.parametrize("dtype,fill,msg", [(np.float32, 1e39, "outside the float32 range"),
                                            (np.float16, 7e4, "outside the float16 range"),
                                            (np.int64, 0.5, "not an integer"), (np.int8, 300, "not an integer"),
                                            (np.bool_, 2, "not an integer")])
def test_pad_value_the_input_type_cannot_hold(dtype, fill, msg):
    with pytest.raises(InputError, match=msg):
        pad_feeds({"x": np.zeros((1, 2), dtype)}, {"x": (1, 4)}, {"x": fill})
