"""Pass ``assign_precision``: choose each kernel's precision (fp16/fp32) and implementation mode.

precision_mode (the converter's names):
  force_fp32 / must_keep_origin_dtype: every kernel FP32.  force_fp16: every NPU kernel FP16.
  allow_fp32_to_fp16: cube kernels FP16 (the cube unit has no FP32 path), others FP32.
  allow_mix_precision: kernels with a black-list op FP32, else with a white-list op FP16, else (gray) the
  precision of their first float input as stored.
keep_dtype entries (node names, or ``OpType::X``) force the kernels holding them to FP32 in every mode.
CPU-placed kernels are always FP32.
"""

from __future__ import annotations

from toolkit.compiler.pipeline import PassResult, register_pass
from toolkit.errors import ConfigError
from toolkit.precision.contract import default_mixlists


def mixlists(config) -> dict[str, set[str]]:
    lists = default_mixlists()
    for key, edits in (config.modify_mixlist or {}).items():
        lists[key] |= set(edits.get("to-add", []))
        lists[key] -= set(edits.get("to-remove", []))
        for other in lists:
            if other != key:
                lists[other] -= set(edits.get("to-add", []))
    return lists


def keep_fp32(config, graph):
    names, types = set(), set()
    known_types = {n.op_type for n in graph.nodes}
    for entry in config.keep_dtype:
        if entry.startswith("OpType::"):
            types.add(entry[len("OpType::"):])
        else:
            names.add(entry)
    return names, types, known_types


def _op_types(ctx, k):
    orig = {n.name: n.op_type for n in ctx.graph.nodes}
    return {orig.get(n, k.op_type) for n in k.nodes} | {k.op_type}


@register_pass("assign_precision", requires=("kernels",), provides=("precision",))
def run(ctx) -> PassResult:
    cfg, g = ctx.config, ctx.graph
    mode = cfg.precision_mode
    lists = mixlists(cfg)
    keep_names, keep_types, _ = keep_fp32(cfg, g)
    all_nodes = {n for k in ctx.kernels for n in k.nodes}
    unknown = sorted(keep_names - all_nodes - set(ctx.folded))
    if unknown:
        from toolkit.config import suggest
        raise ConfigError(f"{cfg.where('keep_dtype')} names node '{unknown[0]}', which is not in the model"
                          f"{suggest(unknown[0], all_nodes)}")
    storage: dict[str, str] = {t: "fp32" for t in g.inputs}
    counts = {"fp16": 0, "fp32": 0}
    for k in ctx.kernels:
        ops = _op_types(ctx, k)
        if k.placement == "CPU" or mode in ("force_fp32", "must_keep_origin_dtype"):
            prec = "fp32"
        elif set(k.nodes) & keep_names or ops & keep_types:
            prec = "fp32"
        elif mode == "force_fp16":
            prec = "fp16"
        elif mode == "allow_fp32_to_fp16":
            prec = "fp16" if k.op_class == "cube" else "fp32"
        elif ops & lists["black-list"]:
            prec = "fp32"
        elif ops & lists["white-list"]:
            prec = "fp16"
        else:
            floats = [storage[t] for t in k.inputs if g.is_float32(t) and t in storage]
            prec = floats[0] if floats else "fp32"
        k.precision = prec
        if cfg.optypelist_for_implmode:
            k.implmode = cfg.op_select_implmode if ops & set(cfg.optypelist_for_implmode) else "high_precision"
        else:
            k.implmode = cfg.op_select_implmode
        for t in k.outputs:
            storage[t] = prec
        counts[prec] += 1
    return PassResult(0, [f"precision_mode {mode}: {counts['fp16']} kernels FP16, {counts['fp32']} FP32"])
