"""Small built-in sample models (written by us, seeded and deterministic) and their realistic inputs.

These models cover the patterns the compiler and the precision analyses care about:

- ``resnet_small``: residual CNN, Conv-BatchNormalization-Relu blocks with non-trivial BN statistics
  (BN folding, Conv+Relu buffer fusion), GlobalAveragePool, Flatten, Gemm -> 10 logits. Input "x" 1x3x32x32.
- ``transformer_block``: pre-LN encoder block with decomposed LayerNorm, 4-head attention with an additive
  mask bias ``(1 - mask) * -10000`` and erf-GELU (LayerNorm / attention / GELU fusions; FP16 overflow in
  the variance and the mask bias). Inputs "x" 1x16x64 and "mask" 1x16 (0/1 float).
- ``detector_head``: conv head on a 1x16x20x20 feature map, anchor box decoding (Exp, Mul, Add), Sigmoid
  scores, TopK, NonMaxSuppression and Gather of the kept boxes (data-dependent output size).
- ``transformer_seq`` / ``transformer_seq_masked``: the encoder block over a dynamic sequence length
  ``seq`` (x 1x``seq``x64; the masked variant adds mask 1x``seq`` and the ``(1 - mask) * -10000`` key bias),
  for shape gears (toolkit.gears): the unmasked attention Softmax reads padded keys, the masked one does not.
  Generated inputs have 24 tokens.

The canonical files live in :data:`SAMPLES_DIR` (``toolkit/data/``, shipped in the wheel);
``sample_models/build.py`` rebuilds them there and copies them to ``sample_models/``. Weights come from
``numpy.random.RandomState`` (its streams are frozen across numpy versions), models use opset 17 and
IR version 8, so a rebuild is bit-identical.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.errors import UserError

#: Canonical location of the built sample models (packaged with toolkit).
SAMPLES_DIR = Path(__file__).resolve().parent / "data"
OPSET = 17
IR_VERSION = 8
PRODUCER = "npuscope.samples"
#: Default seed for weights and inputs.
SEED = 0
_IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
_IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


class _GraphBuilder:
    """Collects named nodes and float32/int64 initializers; refuses duplicate node or tensor names."""

    def __init__(self, seed: int):
        self.rs = np.random.RandomState(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    def const(self, name: str, value) -> str:
        array = np.asarray(value)
        array = array.astype(np.int64 if array.dtype.kind in "iu" else np.float32)
        assert name not in self._names, name
        self._names.add(name)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        """Add node ``name``; its single output tensor is also called ``name``. Returns the output name."""
        assert name not in self._names, name
        self._names.add(name)
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def node_n(self, op: str, inputs: list[str], name: str, outputs: list[str], **attrs) -> list[str]:
        assert name not in self._names and not self._names & set(outputs), name
        self._names.update([name, *outputs])
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
        return outputs

    def normal(self, shape, std: float, mean: float = 0.0) -> np.ndarray:
        return (mean + std * self.rs.standard_normal(shape)).astype(np.float32)

    def model(self, name: str, doc: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits, doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=PRODUCER, producer_version="1", ir_version=IR_VERSION)
        onnx.checker.check_model(model, full_check=True)
        return model


# ---------------------------------------------------------------- resnet_small

def _conv_bn(b: _GraphBuilder, prefix: str, x: str, cin: int, cout: int, k: int = 3, stride: int = 1) -> str:
    w = b.const(f"{prefix}_conv.weight", b.normal((cout, cin, k, k), np.sqrt(2.0 / (cin * k * k))))
    y = b.node("Conv", [x, w], f"{prefix}_conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    stats = [
        b.const(f"{prefix}_bn.scale", b.rs.uniform(0.5, 1.5, cout)),
        b.const(f"{prefix}_bn.bias", b.normal(cout, 0.1)),
        b.const(f"{prefix}_bn.mean", b.normal(cout, 0.2)),
        b.const(f"{prefix}_bn.var", b.rs.uniform(0.5, 2.0, cout)),
    ]
    return b.node("BatchNormalization", [y, *stats], f"{prefix}_bn", epsilon=1e-5)


def _residual_block(b: _GraphBuilder, prefix: str, x: str, cin: int, cout: int, stride: int) -> str:
    t = b.node("Relu", [_conv_bn(b, f"{prefix}_a", x, cin, cout, stride=stride)], f"{prefix}_a_relu")
    t = _conv_bn(b, f"{prefix}_b", t, cout, cout)
    shortcut = x if stride == 1 and cin == cout else _conv_bn(b, f"{prefix}_proj", x, cin, cout, k=1, stride=stride)
    return b.node("Relu", [b.node("Add", [t, shortcut], f"{prefix}_add")], f"{prefix}_relu")


def build_resnet_small(seed: int = SEED) -> onnx.ModelProto:
    """Residual CNN: x float32[1,3,32,32] (ImageNet-normalised RGB) -> logits float32[1,10]."""
    b = _GraphBuilder(seed)
    h = b.node("Relu", [_conv_bn(b, "stem", "x", 3, 16)], "stem_relu")
    h = _residual_block(b, "block1", h, 16, 16, stride=1)
    h = _residual_block(b, "block2", h, 16, 32, stride=2)
    h = _residual_block(b, "block3", h, 32, 32, stride=1)
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h], "head_pool")], "head_flatten", axis=1)
    w = b.const("classifier.weight", b.normal((10, 32), np.sqrt(1.0 / 32)))
    bias = b.const("classifier.bias", b.normal(10, 0.1))
    b.node_n("Gemm", [h, w, bias], "classifier", ["logits"], transB=1)
    return b.model("resnet_small", "residual CNN sample (npuscope)",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])])


def resnet_small_inputs(seed: int = SEED) -> dict[str, np.ndarray]:
    """A smooth synthetic RGB image (8x8 colour blocks, bilinear-ish ramp, light noise) in [0,1], normalised
    with ImageNet mean/std: x float32[1,3,32,32]."""
    rs = np.random.RandomState(seed + 1000)
    blocks = np.kron(rs.uniform(0.1, 0.9, (1, 3, 8, 8)), np.ones((1, 1, 4, 4)))
    ramp = np.linspace(-0.1, 0.1, 32)[None, None, :, None]
    image = np.clip(blocks + ramp + rs.normal(0, 0.02, (1, 3, 32, 32)), 0.0, 1.0).astype(np.float32)
    return {"x": ((image - _IMAGENET_MEAN) / _IMAGENET_STD).astype(np.float32)}


# ---------------------------------------------------------------- transformer_block

_SEQ, _DIM, _HEADS, _FFN = 16, 64, 4, 256


def _layernorm(b: _GraphBuilder, p: str, x: str) -> str:
    """Decomposed LayerNorm over the last axis, as PyTorch exporters emit it (eps 1e-5)."""
    mean = b.node("ReduceMean", [x], f"{p}_mean", axes=[-1], keepdims=1)
    centred = b.node("Sub", [x, mean], f"{p}_sub")
    sq = b.node("Pow", [centred, b.const(f"{p}.pow_exp", np.float32(2.0))], f"{p}_pow")
    var = b.node("ReduceMean", [sq], f"{p}_var", axes=[-1], keepdims=1)
    std = b.node("Sqrt", [b.node("Add", [var, b.const(f"{p}.eps", np.float32(1e-5))], f"{p}_add_eps")], f"{p}_sqrt")
    normed = b.node("Div", [centred, std], f"{p}_div")
    scaled = b.node("Mul", [normed, b.const(f"{p}.weight", b.normal(_DIM, 0.1, 1.0))], f"{p}_scale")
    return b.node("Add", [scaled, b.const(f"{p}.bias", b.normal(_DIM, 0.05))], f"{p}_shift")


def _linear(b: _GraphBuilder, p: str, x: str, cin: int, cout: int) -> str:
    w = b.const(f"{p}.weight", b.normal((cin, cout), np.sqrt(1.0 / cin)))
    return b.node("Add", [b.node("MatMul", [x, w], f"{p}_matmul"), b.const(f"{p}.bias", b.normal(cout, 0.02))],
                  f"{p}_bias")


def _heads(b: _GraphBuilder, p: str, x: str, perm: list[int]) -> str:
    head_shape = b.const(f"{p}.head_shape", [1, _SEQ, _HEADS, _DIM // _HEADS])
    return b.node("Transpose", [b.node("Reshape", [x, head_shape], f"{p}_reshape")], f"{p}_transpose", perm=perm)


def _attention(b: _GraphBuilder, x: str) -> str:
    q = _heads(b, "attn_q", _linear(b, "attn_q", x, _DIM, _DIM), [0, 2, 1, 3])
    k = _heads(b, "attn_k", _linear(b, "attn_k", x, _DIM, _DIM), [0, 2, 3, 1])
    v = _heads(b, "attn_v", _linear(b, "attn_v", x, _DIM, _DIM), [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], "attn_scores_matmul")
    scale = b.const("attn.scale", np.float32(1.0 / np.sqrt(_DIM // _HEADS)))
    scores = b.node("Mul", [scores, scale], "attn_scale_mul")
    inverted = b.node("Sub", [b.const("mask.one", np.float32(1.0)), "mask"], "mask_invert_sub")
    bias = b.node("Mul", [inverted, b.const("mask.neg_big", np.float32(-10000.0))], "mask_bias_mul")
    bias = b.node("Unsqueeze", [bias, b.const("mask.unsqueeze_axes", [1, 2])], "mask_bias_unsqueeze")
    probs = b.node("Softmax", [b.node("Add", [scores, bias], "attn_mask_add")], "attn_softmax", axis=-1)
    context = b.node("MatMul", [probs, v], "attn_context_matmul")
    context = b.node("Transpose", [context], "attn_context_transpose", perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, b.const("attn.merge_shape", [1, _SEQ, _DIM])], "attn_context_reshape")
    return _linear(b, "attn_out", context, _DIM, _DIM)


def _gelu(b: _GraphBuilder, x: str) -> str:
    """erf-GELU as exporters emit it: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    t = b.node("Div", [x, b.const("gelu.sqrt2", np.float32(np.sqrt(2.0)))], "gelu_div")
    t = b.node("Add", [b.node("Erf", [t], "gelu_erf"), b.const("gelu.one", np.float32(1.0))], "gelu_add_one")
    t = b.node("Mul", [x, t], "gelu_mul")
    return b.node("Mul", [t, b.const("gelu.half", np.float32(0.5))], "gelu_half")


