"""Load a plan.json (toolkit.compiler.plan format), check it against a fresh compile of the same model, and
derive plans from it: reuse off (every tensor its own range) and relocations (disable_reuse applied to a
given plan).

A loaded plan replaces only memory decisions (offsets, lifetimes, arena size): its kernels, tensor dtypes and
shapes must equal those of the model compiled with the plan's config, because kernels are built from the
compiled graph.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from toolkit.compiler.plan import Plan
from toolkit.config.schema import Config
from toolkit.core.boundedjson import json_loads, read_limited_bytes
from toolkit.core.errors import InputError, UsageError, UserError
from toolkit.core.text import suggest
from toolkit.core.userpaths import check_path
from toolkit.memory.planner import align
from toolkit.source import resolve_model

#: plan.json versions this reader understands (toolkit/compiler/plan.py).
PLAN_VERSIONS = (1,)

_STR, _OPT_STR, _STRS = "a string", "a string or null", "a list of strings"
_KERNEL_FIELDS = {"name": _STR, "op_type": _STR, "op_class": _STR, "nodes": _STRS, "rule": _OPT_STR,
                  "fusion": ("none", "graph", "ub", "cast", "copy"), "inputs": _STRS, "outputs": _STRS,
                  "internal": _STRS, "precision": ("fp16", "fp32"), "implmode": ("high_precision",
                  "high_performance"), "cast_of": _OPT_STR, "placement": ("NPU", "CPU"), "exec_nodes": _STRS}
_TENSOR_FIELDS = {"name": _STR, "dtype": _STR, "shape": "a list of ints (null for dynamic dims) or null",
                  "nbytes": "an int >= 0", "storage": ("arena", "dynamic", "host"), "offset": "an int",
                  "first": "an int >= -1", "last": "an int >= -1", "producer": _OPT_STR, "stream": ("npu", "cpu"),
                  "alias_of": _OPT_STR}
_PLAN_FIELDS = {"version": "an int", "model": _OPT_STR, "config": "an object", "kernels": "a list of objects",
                "tensors": "a list of objects", "graph_inputs": _STRS, "graph_outputs": _STRS, "folded": _STRS,
                "arena_bytes": "an int >= 0", "lower_bound_bytes": "an int >= 0", "alignment": "an int >= 1"}
_REQUIRED = {"plan": ("config", "kernels", "tensors", "graph_inputs", "graph_outputs"),
             "kernel": ("name", "op_type", "op_class", "nodes"), "tensor": ("name", "dtype", "shape")}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fits(value, want) -> bool:
    """Whether ``value`` (parsed JSON) is what the description ``want`` of a field asks for."""
    if isinstance(want, tuple):
        return value in want
    if want == _STR:
        return isinstance(value, str)
    if want == _OPT_STR:
        return value is None or isinstance(value, str)
    if want == _STRS:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    if want.startswith("a list of ints"):
        return value is None or (isinstance(value, list) and all(x is None or (_is_int(x) and x >= 0) for x in value))
    if want.startswith("an int"):
        low = int(want.rsplit(" ", 1)[1]) if ">=" in want else None
        return _is_int(value) and (low is None or value >= low)
    if want == "an object":
        return isinstance(value, dict)
    if want == "a list of objects":
        return isinstance(value, list) and all(isinstance(x, dict) for x in value)
    raise AssertionError(want)


def _check_fields(d: dict, spec: dict, kind: str, where: str) -> None:
    """Raise InputError naming the first unknown, missing or wrongly typed field of ``d`` (a plan, kernel or
    tensor object, described by ``where``)."""
    for key in d:
        if key not in spec:
            raise InputError(f"{where}: unknown field '{key}' in a {kind}; the plan.json format "
                             "(toolkit/compiler/plan.py) has " + ", ".join(spec))
    for key in _REQUIRED[kind]:
        if key not in d:
            raise InputError(f"{where}: the {kind} has no field '{key}'; write the plan with `npuscope compile`")
    for key, want in spec.items():
        if key in d and not _fits(d[key], want):
            desc = "one of " + ", ".join(repr(w) for w in want) if isinstance(want, tuple) else want
            raise InputError(f"{where}: field '{key}' is {json.dumps(d[key])[:60]} but must be {desc}")


def validate_plan_dict(d, path) -> None:
    """Check the parsed plan.json ``d`` (from file ``path``) field by field: known version, every field of the
    plan, of each kernel and each tensor of the documented type and range (toolkit/compiler/plan.py), each
    tensor name once, every ``alias_of`` naming another tensor of the plan.
    Raises InputError naming the file, the kernel/tensor and the field."""
    where = plan_where(path)
    if not isinstance(d, dict):
        raise InputError(f"{where} holds a JSON {type(d).__name__}, not a plan object; write it with `npuscope compile`")
    _check_fields(d, _PLAN_FIELDS, "plan", where)
    if d.get("version", 1) not in PLAN_VERSIONS:
        raise InputError(f"{where}: field 'version' is {json.dumps(d['version'])[:40]} but this npuscope reads "
                         f"plan.json version {', '.join(map(str, PLAN_VERSIONS))}; recompile with `npuscope compile`")
    for i, k in enumerate(d["kernels"]):
        _check_fields(k, _KERNEL_FIELDS, "kernel", f"{where}, kernel #{i} '{str(k.get('name'))[:60]}'")
    for i, t in enumerate(d["tensors"]):
        _check_fields(t, _TENSOR_FIELDS, "tensor", f"{where}, tensor #{i} '{str(t.get('name'))[:60]}'")
    _check_tensor_names(d["tensors"], where)


def _check_tensor_names(tensors: list[dict], where: str) -> None:
    """Raise InputError for a tensor name listed twice, or an ``alias_of`` that names no tensor of the plan
    (or the tensor itself): a plan maps each tensor name to one range, and an alias shares an existing one."""
    first: dict[str, int] = {}
    for i, t in enumerate(tensors):
        name = t["name"]
        if name in first:
            raise InputError(f"{where}, tensor #{i} '{name[:60]}': the name is listed twice (also tensor "
                             f"#{first[name]}); list each tensor once (write the plan with `npuscope compile`)")
        first[name] = i
    for i, t in enumerate(tensors):
        alias = t.get("alias_of")
        if alias is None:
            continue
        if alias == t["name"]:
            raise InputError(f"{where}, tensor #{i} '{alias[:60]}': field 'alias_of' names the tensor itself; "
                             "set it to null or to the tensor whose bytes it shares")
        if alias not in first:
            raise InputError(f"{where}, tensor #{i} '{t['name'][:60]}': field 'alias_of' names '{alias[:60]}', "
                             f"which is not a tensor of the plan{suggest(alias, list(first))}; set it to null or "
                             "to the tensor whose bytes it shares")


def load_plan(path) -> Plan:
    """Read plan.json and validate it (:func:`validate_plan_dict`). Raises InputError (missing file, bad JSON,
    an unknown version, missing/unknown/wrongly typed fields, a tensor listed twice, an ``alias_of`` naming no
    tensor, offsets outside the arena), also for a path the file system refuses (toolkit.core.userpaths.check_path:
    a name too long, a symbolic link loop, a file on the way, permission denied). A misaligned offset is left to
    ``memcheck`` (toolkit.memcheck.static_check.misaligned)."""
    p = Path(path)
    check_path(p, "plan file", InputError, "give the plan.json written by `npuscope compile`")
    if not p.exists() or p.is_dir():
        raise InputError(f"plan file '{p}' {'is a folder' if p.is_dir() else 'does not exist'}; write one with "
                         "`npuscope compile` (plan.json)")

    # a regular file of at most LIMITS["artifact"]: a FIFO, device or a link to /dev/zero is refused, never read
    raw = read_limited_bytes(p, "plan file", InputError, "give the plan.json written by `npuscope compile`",
                             limit="artifact")
    try:
        data = json_loads(raw.decode("utf-8"), f"plan file '{p}'", InputError)
    except json.JSONDecodeError as exc:
        raise InputError(f"plan file '{p}' is not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"plan file '{p}' is not UTF-8 text; give the plan.json written by `npuscope compile`") from None
    validate_plan_dict(data, p)
    plan = Plan.from_dict(data)
    for t in plan.tensors.values():
        if t.storage == "arena" and (t.offset < 0 or t.offset + t.nbytes > plan.arena_bytes):
            raise InputError(f"plan '{p}': tensor '{t.name}' at offset {t.offset} with {t.nbytes} bytes does not "
                             f"fit the arena of {plan.arena_bytes} bytes; raise arena_bytes or move the tensor")
    return plan


def plan_config(plan: Plan, path):
    """The toolkit.config.schema.Config ``plan`` (read from ``path``) records; raises ConfigError (exit 2) when the
    recorded config is not valid (an unknown option or value)."""
    return Config.from_dict(plan.config, where=f"{plan_where(path)} config")


def open_plan(path, model: str | None, config):
    """What ``run --plan`` and ``memcheck --plan`` start from: (plan, MODEL, Config). ``config`` None means
    the plan's own recorded config (:func:`plan_config`; the commands apply their command-line options on top of
    it); ``model`` None the model the plan records (:func:`model_for_plan`). Raises InputError (bad plan file),
    UsageError/ConfigError (exit 2)."""
    plan = load_plan(path)
    model = model_for_plan(model, plan, path)
    return plan, model, (config if config is not None else plan_config(plan, path))


def plan_where(path) -> str:
    """How messages name a plan: ``plan file '<path>'`` (the file the user gave, never the Plan's repr)."""
    return f"plan file '{path}'"


def model_for_plan(model: str | None, plan: Plan, path) -> str:
    """The MODEL argument to compile for ``plan`` (loaded from ``path``): ``model`` when given, else the model
    the plan records (``plan.model``: a path, bundled sample or zoo name, see toolkit.source.resolve_model).
    Raises UsageError (exit 2) when neither names a model that exists."""
    if model:
        return model
    if not plan.model:
        raise UsageError(f"{plan_where(path)} does not record which model it was compiled from; give MODEL "
                         f"before --plan (the model the plan was made for)")

    try:
        resolve_model(plan.model)
    except UserError:
        raise UsageError(f"{plan_where(path)} records model '{plan.model}', which cannot be found from here; give "
                         f"MODEL before --plan") from None
    return plan.model


#: How plan-mismatch messages name the config the fresh compile used.
CONFIG_IN_USE = "the config in use (the plan's own, or --config, with the options given)"


def attach_plan(compiled, plan: Plan, where: str = "plan"):
    """A copy of CompileResult ``compiled`` running ``plan``; raises InputError naming the first kernel or
    tensor that differs from the fresh compile (recompile with the plan's config)."""
    fresh = compiled.plan
    got, want = [k.name for k in plan.kernels], [k.name for k in fresh.kernels]
    if got != want:
        i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise InputError(f"{where}: kernel #{i} is {got[i] if i < len(got) else 'missing'!r} but compiling the model "
                         f"with {CONFIG_IN_USE} gives "
                         f"{want[i] if i < len(want) else 'nothing'!r}; the plan was "
                         "made for another model or config")
    for i, (mine, theirs) in enumerate(zip(plan.kernels, fresh.kernels)):
        a, b = dataclasses.asdict(mine), dataclasses.asdict(theirs)
        key = next((f for f in a if a[f] != b[f]), None)
        if key is not None:
            raise InputError(f"{where}: kernel #{i} '{mine.name}' has {key} {a[key]!r} but compiling the model with "
                             f"{CONFIG_IN_USE} gives {b[key]!r}; only offsets and lifetimes may be edited "
                             "(change precision or placement in the config and recompile)")
    for key in ("graph_inputs", "graph_outputs"):
        if getattr(plan, key) != getattr(fresh, key):
            raise InputError(f"{where}: {key} is {getattr(plan, key)!r} but compiling the model with "
                             f"{CONFIG_IN_USE} gives {getattr(fresh, key)!r}; only offsets and lifetimes may be edited")
    for name, t in fresh.tensors.items():
        mine = plan.tensors.get(name)
        if mine is None:
            raise InputError(f"{where}: tensor '{name}' is missing but the compiled model has it "
                             f"({t.dtype}{t.shape} {t.storage}); only offsets and lifetimes may be edited")
        diff = tensor_differences(mine, t)
        if diff:
            raise InputError(f"{where}: tensor '{name}' has {'; '.join(diff)}; only offsets and lifetimes may be "
                             "edited (recompile with `npuscope compile` to change the rest)")
    return dataclasses.replace(compiled, plan=plan)


#: Tensor fields a loaded plan must keep as compiled (kernels are built from them); offset, first, last and
#: alias_of are the memory decisions a plan may change.
FIXED_TENSOR_FIELDS = ("dtype", "shape", "nbytes", "storage")


def tensor_differences(mine, compiled) -> list[str]:
    """``["nbytes 100 but the compiled model has 65536", ...]``: each of :data:`FIXED_TENSOR_FIELDS` whose
    value in the plan's tensor ``mine`` differs from the freshly compiled tensor ``compiled`` (JSON values)."""
    out = []
    for key in FIXED_TENSOR_FIELDS:
        a, b = getattr(mine, key), getattr(compiled, key)
        if a != b:
            out.append(f"{key} {json.dumps(a)} but the compiled model has {json.dumps(b)}")
    return out


def no_reuse_plan(plan: Plan) -> Plan:
    """A copy of ``plan`` in which every arena tensor has its own range (the differential's reference)."""
    out = copy.deepcopy(plan)
    cursor = 0
    for t in out.tensors.values():
        if t.storage == "arena":
            t.offset, t.alias_of = cursor, None
            cursor += align(max(t.nbytes, 1), plan.alignment)
    out.arena_bytes = cursor
    return out


def relocate(plan: Plan, names) -> Plan:
    """A copy of ``plan`` where the tensors ``names`` get exclusive ranges appended after the arena (what
    ``disable_reuse`` does); everything else keeps its offset."""
    out = copy.deepcopy(plan)
    cursor = align(out.arena_bytes, plan.alignment)
    for n in sorted(set(names), key=lambda n: (out.tensors[n].first, n)):
        t = out.tensors[n]
        if t.storage == "arena":
            t.offset, t.alias_of = cursor, None
            cursor += align(max(t.nbytes, 1), plan.alignment)
    for t in out.tensors.values():  # tensors that aliased a moved one no longer share its bytes
        if t.alias_of in names:
            t.alias_of = None
    out.arena_bytes = cursor
    return out
