"""Pass ``assign_precision``: choose each kernel's precision (fp16/fp32) and implementation mode.

precision_mode (the converter's names):
  force_fp32: every kernel FP32.  force_fp16: every NPU kernel FP16.
  must_keep_origin_dtype: every kernel in its origin dtype (:func:`origin_precision`): FP16 when its float
  tensors are float16 in the model ("FP16-origin"), else FP32; tensors keep their dtypes (no Casts).
  allow_fp32_to_fp16: cube kernels and FP16-origin kernels FP16 (the cube unit has no FP32 path; FP16-origin
  data has nothing to lower), others FP32.
  allow_mix_precision: kernels with a black-list op FP32, else with a white-list op FP16, else (gray) the
  precision of their first float input (float32 or float16) as stored; graph inputs are stored in their
  declared dtype, so gray kernels on FP16-origin inputs stay FP16. modify_mixlist edits the lists (this mode
  only).
keep_dtype entries (node names, ``OpName::name`` or ``OpType::X``: toolkit.precision.options) force the kernels
holding them to FP32 in every mode but must_keep_origin_dtype. CPU-placed kernels are always FP32, and so are
kernels with no float32 or float16 tensor (float64 or integer data only): the FP16 contract has nothing to lower
there, and the kernel runs on its data as given.
The label is the precision a kernel computes and stores in, whatever the model's dtypes: an FP32 kernel on
FP16-origin tensors (force_fp32, keep_dtype, black list) reads them cast up and stores its outputs in FP32
(insert_casts, plan_memory).
implmode: ``op_select_implmode`` for every kernel, or, with ``optypelist_for_implmode``, for kernels with a
listed op type only; the others keep the default ``high_performance`` (toolkit.precision.options.implmode_of).

What the options did goes to the compile log: every kernel keep_dtype or modify_mixlist moved (FP16 → FP32 or
back) with the entry that moved it (``follows input`` for a gray kernel whose input moved), and the kernels
op_select_implmode applies to. Entries that match nothing are ``option_unmatched`` warning findings (and log
lines): a keep_dtype node folded away at compile time or never run, an op type no kernel has, a mixlist
``to-remove`` of an op type not on that list, an optypelist_for_implmode op type the model does not use.
Options the precision mode ignores are ``option_ignored`` warnings: modify_mixlist outside
allow_mix_precision, optypelist_for_implmode while op_select_implmode is the default.

Raises:
    ConfigError: a keep_dtype node name that is not a node of the model (nor of the graph before folding).
"""

from __future__ import annotations

import logging

from toolkit.compiler.context import PassResult
from toolkit.compiler.passes.insert_casts import origin, storage_precision
from toolkit.compiler.registry import register_pass
from toolkit.core.errors import ConfigError
from toolkit.core.records import Finding
from toolkit.core.text import suggest
from toolkit.ir.graph import enclosing_nodes
from toolkit.ir.load import has_renamed_nodes, loader_names, twins_index
from toolkit.precision.contract import default_mixlists
from toolkit.precision.options import (
    ALL_FP32_MODES,
    DEFAULT_IMPLMODE,
    MIXLIST_MODES,
    implmode_of,
    keep_sets,
    mixlist_entries,
)
from toolkit.precision.options import mixlists as _mixlists

_log = logging.getLogger("npuscope.compiler")
#: At most this many kernel names are listed in one log line.
LIST_MAX = 20


def mixlists(config) -> dict[str, set[str]]:
    """The allow_mix_precision lists after ``config.modify_mixlist`` (toolkit.precision.options.mixlists)."""
    return _mixlists(config.modify_mixlist)


def origin_precision(g, k) -> str:
    """``fp16`` if kernel ``k``'s float outputs (or, with none, its float inputs) are all float16 in the model
    ("FP16-origin") and there is at least one, else ``fp32``."""
    floats = [o for o in (origin(g, t) for t in k.outputs) if o] or \
        [o for o in (origin(g, t) for t in k.inputs) if o]
    return "fp16" if floats and all(o == "fp16" for o in floats) else "fp32"


def _kernel_ops(ctx) -> dict[str, set[str]]:
    """{kernel name: the ONNX op types of its nodes, plus its own op type (a fused op's name)}."""
    orig = {n.name: n.op_type for n in ctx.graph.nodes}
    return {k.name: {orig.get(n, k.op_type) for n in k.nodes} | {k.op_type} for k in ctx.kernels}


