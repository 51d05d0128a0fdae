"""``npuscope memcheck``: static and dynamic checks of the memory plan."""

from __future__ import annotations

from toolkit.commands.common import REPORTS_DIR, _noop, _session_with_plan, checked
from toolkit.config.schema import Config
from toolkit.core.errors import UsageError
from toolkit.core.artifacts import check_out, output_dir, write_json
from toolkit.core.csvjson import atomic_write_text, to_csv_safe
from toolkit.core.text import human_bytes
from toolkit.engine import Session, shapes_of
from toolkit.ir.load import load_model
from toolkit.memcheck.memcheck import memcheck, policy_totals
from toolkit.memcheck.planio import open_plan, relocate
from toolkit.report.memory_html import render_memory_report
from toolkit.source import prepare_inputs, resolve_model


def memcheck_command(model: str | None, config: Config | None, *, plan: str | None = None,
                     inputs: str | None = None, seed: int = 0, val_range: str | None = None,
                     out: str | None = None, html: bool = True, overrides: dict | None = None,
                     progress=_noop) -> dict:
    """Check a memory plan statically, dynamically and differentially; propose and verify a fix.

    ``plan``: a plan.json to check (default: the plan the engine compiles with ``config``). ``config``: None
    means the plan's own config (or the defaults). Files: conflicts.csv (toolkit.memcheck.memcheck.CONFLICT_COLUMNS),
    memcheck.json (summary, conflicts, dynamic events, divergence, fix, per-policy totals), plan.json (the checked
    plan), plan_fixed.json (when a fix was made) and memory.html. ``conflicts`` in the result: their count
    (the CLI exits 1 when it is not 0). ``overrides``: the command line's options ({option: value}, None ignored)
    applied on top of the config (with ``plan``: of the plan's own unless ``config`` is given).

    Raises:
        UsageError: ``memory_reuse`` among ``overrides`` with ``plan``: the plan file fixes every arena offset, so
            a reuse policy cannot change what is checked.
    """
    check_out(out)  # before the plan or the model is read
    reuse = (overrides or {}).get("memory_reuse")
    if plan and reuse is not None:
        raise UsageError(f"--memory-reuse {reuse} with --plan: the plan file fixes every arena offset, so a reuse "
                         "policy cannot change what is checked; drop --plan to check the plan compiled with "
                         f"--memory-reuse {reuse}, or drop --memory-reuse to check the plan file")
    loaded = None
    if plan:
        loaded, model, config = open_plan(plan, model, config)
    config = checked((config or Config()).with_overrides(**(overrides or {})))
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)

    feed = prepare_inputs(m, src, inputs, seed, val_range, config.input_shapes())
    progress("compiling")
    if loaded is not None:
        sess = _session_with_plan(m, loaded, plan, config, feed.arrays)
    else:
        sess = Session(m, config or Config(), input_shapes=shapes_of(feed.arrays))
    progress("checking: static, dynamic (poisoned run), differential (reuse off vs plan)")
    res = memcheck(sess.compiled, sess.plan, feed.arrays)
    totals = policy_totals(sess.plan)
    chk = res.check
    with output_dir(out, REPORTS_DIR, f"{src.name}-memcheck") as folder:
        files = {"conflicts": "conflicts.csv", "json": "memcheck.json", "plan": "plan.json"}
        atomic_write_text(folder / "conflicts.csv", to_csv_safe(res.conflicts_table(), index=False))
        sess.plan.to_json(folder / "plan.json")
        if res.fix:
            relocate(sess.plan, res.fix["disable_reuse"]).to_json(folder / "plan_fixed.json")
            files["plan_fixed"] = "plan_fixed.json"
        if html:
            files["report"] = "memory.html"
        write_json(folder / "memcheck.json", {
            "model": str(src.path), "inputs": feed.origin, "policy": sess.plan.config.get("memory_reuse"),
            "arena_bytes": sess.plan.arena_bytes, "lower_bound_bytes": sess.plan.lower_bound_bytes,
            "clean": chk.clean, "conflicts": [c.to_dict() for c in chk.conflicts],
            "dynamic_events": [e.to_dict() for e in chk.events], "divergence": chk.divergence, "error": chk.error,
            "fix": res.fix, "policies": totals, "files": files})
        if html:
            render_memory_report(src.name, res, totals, folder, files)
    summary = [f"memory plan: policy {sess.plan.config.get('memory_reuse')}, arena {human_bytes(sess.plan.arena_bytes)}"
               f" vs lower bound {human_bytes(sess.plan.lower_bound_bytes)}",
               f"static conflicts: {len(chk.conflicts)}; dynamic events: {len(chk.events)}"]
    for c in chk.conflicts[:10]:
        if c.kind == "misaligned":  # no second tensor involved: the detail names offset and alignment
            summary.append(f"  CONFLICT {c.kind}: {c.detail}")
            continue
        summary.append(f"  CONFLICT {c.kind}: kernel '{c.writer}' (step {c.writer_step}) writes '{c.written}' over "
                       f"'{c.victim}', still read by '{c.reader}' (step {c.reader_step})")
    if chk.divergence:
        d = chk.divergence
        blame = (f"; explained by '{d['conflict']['writer']}' overwriting '{d['conflict']['victim']}'"
                 if d.get("conflict") else "")
        summary.append(f"first divergent tensor vs reuse off: '{d['tensor']}' (kernel '{d['kernel']}'){blame}")
    if chk.error:
        summary.append(f"kernel failure under poisoned memory: {chk.error}")
    if res.fix:
        summary.append(f"fix: disable_reuse = {res.fix['disable_reuse']} (verified by re-running: "
                       f"{'yes, clean' if res.fix.get('verified') else 'NO'})")
    summary.append(f"report: {(folder / ('memory.html' if html else 'memcheck.json')).resolve()}")
    return {"summary": summary, "out": folder, "files": files, "result": res,
            "conflicts": len(chk.conflicts) + len(chk.events) + (chk.error is not None)}
