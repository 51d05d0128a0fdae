"""Padding sensitivity (toolkit/gears/padding.py): an unmasked Softmax or mean pooling is named, masked variants
are clean, a transposed flatten is caught, and the severity follows whether the leak reaches an output."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit import samples
from toolkit.config.schema import Config
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, pad_feeds


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _float_model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _flatten_model(transpose: bool):
    shape = helper.make_tensor("flat", TensorProto.INT64, [2], [1, -1])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="swap", perm=[0, 2, 1])] if transpose else []
    nodes.append(helper.make_node("Reshape", ["xt" if transpose else "x", "flat"], ["y"], name="flatten"))
    return _float_model(nodes, [("x", [1, "seq", 4])], [("y", [1, "seq_x_4"])], [shape])


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
    pool = _float_model([helper.make_node("ReduceMean", ["x"], ["y"], name="mean_pool", axes=[1], keepdims=0)],
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
    masked = _float_model(nodes, [("x", [1, "seq", 4]), ("mask", [1, "seq"])], [("y", [1, 4])], inits)
    feeds["mask"] = np.ones((1, 5), np.float32)
    rep = padding_sensitivity(masked, feeds, {"x": (1, 8, 4), "mask": (1, 8)})
    assert rep.findings == [] and rep.summary["leaks"] == 0
    np.testing.assert_allclose(_ort(masked, feeds)[0], feeds["x"].mean(axis=1), rtol=1e-6)


# ------------------------------------------------------------------------------ padding leaks and exit code (kind)
def _batch_sum_model():
    ax0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
    return _float_model([helper.make_node("ReduceSum", ["x", "ax0"], ["s"], name="bsum", keepdims=1),
                   helper.make_node("Add", ["x", "s"], ["y"], name="add")], [("x", ["N", 3])], [("y", ["N", 3])], [ax0])


def _dead_leak_model():
    """ReduceMean over the padded axis whose result is multiplied by 0 before the output: a leak that dies."""
    zero = numpy_helper.from_array(np.zeros((1, 1, 1), np.float32), "zero")
    return _float_model([helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[1], keepdims=1),
                   helper.make_node("Mul", ["mu", "zero"], ["z0"], name="mul0"),
                   helper.make_node("Add", ["x", "z0"], ["y"], name="add")],
                  [("x", [1, "seq", 4])], [("y", [1, "seq", 4])], [zero])


@pytest.mark.parametrize("case", ["batch_sum", "dead", "softmax"])
def test_finding_severity_follows_whether_the_leak_reaches_an_output(case):
    if case == "batch_sum":
        m, feeds, target = _batch_sum_model(), {"x": np.arange(9, dtype=np.float32).reshape(3, 3)}, {"x": (4, 3)}
        pads = {"x": 1.0}
    elif case == "dead":
        m, feeds, target = _dead_leak_model(), {"x": np.random.RandomState(0).rand(1, 5, 4).astype(np.float32)}, \
            {"x": (1, 8, 4)}
        pads = {}
    else:
        m, feeds = samples.build_transformer_seq(), samples.transformer_seq_inputs(0, 24)
        target, pads = {"x": (1, 32, 64)}, {}
    rep = padding_sensitivity(m, feeds, target, pads)
    assert rep.findings
    for f in rep.findings:
        assert (f.severity == "error") == bool(f.evidence["reaches_outputs"])
        assert set(f.evidence["reaches_outputs"]) <= set(rep.summary["outputs_leak"])
    # independent: does padding change an output? (onnxruntime, padded vs exact, valid region)
    import onnxruntime as ort
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    exact = sess.run(None, feeds)[0]
    padded = sess.run(None, pad_feeds(feeds, target, pads))[0][tuple(slice(0, n) for n in exact.shape)]
    changed = not np.allclose(padded, exact, rtol=1e-4, atol=1e-6)
    assert bool(rep.summary["outputs_leak"]) == changed == (case != "dead")