def build_transformer_block(seed: int = SEED) -> onnx.ModelProto:
    """Pre-LN encoder block: x float32[1,16,64], mask float32[1,16] (1 = token, 0 = padding) -> y float32[1,16,64]."""
    b = _GraphBuilder(seed)
    h = b.node("Add", ["x", _attention(b, _layernorm(b, "ln1", "x"))], "attn_residual_add")
    up = _gelu(b, _linear(b, "ffn_up", _layernorm(b, "ln2", h), _DIM, _FFN))
    b.node_n("Add", [h, _linear(b, "ffn_down", up, _FFN, _DIM)], "ffn_residual_add", ["y"])
    return b.model("transformer_block", "transformer encoder block sample (npuscope)",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, _SEQ, _DIM]),
                    helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, _SEQ])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, _SEQ, _DIM])])


def transformer_block_inputs(seed: int = SEED) -> dict[str, np.ndarray]:
    """Token embeddings N(0,1) with per-channel offset and scale (as un-normalised residual streams are),
    and a padding mask whose first 8..16 tokens are 1."""
    rs = np.random.RandomState(seed + 2000)
    offset, scale = rs.normal(0, 0.5, _DIM), rs.uniform(0.5, 2.0, _DIM)
    x = (rs.standard_normal((1, _SEQ, _DIM)) * scale + offset).astype(np.float32)
    mask = (np.arange(_SEQ) < rs.randint(8, _SEQ + 1)).astype(np.float32)[None]
    return {"x": x, "mask": mask}