def assign(ctx, ops, mode: str, lists, keep_names, keep_types) -> dict[str, str]:
    """{kernel name: "fp16" | "fp32"} for one set of options (nothing is changed). ``ops``: from
    :func:`_kernel_ops`; ``lists``: mixlists; ``keep_names`` / ``keep_types``: node names / op types kept FP32."""
    g = ctx.graph
    storage: dict[str, str | None] = {t: origin(g, t) for t in g.inputs}
    out = {}
    for k in ctx.kernels:
        kops = ops[k.name]
        if k.placement == "CPU" or mode == "force_fp32":
            prec = "fp32"
        elif not any(origin(g, t) for t in (*k.inputs, *k.outputs)):
            prec = "fp32"  # no float32/float16 tensor (float64, integers only): nothing to run in FP16
        elif mode == "must_keep_origin_dtype":
            prec = origin_precision(g, k)
        elif set(k.nodes) & keep_names or kops & keep_types:
            prec = "fp32"
        elif mode == "force_fp16":
            prec = "fp16"
        elif mode == "allow_fp32_to_fp16":
            prec = "fp16" if k.op_class == "cube" or origin_precision(g, k) == "fp16" else "fp32"
        elif kops & lists["black-list"]:
            prec = "fp32"
        elif kops & lists["white-list"]:
            prec = "fp16"
        else:
            floats = [storage[t] for t in k.inputs if storage.get(t)]
            prec = floats[0] if floats else "fp32"
        out[k.name] = prec
        for t in k.outputs:
            storage[t] = storage_precision(g, t, k, mode, prec)
    return out


def _warn(ctx, kind: str, subject: str, evidence: dict, text: str, fix: str, log: list) -> None:
    ctx.findings.append(Finding("warning", kind, subject, evidence, f"{text}; {fix}"))
    log.append(f"WARNING {text}")
    _log.warning("%s", text)


def _check_keep_names(ctx, cfg, keep_names: dict, log: list) -> None:
    """Warn for a keep_dtype name the loader made (toolkit.ir.load.loader_names: an unnamed or repeated node in
    the file; a converter does not know it), and for names the compiled model runs in no kernel (folded at
    compile time, never run, or a node inside an If/Loop/Scan body: toolkit.ir.graph.enclosing_nodes, computed
    in FP32 on the host already); raise ConfigError for a name that was never a node of the model, at any
    depth."""
    in_kernels = {n for k in ctx.kernels for n in k.nodes}
    in_graph = {n.name for n in ctx.graph.nodes}
    folded = set(ctx.folded_nodes) | set(ctx.folded)
    inner: dict[str, str] | None = None  # built only when a name is not a top-level node (rare)
    made = loader_names(ctx.graph.model) if has_renamed_nodes(ctx.graph.model) else {}
    for name, text in keep_names.items():
        if name in made:  # applied here, but a converter reading the model file knows no such node
            file_name = made[name]
            _warn(ctx, "loader_node_name", text, {"option": "keep_dtype", "entry": text, "file_name": file_name},
                  f"keep_dtype entry '{text}' is npuscope's name for a node the model file "
                  + (f"also calls '{file_name}'" if file_name else "leaves unnamed")
                  + ": it is kept here, but a converter reading the file does not know that name",
                  "give the node a unique name in the model (re-export it), then name it in keep_dtype", log)
        if name in in_kernels:
            continue
        if inner is None and name not in folded and name not in in_graph:
            inner = enclosing_nodes(ctx.graph.model.graph)
        if name in folded:
            why, how = "folded", "was computed at compile time (fold_constants): no kernel runs it"
        elif name in in_graph:
            why, how = "not_run", "runs in no kernel (nothing reads its outputs)"
        elif inner and name in inner:
            why = "in_subgraph"
            how = (f"is inside the subgraph of control-flow node '{inner[name]}', which runs on the host CPU in "
                   "FP32 (AI_CPU) whatever the precision settings: it is computed in FP32 already")
        else:
            known = in_kernels | in_graph | set(inner or ())
            raise ConfigError(f"{cfg.where('keep_dtype')} names node '{name}', which is not in the model"
                              f"{suggest(name, known)}; give node names of the .onnx file or 'OpType::X' entries")
        _warn(ctx, "option_unmatched", text, {"option": "keep_dtype", "entry": text, "reason": why},
              f"keep_dtype entry '{text}' matches no kernel: node '{name}' {how}",
              "remove the entry (it changes nothing)" if why == "in_subgraph" else
              "remove the entry (it changes nothing), or keep the nodes that read its result", log)


