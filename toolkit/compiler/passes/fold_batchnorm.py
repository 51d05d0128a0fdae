"""Pass ``fold_batchnorm`` (converter name ConvBatchnormFusionPass): fold an inference BatchNormalization
into the Conv / ConvTranspose / Gemm that directly produces its input, in float64 at compile time, stored
as FP32.

Never across a nonlinearity: only a BN whose input tensor is the cube op's output and has no other reader
is folded (shared case c07: Conv→Relu→BN must stay unfused).

Math (BN: y = s·(x−m)/sqrt(v+eps) + b): with k = s/sqrt(v+eps), W' = W·k over the output-channel axis and
bias' = (bias−m)·k + b. The new constants are named ``<node>__bnfold_W`` / ``<node>__bnfold_B``; where they come
from (the node, its weight, the BN and its initializers, the range of k) is recorded in the compiled model
(toolkit.compiler.derived) for the findings about them.
"""

from __future__ import annotations

import numpy as np
import onnx

from toolkit.compiler import derived
from toolkit.compiler.context import PassResult
from toolkit.compiler.registry import register_pass

RULE = "ConvBatchnormFusionPass"


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _fold_weights(op, node, w, k):
    """Scale weight ``w`` of ``op`` by ``k`` per output channel; returns the new weight or a refusal str."""
    if op == "Conv":
        if w.shape[0] != k.shape[0]:
            return f"weight has {w.shape[0]} output channels, BN has {k.shape[0]}"
        return w * k.reshape((-1,) + (1,) * (w.ndim - 1))
    if op == "ConvTranspose":
        g = _attr(node, "group", 1)
        cout_g = w.shape[1]
        if cout_g * g != k.shape[0]:
            return f"ConvTranspose has {cout_g * g} output channels, BN has {k.shape[0]}"
        ww = w.reshape((g, w.shape[0] // g, cout_g) + w.shape[2:])
        ww = ww * k.reshape((g, 1, cout_g) + (1,) * (w.ndim - 2))
        return ww.reshape(w.shape)
    # Gemm
    if _attr(node, "transB", 0):
        return w * k[:, None]
    return w * k[None, :]


def try_fold(g, bn, sources: dict | None = None) -> tuple[str | None, str]:
    """Fold one BN; returns (producer node name or None, log line / refusal reason). ``sources``: a dict the
    folded constants' sources are added to (:func:`_sources`), for one toolkit.compiler.derived.record call."""
    x = bn.input[0]
    prod = g.producer.get(x)
    if prod is None or prod.op_type not in ("Conv", "ConvTranspose", "Gemm"):
        return None, ""
    if len(bn.output) > 1 and any(bn.output[1:]) or _attr(bn, "training_mode", 0):
        return None, f"refused {bn.name}: training-mode BatchNormalization"
    if g.only_consumer(x) is not bn:
        return None, f"refused {prod.name}+{bn.name}: '{x}' has other readers"
    consts = [g.const(n) for n in bn.input[1:5]]
    w = g.const(prod.input[1]) if len(prod.input) > 1 else None
    if any(c is None for c in consts) or w is None:
        return None, f"refused {prod.name}+{bn.name}: weights or BN statistics are not constants"
    if prod.op_type == "Gemm" and (g.vtype(x) is None or g.vtype(x).shape is None or len(g.vtype(x).shape) != 2):
        return None, f"refused {prod.name}+{bn.name}: Gemm output rank is not 2"
    s, b, m, v = (c.astype(np.float64) for c in consts)
    eps = _attr(bn, "epsilon", 1e-5)
    k = s / np.sqrt(v + eps)
    w_new = _fold_weights(prod.op_type, prod, w.astype(np.float64), k)
    if isinstance(w_new, str):
        return None, f"refused {prod.name}+{bn.name}: {w_new}"
    if prod.op_type == "Gemm":
        alpha, beta = _attr(prod, "alpha", 1.0), _attr(prod, "beta", 1.0)
        c = g.const(prod.input[2]) if len(prod.input) > 2 and prod.input[2] else np.zeros(1)
        if c is None:
            return None, f"refused {prod.name}+{bn.name}: Gemm C is not a constant"
        bias = (beta * c.astype(np.float64) - m) * k + b
        bias = np.broadcast_to(bias, (k.shape[0],)) if bias.ndim <= 1 else bias
        w_new = w_new * alpha
        for a in list(prod.attribute):
            if a.name in ("alpha", "beta"):
                prod.attribute.remove(a)
    else:
        bias0 = g.const(prod.input[2]) if len(prod.input) > 2 and prod.input[2] else np.zeros(k.shape[0])
        if bias0 is None:
            return None, f"refused {prod.name}+{bn.name}: bias is not a constant"
        bias = (bias0.astype(np.float64) - m) * k + b
    wname, bname = f"{prod.name}__bnfold_W", f"{prod.name}__bnfold_B"
    g.consts[wname] = w_new.astype(w.dtype)
    g.consts[bname] = bias.astype(w.dtype)
    if sources is not None:
        sources.update(_sources(prod, bn, wname, bname, k, eps))
    return prod.name, (wname, bname)


def _sources(prod, bn, wname: str, bname: str, k: np.ndarray, eps: float) -> dict:
    """{``wname``: source, ``bname``: source} for toolkit.compiler.derived: the producer, its weight (and bias)
    initializers, the BN node, its scale / B / mean / var initializers, epsilon and the range of the
    per-channel factor k = scale / sqrt(var + epsilon) the weight was multiplied by."""
    weight = prod.input[1]
    bias = prod.input[2] if len(prod.input) > 2 and prod.input[2] else None
    roles = dict(zip(("scale", "B", "mean", "var"), bn.input[1:5]))
    mag = np.abs(k[np.isfinite(k)])
    factor = {"absmax": float(mag.max()) if mag.size else None,
              "absmin": float(mag.min()) if mag.size else None}
    common = {"rule": RULE, "node": prod.name, "op_type": prod.op_type, "batchnorm": bn.name,
              "batchnorm_inputs": roles, "epsilon": float(eps), "factor": factor}
    return {wname: {**common, "role": "weight", "weight": weight, "inputs": [weight, *roles.values()]},
            bname: {**common, "role": "bias", "bias": bias, "weight": weight,
                    "inputs": [n for n in (bias, *roles.values()) if n]}}


@register_pass("fold_batchnorm", requires=("shapes",), min_level=1, switch=("GraphFusion", RULE), optional=True)
def run(ctx) -> PassResult:
    g = ctx.graph
    log, changed, sources = [], 0, {}
    for bn in [n for n in g.nodes if n.op_type == "BatchNormalization"]:
        x = bn.input[0]
        prod = g.producer.get(x)
        if prod is None or prod.op_type not in ("Conv", "ConvTranspose", "Gemm"):
            continue
        data_in = prod.input[0]
        name, info = try_fold(g, bn, sources)
        ctx.count_fusion("graph_fusion", RULE, True, name is not None)
        if name is None:
            log.append(info)
            continue
        wname, bname = info
        del prod.input[:]
        prod.input.extend([data_in, wname, bname])
        prod.output[0] = bn.output[0]
        g.nodes.remove(bn)
        ctx.absorbed[x] = prod.name
        rule, orig = ctx.provenance.get(prod.name, (RULE, [prod.name]))
        ctx.provenance[prod.name] = (RULE, orig + [bn.name])
        # keep the index current without a full rebuild (a reindex per fold is quadratic on big models)
        g.producer.pop(x, None)
        g.producer[bn.output[0]] = prod
        g.consumers.pop(x, None)
        g.by_name.pop(bn.name, None)
        for t in (wname, bname):
            g.consumers.setdefault(t, []).append(prod)
        changed += 1
        log.append(f"folded {bn.name} into {prod.name}")
    derived.record(g.model, sources)  # where the folded constants come from, for the findings about them
    if changed:
        g.reindex()
    return PassResult(changed, log)