# ---------------------------------------------------------------- detector_head

_FEAT_C, _GRID, _ANCHORS, _STRIDE, _TOPK = 16, 20, 2, 16, 100
_ANCHOR_WH = ((32.0, 32.0), (64.0, 32.0))  # pixels, per anchor slot


def _anchors() -> tuple[np.ndarray, np.ndarray]:
    """Anchor centres and sizes in pixels, ordered (row, col, anchor): each float32[1, 800, 2]."""
    rows, cols = np.meshgrid(np.arange(_GRID), np.arange(_GRID), indexing="ij")
    centres = np.stack([(cols + 0.5) * _STRIDE, (rows + 0.5) * _STRIDE], axis=-1)  # (H, W, 2) as (cx, cy)
    centres = np.repeat(centres[:, :, None, :], _ANCHORS, axis=2).reshape(1, -1, 2)
    sizes = np.tile(np.asarray(_ANCHOR_WH), (_GRID * _GRID, 1)).reshape(1, -1, 2)
    return centres.astype(np.float32), sizes.astype(np.float32)


def _decode_boxes(b: _GraphBuilder, deltas: str) -> str:
    """(1, A*4, H, W) deltas -> (1, H*W*A, 4) corner boxes (x1, y1, x2, y2) in pixels."""
    t = b.node("Reshape", [deltas, b.const("box.split_shape", [1, _ANCHORS, 4, _GRID, _GRID])], "box_reshape")
    t = b.node("Transpose", [t], "box_transpose", perm=[0, 3, 4, 1, 2])
    t = b.node("Reshape", [t, b.const("box.flat_shape", [1, -1, 4])], "box_flatten")
    d_xy, d_wh = b.node_n("Split", [t, b.const("box.split", [2, 2])], "box_split", ["box_d_xy", "box_d_wh"], axis=2)
    centres, sizes = _anchors()
    anchor_wh = b.const("anchor.wh", sizes)
    ctr = b.node("Add", [b.node("Mul", [d_xy, anchor_wh], "decode_ctr_mul"), b.const("anchor.ctr", centres)],
                 "decode_ctr_add")
    wh = b.node("Mul", [b.node("Exp", [d_wh], "decode_wh_exp"), anchor_wh], "decode_wh_mul")
    half = b.node("Mul", [wh, b.const("decode.half", np.float32(0.5))], "decode_half_mul")
    corners = [b.node("Sub", [ctr, half], "decode_min_sub"), b.node("Add", [ctr, half], "decode_max_add")]
    return b.node("Concat", corners, "decode_concat", axis=2)