def _with_twins(ctx, keep_names: dict, log: list) -> dict:
    """``keep_names`` plus, for an entry naming a node the model file names several times, the names the loader
    gave the others (toolkit.ir.load.twins_index: ``name__2``...): the entry keeps every node the file calls
    so, with a warning naming them (keep_dtype.txt written for the converter still holds the file's name)."""
    out = dict(keep_names)
    if not keep_names or not has_renamed_nodes(ctx.graph.model):  # the usual case: no name to look up (per trial)
        return out
    index = twins_index(ctx.graph.model, (n.name for n in ctx.graph.nodes))
    for name, text in keep_names.items():
        twins = index.get(name)
        if twins:
            out.update({t: text for t in twins})
            _warn(ctx, "duplicate_node_name", text, {"option": "keep_dtype", "entry": text, "nodes": [name, *twins]},
                  f"keep_dtype entry '{text}' names {len(twins) + 1} nodes of the model file (loaded as "
                  f"{', '.join(repr(n) for n in [name, *twins])}): every one is kept in FP32",
                  "give the nodes unique names in the model to keep only some of them", log)
    return out


def _check_keep_types(ctx, keep_types: dict, used: set[str], log: list) -> None:
    for op, text in keep_types.items():
        if op not in used:
            _warn(ctx, "option_unmatched", text, {"option": "keep_dtype", "entry": text, "reason": "no_such_op_type"},
                  f"keep_dtype entry '{text}' matches no kernel: the compiled model has no {op} node",
                  "check the op type (ONNX names, case-sensitive) or remove the entry", log)


def _check_mixlist(ctx, cfg, used: set[str], log: list) -> None:
    if not cfg.modify_mixlist:
        return
    if cfg.precision_mode not in MIXLIST_MODES:
        _warn(ctx, "option_ignored", "modify_mixlist", {"option": "modify_mixlist", "precision_mode": cfg.precision_mode},
              f"modify_mixlist is ignored under precision_mode {cfg.precision_mode}: only allow_mix_precision "
              "reads the mixed-precision lists",
              "set precision_mode = \"allow_mix_precision\", or use keep_dtype to keep nodes in FP32", log)
        return
    defaults = default_mixlists()
    for key, action, op in mixlist_entries(cfg.modify_mixlist):
        entry = f"{key} {action} {op}"
        ev = {"option": "modify_mixlist", "list": key, "action": action, "op_type": op}
        if op not in used:
            _warn(ctx, "option_unmatched", entry, {**ev, "reason": "no_such_op_type"},
                  f"modify_mixlist {key} {action} '{op}' matches no kernel: the compiled model has no {op} node",
                  "check the op type (ONNX names, case-sensitive) or remove the entry", log)
        elif action == "to-remove" and op not in defaults[key]:
            _warn(ctx, "option_unmatched", entry, {**ev, "reason": "not_on_list"},
                  f"modify_mixlist {key} to-remove '{op}' changes nothing: {op} is not on the default {key}",
                  f"remove the entry; to move {op} add it to another list", log)
        elif action == "to-add" and _default_list(op, defaults) == key:
            _warn(ctx, "option_unmatched", entry, {**ev, "reason": "already_on_list"},
                  f"modify_mixlist {key} to-add '{op}' changes nothing: {op} is on the default {key} already"
                  + (" (an op on neither the white nor the black list is gray)" if key == "gray-list" else ""),
                  f"remove the entry; to move {op} add it to another list", log)


def _default_list(op: str, defaults: dict[str, set[str]]) -> str:
    """The default mixed-precision list ``op`` is on: white, black, else gray (every other op is gray)."""
    return next((key for key in ("white-list", "black-list") if op in defaults[key]), "gray-list")


def _check_implmode(ctx, cfg, used: set[str], log: list) -> None:
    if not cfg.optypelist_for_implmode:
        return
    if cfg.op_select_implmode == DEFAULT_IMPLMODE:
        _warn(ctx, "option_ignored", "optypelist_for_implmode",
              {"option": "optypelist_for_implmode", "op_select_implmode": cfg.op_select_implmode},
              f"optypelist_for_implmode changes nothing: op_select_implmode is {DEFAULT_IMPLMODE}, the default "
              "of every op type",
              "set op_select_implmode = \"high_precision\" to run the listed op types in high_precision", log)
    for op in cfg.optypelist_for_implmode:
        if op not in used:
            _warn(ctx, "option_unmatched", op, {"option": "optypelist_for_implmode", "entry": op,
                                                 "reason": "no_such_op_type"},
                  f"optypelist_for_implmode entry '{op}' matches no kernel: the compiled model has no {op} node",
                  "check the op type (ONNX names, case-sensitive) or remove the entry", log)


def _names(ks: list[str]) -> str:
    more = len(ks) - LIST_MAX
    return ", ".join(ks[:LIST_MAX]) + (f", ... ({more} more)" if more > 0 else "")


def _moves(ctx, ops, before: dict, after: dict, direct) -> list[str]:
    """Log lines for kernels whose precision differs between ``before`` and ``after``: ``direct(kernel,
    ops)`` names the option entry that moved it, or None (a gray kernel following a moved input)."""
    lines = []
    for k in ctx.kernels:
        if before[k.name] != after[k.name]:
            why = direct(k, ops[k.name])
            why = f"by {why}" if why else "follows its input (gray op)"
            lines.append(f"  {k.name} ({k.op_type}): {before[k.name].upper()} -> {after[k.name].upper()}, {why}")
    return lines


