"""FP16-accumulating kernels for ``high_performance`` mode (GUIDE §3).

On the simulated vector unit a reduction accumulates in FP16 across :data:`LANES` lanes: each lane adds its
share of the elements sequentially (every add rounded to FP16), then the lanes are summed pairwise (each add
rounded). Overflow past 65504 gives inf, and large sums swamp small addends, as on the device. numpy's
float16 arithmetic rounds each operation to FP16 (IEEE 754 binary16, round to nearest even).

Inputs and outputs are float16 arrays; ``attrs`` are the node's ONNX attributes with ONNX defaults.
Overflow to inf and the NaN that follows (inf - inf, inf / inf) are the simulated device's behaviour, not a
Python problem: the kernels run under ``np.errstate(over/invalid/divide="ignore")`` so no numpy
RuntimeWarning reaches the user.

:func:`accumulation_peak` recomputes, in float64 from the FP32 reference inputs, the largest |running sum| a
kernel forms (same lane order): past 65504 the FP16 accumulation overflows even when every input and the
result fit FP16 (the advisor's ``fp16_accumulation_overflow`` evidence).
"""

from __future__ import annotations

import functools

import numpy as np

LANES = 16
H = np.float16


def _device_arith(fn):
    """Run ``fn`` with numpy's FP overflow/invalid/divide warnings off (simulated device arithmetic)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return fn(*args, **kwargs)
    return wrapped


def _to_last(x, axes):
    axes = sorted(a % x.ndim for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    xt = np.transpose(x, rest + axes)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64)) if axes else 1
    return xt.reshape([x.shape[a] for a in rest] + [n]), axes, n


@_device_arith
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


@_device_arith
def reduce_sum(x, attrs, axes=None):
    ax = _axes(attrs, x, axes)
    return x if ax is None else fp16_sum(x, ax, bool(attrs.get("keepdims", 1)))


@_device_arith
def reduce_mean(x, attrs, axes=None):
    ax = _axes(attrs, x, axes)
    if ax is None:
        return x
    n = int(np.prod([x.shape[a] for a in ax]))
    return (fp16_sum(x, ax, bool(attrs.get("keepdims", 1))) / H(n)).astype(H)


@_device_arith
def reduce_sum_square(x, attrs, axes=None):
    ax = _axes(attrs, x, axes)
    return (x * x).astype(H) if ax is None else fp16_sum((x * x).astype(H), ax, bool(attrs.get("keepdims", 1)))


@_device_arith
def reduce_l2(x, attrs, axes=None):
    return np.sqrt(reduce_sum_square(x, attrs, axes).astype(np.float32)).astype(H)


@_device_arith
def global_average_pool(x, attrs):
    return reduce_mean(x, {"keepdims": 1}, list(range(2, x.ndim)))


@_device_arith
def softmax(x, attrs, log=False):
    axis = int(attrs.get("axis", -1))
    m = x.max(axis=axis, keepdims=True)
    e = np.exp((x - m).astype(np.float32)).astype(H)
    s = fp16_sum(e, [axis])
    if log:
        return ((x - m).astype(np.float32) - np.log(s.astype(np.float32))).astype(H)
    return (e.astype(np.float32) / s.astype(np.float32)).astype(H)


@_device_arith
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


@_device_arith
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


def _peak(x: np.ndarray, axes) -> float:
    """Largest |running sum| (float64) of ``x`` summed over ``axes`` in :func:`fp16_sum`'s order: each lane's
    sequential sums, then every pairwise level."""
    flat, _, n = _to_last(np.asarray(x, np.float64), axes)
    if flat.size == 0:
        return 0.0
    pad = (-n) % LANES
    if pad:
        flat = np.concatenate([flat, np.zeros(flat.shape[:-1] + (pad,))], axis=-1)
    run = np.cumsum(flat.reshape(flat.shape[:-1] + (-1, LANES)), axis=-2)
    peak = float(np.nanmax(np.abs(run)))
    acc = run[..., -1, :]
    while acc.shape[-1] > 1:
        acc = acc[..., 0::2] + acc[..., 1::2]
        peak = max(peak, float(np.nanmax(np.abs(acc))))
    return peak


def accumulation_peak(op_type: str, inputs: list, attrs: dict) -> float | None:
    """The largest |running sum| the FP16-accumulating kernel of ``op_type`` forms on ``inputs`` (the node's
    input arrays, FP32 reference values, None for an absent optional input; ``attrs`` its ONNX attributes),
    computed in float64 in the kernel's lane order (the sums of a ReduceSum/Mean, of x² for ReduceSumSquare/
    L2, of exp(x - max) for Softmax, of x and of (x - mean)² for LayerNormalization, the running CumSum).
    Above 65504 (FP16 max) the FP16 accumulation overflows. None for an op type without such a kernel or
    missing inputs."""
    if op_type not in KERNELS or not inputs or inputs[0] is None:
        return None
    x = np.asarray(inputs[0], np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if op_type in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL2"):
            ax = _axes(attrs, x, _axes_input(inputs))
            return 0.0 if ax is None else _peak(x * x if op_type in ("ReduceSumSquare", "ReduceL2") else x, ax)
        if op_type == "GlobalAveragePool":
            return _peak(x, list(range(2, x.ndim)))
        if op_type in ("Softmax", "LogSoftmax"):
            axis = int(attrs.get("axis", -1))
            return _peak(np.exp(x - x.max(axis=axis, keepdims=True)), [axis])
        if op_type == "LayerNormalization":
            axes = list(range(int(attrs.get("axis", -1)) % x.ndim, x.ndim))
            d = x - x.mean(axis=tuple(axes), keepdims=True)
            return max(_peak(x, axes), _peak(d * d, axes))
        if op_type == "CumSum" and len(inputs) > 1 and inputs[1] is not None:
            return float(np.nanmax(np.abs(np.cumsum(x, axis=int(np.asarray(inputs[1]).reshape(-1)[0])))))
    return None