def build_detector_head(seed: int = SEED) -> onnx.ModelProto:
    """feat float32[1,16,20,20] -> boxes float32[num_det,4] (x1,y1,x2,y2 px), scores float32[num_det].

    Anchors: stride 16 px, 2 per cell (32x32, 64x32); TopK 100 by score, then NMS (IoU 0.5, score >= 0.25,
    at most 20 boxes).
    """
    b = _GraphBuilder(seed)
    w = b.const("head_conv.weight", b.normal((_FEAT_C, _FEAT_C, 3, 3), np.sqrt(2.0 / (_FEAT_C * 9))))
    h = b.node("Conv", ["feat", w, b.const("head_conv.bias", b.normal(_FEAT_C, 0.05))], "head_conv",
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    h = b.node("Relu", [h], "head_relu")
    deltas = b.node("Conv", [h, b.const("box_conv.weight", b.normal((_ANCHORS * 4, _FEAT_C, 1, 1), 0.05)),
                             b.const("box_conv.bias", np.zeros(_ANCHORS * 4))], "box_conv", kernel_shape=[1, 1])
    score_w = np.abs(b.normal((_ANCHORS, _FEAT_C, 1, 1), 0.5))  # objectness grows with feature energy
    logits = b.node("Conv", [h, b.const("score_conv.weight", score_w), b.const("score_conv.bias", [-4.0] * _ANCHORS)],
                    "score_conv", kernel_shape=[1, 1])
    logits = b.node("Transpose", [logits], "score_transpose", perm=[0, 2, 3, 1])
    logits = b.node("Reshape", [logits, b.const("score.flat_shape", [1, -1])], "score_flatten")
    scores = b.node("Sigmoid", [logits], "score_sigmoid")
    top_scores, top_idx = b.node_n("TopK", [scores, b.const("topk.k", [_TOPK])], "score_topk",
                                   ["topk_scores", "topk_indices"], axis=1)
    axis0 = b.const("squeeze.axis0", [0])
    top_idx = b.node("Squeeze", [top_idx, axis0], "topk_indices_squeeze")
    boxes = b.node("Squeeze", [_decode_boxes(b, deltas), axis0], "boxes_squeeze")
    top_boxes = b.node("Gather", [boxes, top_idx], "topk_gather_boxes", axis=0)
    top_scores = b.node("Squeeze", [top_scores, axis0], "topk_scores_squeeze")
    nms_boxes = b.node("Unsqueeze", [top_boxes, axis0], "nms_boxes_unsqueeze")
    nms_scores = b.node("Unsqueeze", [top_scores, b.const("unsqueeze.axes01", [0, 1])], "nms_scores_unsqueeze")
    limits = [b.const("nms.max_boxes", [20]), b.const("nms.iou_threshold", [0.5]),
              b.const("nms.score_threshold", [0.25])]
    selected = b.node("NonMaxSuppression", [nms_boxes, nms_scores, *limits], "nms", center_point_box=0)
    keep = b.node("Gather", [selected, b.const("nms.box_column", np.int64(2))], "nms_box_index", axis=1)
    b.node_n("Gather", [top_boxes, keep], "gather_selected_boxes", ["boxes"], axis=0)
    b.node_n("Gather", [top_scores, keep], "gather_selected_scores", ["scores"], axis=0)
    return b.model("detector_head", "anchor detector head sample with NMS (npuscope)",
                   [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, _FEAT_C, _GRID, _GRID])],
                   [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["num_det", 4]),
                    helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["num_det"])])


