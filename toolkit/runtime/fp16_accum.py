"""FP16-accumulating kernels for ``high_performance`` mode (GUIDE §3).

On the simulated vector unit a reduction accumulates in FP16 across :data:`LANES` lanes: each lane adds its
share of the elements sequentially (every add rounded to FP16), then the lanes are summed pairwise (each add
rounded). Overflow past 65504 gives inf, and large sums swamp small addends, as on the device. numpy's
float16 arithmetic rounds each operation to FP16 (IEEE 754 binary16, round to nearest even).

Inputs and outputs are float16 arrays; ``attrs`` are the node's ONNX attributes with ONNX defaults.
"""

from __future__ import annotations

import numpy as np

LANES = 16
H = np.float16


def _to_last(x, axes):
    axes = sorted(a % x.ndim for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    xt = np.transpose(x, rest + axes)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    return xt.reshape([x.shape[a] for a in rest] + [n]), axes, n


def fp16_sum(x: np.ndarray, axes, keepdims: bool = True) -> np.ndarray:
    """Sum of float16 ``x`` over ``axes`` accumulated in FP16 (see module docstring)."""
    x = x.astype(H, copy=False)
    flat, axes, n = _to_last(x, axes)
    pad = (-n) % LANES
    if pad:
        flat = np.concatenate([flat, np.zeros(flat.shape[:-1] + (pad,), H)], axis=-1)
    lanes = flat.reshape(flat.shape[:-1] + (-1, LANES))
    acc = np.zeros(lanes.shape[:-2] + (LANES,), H)
    for i in range(lanes.shape[-2]):
        acc = acc + lanes[..., i, :]
    while acc.shape[-1] > 1:
        acc = acc[..., 0::2] + acc[..., 1::2]
    out = acc[..., 0]
    if keepdims:
        shape = [1 if a in axes else s for a, s in enumerate(x.shape)]
        out = out.reshape(shape)
    return out.astype(H)


def _axes(attrs, x, extra=None):
    axes = extra if extra is not None else attrs.get("axes")
    if axes is None or len(axes) == 0:
        if attrs.get("noop_with_empty_axes", 0):
            return None
        return list(range(x.ndim))
    return [int(a) for a in axes]


def reduce_sum(x, attrs, axes=None):
    ax = _axes(attrs, x, axes)
    return x if ax is None else fp16_sum(x, ax, bool(attrs.get("keepdims", 1)))


def reduce_mean(x, attrs, axes=None):
    ax = _axes(attrs, x, axes)
    if ax is None:
        return x
    n = int(np.prod([x.shape[a] for a in ax]))
    return (fp16_sum(x, ax, bool(attrs.get("keepdims", 1))) / H(n)).astype(H)


def reduce_sum_square(x, attrs, axes=None):
    ax = _axes(attrs, x, axes)
    return (x * x).astype(H) if ax is None else fp16_sum((x * x).astype(H), ax, bool(attrs.get("keepdims", 1)))


def reduce_l2(x, attrs, axes=None):
    return np.sqrt(reduce_sum_square(x, attrs, axes).astype(np.float32)).astype(H)


def global_average_pool(x, attrs):
    return reduce_mean(x, {"keepdims": 1}, list(range(2, x.ndim)))


def softmax(x, attrs, log=False):
    axis = int(attrs.get("axis", -1))
    m = x.max(axis=axis, keepdims=True)
    e = np.exp((x - m).astype(np.float32)).astype(H)
    s = fp16_sum(e, [axis])
    if log:
        return ((x - m).astype(np.float32) - np.log(s.astype(np.float32))).astype(H)
    return (e.astype(np.float32) / s.astype(np.float32)).astype(H)


def layer_normalization(x, attrs, scale, bias=None):
    axis = int(attrs.get("axis", -1)) % x.ndim
    eps = float(attrs.get("epsilon", 1e-5))
    axes = list(range(axis, x.ndim))
    n = int(np.prod(x.shape[axis:]))
    mean = (fp16_sum(x, axes) / H(n)).astype(H)
    d = (x - mean).astype(H)
    var = (fp16_sum((d * d).astype(H), axes) / H(n)).astype(H)
    y = d.astype(np.float32) / np.sqrt(var.astype(np.float32) + np.float32(eps)) * scale.astype(np.float32)
    if bias is not None:
        y = y + bias.astype(np.float32)
    return y.astype(H)


def cumsum(x, attrs, axis):
    ax = int(np.asarray(axis).reshape(-1)[0])
    xx = np.flip(x, ax) if attrs.get("reverse", 0) else x
    out = np.cumsum(xx.astype(H), axis=ax, dtype=H)
    if attrs.get("exclusive", 0):
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=ax)), np.delete(out, -1, axis=ax)], axis=ax)
    return np.flip(out, ax) if attrs.get("reverse", 0) else out


#: op type -> fn(inputs: list[np.ndarray], attrs: dict) -> np.ndarray
KERNELS = {
    "ReduceSum": lambda ins, a: reduce_sum(ins[0], a, _axes_input(ins)),
    "ReduceMean": lambda ins, a: reduce_mean(ins[0], a, _axes_input(ins)),
    "ReduceSumSquare": lambda ins, a: reduce_sum_square(ins[0], a, _axes_input(ins)),
    "ReduceL2": lambda ins, a: reduce_l2(ins[0], a, _axes_input(ins)),
    "GlobalAveragePool": lambda ins, a: global_average_pool(ins[0], a),
    "Softmax": lambda ins, a: softmax(ins[0], a),
    "LogSoftmax": lambda ins, a: softmax(ins[0], a, log=True),
    "LayerNormalization": lambda ins, a: layer_normalization(ins[0], a, ins[1], ins[2] if len(ins) > 2 else None),
    "CumSum": lambda ins, a: cumsum(ins[0], a, ins[1]),
}


def _axes_input(ins):
    if len(ins) > 1 and ins[1] is not None and ins[1].size:
        return [int(v) for v in ins[1].reshape(-1)]
    return None