def _option_log(ctx, cfg, ops, lists, keep_names: dict, keep_types: dict) -> list[str]:
    """What keep_dtype and modify_mixlist moved (module docstring)."""
    mode = cfg.precision_mode
    base = assign(ctx, ops, mode, _mixlists(None), set(), set())
    mixed = assign(ctx, ops, mode, lists, set(), set()) if mode in MIXLIST_MODES else base
    final = assign(ctx, ops, mode, lists, set(keep_names), set(keep_types))
    entries = mixlist_entries(cfg.modify_mixlist)

    def by_mix(k, kops):
        hit = [f"{key} {action} '{op}'" for key, action, op in entries if op in kops]
        return f"modify_mixlist {', '.join(hit)}" if hit else None

    def by_keep(k, kops):
        hit = [t for n, t in keep_names.items() if n in k.nodes] + [t for op, t in keep_types.items() if op in kops]
        return f"keep_dtype {', '.join(repr(h) for h in hit)}" if hit else None

    out = []
    if mode in MIXLIST_MODES and entries:
        moved = _moves(ctx, ops, base, mixed, by_mix)
        out += [f"modify_mixlist moved {len(moved)} kernel(s)" + (":" if moved else "")] + moved
    if keep_names or keep_types:
        if mode == "force_fp32":
            out.append("keep_dtype changes nothing under precision_mode force_fp32: every kernel is FP32 already")
        elif mode == "must_keep_origin_dtype":
            out.append("keep_dtype changes nothing under precision_mode must_keep_origin_dtype: every kernel keeps "
                       "the dtype its tensors have in the model")
        moved = _moves(ctx, ops, mixed, final, by_keep)
        kept = [k.name for k in ctx.kernels if by_keep(k, ops[k.name]) and mixed[k.name] == final[k.name]]
        out += [f"keep_dtype moved {len(moved)} kernel(s) to FP32" + (":" if moved else "")] + moved
        if kept and mode not in ALL_FP32_MODES:
            out.append(f"keep_dtype matched {len(kept)} kernel(s) already FP32: {_names(kept)}")
    return out


def _implmode_log(ctx, cfg) -> list[str]:
    if cfg.op_select_implmode == DEFAULT_IMPLMODE:  # every kernel has the default (a list changes nothing)
        return []
    chosen = [k.name for k in ctx.kernels if k.implmode == cfg.op_select_implmode]
    scope = (f"optypelist_for_implmode {', '.join(cfg.optypelist_for_implmode)}" if cfg.optypelist_for_implmode
             else "every op type")
    line = f"op_select_implmode {cfg.op_select_implmode} ({scope}): {len(chosen)} kernel(s)"
    line += f": {_names(chosen)}" if chosen else ""
    rest = len(ctx.kernels) - len(chosen)
    return [line + (f"; {rest} other kernel(s) {DEFAULT_IMPLMODE} (default)" if rest else "")]


#: Postconditions (toolkit.compiler.registry.Ensure).
ENSURES = (("every kernel runs in fp16 or fp32", lambda ctx: all(k.precision in ("fp16", "fp32") for k in ctx.kernels)),)


@register_pass("assign_precision", requires=("kernels",), provides=("precision",), ensures=ENSURES)
def run(ctx) -> PassResult:
    cfg = ctx.config
    mode = cfg.precision_mode
    lists = mixlists(cfg) if mode in MIXLIST_MODES else _mixlists(None)
    keep_names, keep_types = keep_sets(cfg.keep_dtype)
    ops = _kernel_ops(ctx)
    used = set().union(*ops.values()) if ops else set()
    notes: list[str] = []
    _check_keep_names(ctx, cfg, keep_names, notes)
    keep_names = _with_twins(ctx, keep_names, notes)
    _check_keep_types(ctx, keep_types, used, notes)
    _check_mixlist(ctx, cfg, used, notes)
    _check_implmode(ctx, cfg, used, notes)
    final = assign(ctx, ops, mode, lists, set(keep_names), set(keep_types))
    counts = {"fp16": 0, "fp32": 0}
    for k in ctx.kernels:
        k.precision = final[k.name]
        k.implmode = implmode_of(ops[k.name], cfg.op_select_implmode, cfg.optypelist_for_implmode)
        counts[k.precision] += 1
    head = f"precision_mode {mode}: {counts['fp16']} kernels FP16, {counts['fp32']} FP32"
    return PassResult(0, [head, *notes, *_option_log(ctx, cfg, ops, lists, keep_names, keep_types),
                          *_implmode_log(ctx, cfg)])