def detector_head_inputs(seed: int = SEED) -> dict[str, np.ndarray]:
    """A post-ReLU-like backbone feature map: weak half-normal background plus 3-5 Gaussian "objects"
    (amplitude 1.5-3, sigma 1-2.5 cells) on random channel subsets: feat float32[1,16,20,20]."""
    rs = np.random.RandomState(seed + 3000)
    feat = np.abs(rs.normal(0, 0.2, (1, _FEAT_C, _GRID, _GRID)))
    rows, cols = np.meshgrid(np.arange(_GRID), np.arange(_GRID), indexing="ij")
    for _ in range(rs.randint(3, 6)):
        cy, cx, sigma, amp = rs.uniform(2, _GRID - 2), rs.uniform(2, _GRID - 2), rs.uniform(1, 2.5), rs.uniform(1.5, 3)
        blob = amp * np.exp(-((rows - cy) ** 2 + (cols - cx) ** 2) / (2 * sigma**2))
        channels = rs.rand(_FEAT_C) < 0.6
        feat[0, channels] += blob
    return {"feat": feat.astype(np.float32)}


# ---------------------------------------------------------------- transformer_seq (dynamic sequence length)

#: Sequence length of the generated inputs of the ``transformer_seq`` samples (the model's "seq" is dynamic).
SEQ_SAMPLE_LENGTH = 24


