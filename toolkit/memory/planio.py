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
from toolkit.errors import InputError, UsageError, UserError
from toolkit.memory.planner import align


def load_plan(path) -> Plan:
    """Read plan.json. Raises InputError (missing file, bad JSON, missing fields, bad offsets)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"plan file '{p}' does not exist; write one with `npuscope compile` (plan.json)")
    try:
        plan = Plan.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise InputError(f"plan file '{p}' is not valid JSON: {exc}") from None
    except (TypeError, KeyError) as exc:
        raise InputError(f"plan file '{p}' does not follow the plan.json format (toolkit/compiler/plan.py): "
                         f"{exc}") from None
    for t in plan.tensors.values():
        if t.storage == "arena" and (t.offset < 0 or t.offset + t.nbytes > plan.arena_bytes):
            raise InputError(f"plan '{p}': tensor '{t.name}' at offset {t.offset} with {t.nbytes} bytes does not "
                             f"fit the arena of {plan.arena_bytes} bytes; raise arena_bytes or move the tensor")
    return plan


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
    from toolkit.source import resolve_model

    try:
        resolve_model(plan.model)
    except UserError:
        raise UsageError(f"{plan_where(path)} records model '{plan.model}', which cannot be found from here; give "
                         f"MODEL before --plan") from None
    return plan.model


def attach_plan(compiled, plan: Plan, where: str = "plan"):
    """A copy of CompileResult ``compiled`` running ``plan``; raises InputError naming the first kernel or
    tensor that differs from the fresh compile (recompile with the plan's config)."""
    fresh = compiled.plan
    got, want = [k.name for k in plan.kernels], [k.name for k in fresh.kernels]
    if got != want:
        i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise InputError(f"{where}: kernel #{i} is {got[i] if i < len(got) else 'missing'!r} but compiling the model "
                         f"with the plan's config gives {want[i] if i < len(want) else 'nothing'!r}; the plan was "
                         "made for another model or config")
    for name, t in fresh.tensors.items():
        mine = plan.tensors.get(name)
        if mine is None or (mine.dtype, mine.shape, mine.nbytes, mine.storage) != (t.dtype, t.shape, t.nbytes,
                                                                                   t.storage):
            have = "missing" if mine is None else f"{mine.dtype}{mine.shape} {mine.storage}"
            raise InputError(f"{where}: tensor '{name}' is {have} but the compiled model has {t.dtype}{t.shape} "
                             f"{t.storage}; only offsets and lifetimes may be edited")
    return dataclasses.replace(compiled, plan=plan)


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