def _heads_seq(b: _GraphBuilder, p: str, x: str, perm: list[int]) -> str:
    """[1, seq, 64] -> heads; Reshape to [0, 0, 4, 16] (0 copies batch and seq), so seq stays dynamic."""
    head_shape = b.const(f"{p}.head_shape", [0, 0, _HEADS, _DIM // _HEADS])
    return b.node("Transpose", [b.node("Reshape", [x, head_shape], f"{p}_reshape")], f"{p}_transpose", perm=perm)


def _attention_seq(b: _GraphBuilder, x: str, masked: bool) -> str:
    """4-head attention over a dynamic sequence; ``masked``: additive ``(1 - mask) * -10000`` bias on the keys."""
    q = _heads_seq(b, "attn_q", _linear(b, "attn_q", x, _DIM, _DIM), [0, 2, 1, 3])
    k = _heads_seq(b, "attn_k", _linear(b, "attn_k", x, _DIM, _DIM), [0, 2, 3, 1])
    v = _heads_seq(b, "attn_v", _linear(b, "attn_v", x, _DIM, _DIM), [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], "attn_scores_matmul")
    scores = b.node("Mul", [scores, b.const("attn.scale", np.float32(1.0 / np.sqrt(_DIM // _HEADS)))],
                    "attn_scale_mul")
    if masked:
        inverted = b.node("Sub", [b.const("mask.one", np.float32(1.0)), "mask"], "mask_invert_sub")
        bias = b.node("Mul", [inverted, b.const("mask.neg_big", np.float32(-10000.0))], "mask_bias_mul")
        bias = b.node("Unsqueeze", [bias, b.const("mask.unsqueeze_axes", [1, 2])], "mask_bias_unsqueeze")
        scores = b.node("Add", [scores, bias], "attn_mask_add")
    probs = b.node("Softmax", [scores], "attn_softmax", axis=-1)
    context = b.node("MatMul", [probs, v], "attn_context_matmul")
    context = b.node("Transpose", [context], "attn_context_transpose", perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, b.const("attn.merge_shape", [0, 0, _DIM])], "attn_context_reshape")
    return _linear(b, "attn_out", context, _DIM, _DIM)


def build_transformer_seq(seed: int = SEED, masked: bool = False) -> onnx.ModelProto:
    """Pre-LN encoder block over a dynamic sequence: x float32[1,seq,64] (+ mask float32[1,seq], 1 = token,
    0 = padding, when ``masked``) -> y float32[1,seq,64]. Unmasked, its attention Softmax reads every key,
    so padding the sequence changes the valid tokens' outputs (the padding-sensitivity case)."""
    b = _GraphBuilder(seed)
    h = b.node("Add", ["x", _attention_seq(b, _layernorm(b, "ln1", "x"), masked)], "attn_residual_add")
    up = _gelu(b, _linear(b, "ffn_up", _layernorm(b, "ln2", h), _DIM, _FFN))
    b.node_n("Add", [h, _linear(b, "ffn_down", up, _FFN, _DIM)], "ffn_residual_add", ["y"])
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", _DIM])]
    if masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, "seq"]))
    name = "transformer_seq_masked" if masked else "transformer_seq"
    return b.model(name, f"transformer encoder block with a dynamic sequence{' and a key mask' if masked else ''} "
                   "sample (npuscope)", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", _DIM])])


def build_transformer_seq_masked(seed: int = SEED) -> onnx.ModelProto:
    """:func:`build_transformer_seq` with ``masked=True`` (inputs x float32[1,seq,64], mask float32[1,seq])."""
    return build_transformer_seq(seed, masked=True)


def transformer_seq_inputs(seed: int = SEED, length: int = SEQ_SAMPLE_LENGTH) -> dict[str, np.ndarray]:
    """Token embeddings as :func:`transformer_block_inputs` draws them: x float32[1,length,64]."""
    rs = np.random.RandomState(seed + 4000)
    offset, scale = rs.normal(0, 0.5, _DIM), rs.uniform(0.5, 2.0, _DIM)
    return {"x": (rs.standard_normal((1, length, _DIM)) * scale + offset).astype(np.float32)}


def transformer_seq_masked_inputs(seed: int = SEED, length: int = SEQ_SAMPLE_LENGTH) -> dict[str, np.ndarray]:
    """:func:`transformer_seq_inputs` plus mask float32[1,length] of ones (every given token is valid; gear
    padding adds the zeros)."""
    return dict(transformer_seq_inputs(seed, length), mask=np.ones((1, length), np.float32))


# ---------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class SampleSpec:
    """A built-in sample: ``path`` of its .onnx, ``make_inputs(seed) -> {name: array}``, its builder."""

    path: Path
    make_inputs: Callable[..., dict[str, np.ndarray]]
    build: Callable[..., onnx.ModelProto]
    description: str = ""


SAMPLES: dict[str, SampleSpec] = {
    "resnet_small": SampleSpec(SAMPLES_DIR / "resnet_small.onnx", resnet_small_inputs, build_resnet_small,
                               "residual CNN, Conv-BN-Relu blocks, 32x32 RGB -> 10 logits"),
    "transformer_block": SampleSpec(SAMPLES_DIR / "transformer_block.onnx", transformer_block_inputs,
                                    build_transformer_block,
                                    "pre-LN encoder block, decomposed LayerNorm, masked 4-head attention, erf-GELU"),
    "detector_head": SampleSpec(SAMPLES_DIR / "detector_head.onnx", detector_head_inputs, build_detector_head,
                                "anchor box decoding, TopK, NonMaxSuppression on a 16x20x20 feature map"),
    "transformer_seq": SampleSpec(SAMPLES_DIR / "transformer_seq.onnx", transformer_seq_inputs, build_transformer_seq,
                                  "encoder block over a dynamic sequence 'seq', unmasked attention Softmax "
                                  "(padding-sensitive)"),
    "transformer_seq_masked": SampleSpec(SAMPLES_DIR / "transformer_seq_masked.onnx", transformer_seq_masked_inputs,
                                         build_transformer_seq_masked,
                                         "encoder block over a dynamic sequence 'seq' with a key mask input"),
}


def default_sample() -> str:
    """Name of the sample used when a command gets no model: ``"resnet_small"``."""
    return "resnet_small"


def sample(name: str) -> SampleSpec:
    """The :class:`SampleSpec` called ``name``; raises UserError listing the samples."""
    try:
        return SAMPLES[name]
    except KeyError:
        raise UserError(f"unknown sample {name!r}: expected one of {', '.join(SAMPLES)}") from None


def sample_path(name: str) -> Path:
    """Path of the built sample ``name``; raises UserError when unknown or not built."""
    path = sample(name).path
    if not path.is_file():
        raise UserError(f"sample model {path} is missing; rebuild it with 'python sample_models/build.py'")
    return path


def model_bytes(name: str, seed: int = SEED) -> bytes:
    """Serialised bytes of a freshly built sample (what :func:`build_all` writes)."""
    return sample(name).build(seed).SerializeToString()


def build_all(out_dir: str | os.PathLike = SAMPLES_DIR, copy_to: str | os.PathLike | None = None) -> dict[str, Path]:
    """Build every sample into ``out_dir`` (atomic write per file); optionally copy them to ``copy_to``.

    Returns:
        sample name -> written path in ``out_dir``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in SAMPLES:
        target = out_dir / f"{name}.onnx"
        tmp = target.with_suffix(".onnx.part")
        tmp.write_bytes(model_bytes(name))
        os.replace(tmp, target)
        written[name] = target
        if copy_to is not None:
            Path(copy_to).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, Path(copy_to) / target.name)
    return written
