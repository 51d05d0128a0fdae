"""``npuscope tune``: the smallest set of nodes to keep in FP32 so every input meets the target."""

from __future__ import annotations

import math

from toolkit.commands.common import REPORTS_DIR, _noop, count_change
from toolkit.compare.metrics import with_shorthands
from toolkit.compare.tasks import TASKS, load_task
from toolkit.config.keep_dtype import keep_file_text, unwritable_entry
from toolkit.config.schema import Config
from toolkit.core.artifacts import check_out, output_dir, write_json, write_text
from toolkit.core.csvjson import to_csv_safe
from toolkit.diagnose import require_outputs
from toolkit.ir.load import load_model
from toolkit.report.tune_html import render_tune_report
from toolkit.signoff.criteria import show
from toolkit.source import _zoo_name_of, resolve_model
from toolkit.tuning.feeds import DEFAULT_MAX_SETS, load_feed_sets
from toolkit.tuning.tune import (
    DEFAULT_TARGET,
    check_target_outputs,
    default_target,
    format_target,
    parse_target,
    tune,
)


def _depth_text(depth) -> str:
    """" over 16 roundings" for a rounding depth above 1 (toolkit.tuning.allowance), else ""."""
    try:
        return f" over {int(depth)} roundings" if int(depth) > 1 else ""
    except (TypeError, ValueError):
        return ""


def tune_command(model: str | None, config: Config, *, inputs: str | None = None, seed: int = 0,
                 target: str | None = None, task_metrics=(), out: str | None = None, html: bool = True,
                 progress=_noop, max_inputs: int | None = None, val_range: str | None = None, atol=(),
                 rtol=(), top_k: int = 0) -> dict:
    """Run :func:`toolkit.tuning.tune.tune` and write keep_dtype.txt (the converter's format: one node name per
    line), tuned_config.json (accepted by compile/diagnose --config), summary.json, ranking.csv, ranges.csv and
    tune.html. ``met`` in the result says whether the target holds on every input. ``max_inputs``: most input
    sets ``inputs`` may give (default toolkit.tuning.feeds.DEFAULT_MAX_SETS; more is an InputError). A target
    condition no output's dtype admits is a UsageError before the inputs are read. ``atol`` / ``rtol``: the
    ``--atol`` / ``--rtol`` shorthands, appended to the target (to the default target when none is given, where
    they replace its condition on the same metric; on the user's own metric they are a UsageError).
    ``val_range``: the range of generated inputs (no ``inputs``). ``top_k``: ranked kernels whose output share
    is measured after the search (toolkit.tuning.tune.tune's ``top_k``; default 0)."""
    import dataclasses

    check_out(out)  # a taken --out and a bad target are usage errors before any work
    if target is not None:
        parsed_target = parse_target(with_shorthands(target, atol, rtol))
    else:  # the default's shorthands checked now, the default itself once the model says its outputs' dtypes
        parse_target(with_shorthands(DEFAULT_TARGET, atol, rtol, default=True))
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    require_outputs(m, src.path)
    if target is None:
        parsed_target = parse_target(with_shorthands(default_target(m), atol, rtol, default=True))
    check_target_outputs(m, parsed_target, "--target" if target or atol or rtol else "the default target")
    feeds = load_feed_sets(m, src, inputs, seed, config.input_shapes(), max_inputs or DEFAULT_MAX_SETS, val_range)
    progress(f"{len(feeds)} input set(s)")
    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    tasks = ([TASKS[zname]] if zname in TASKS else []) + [load_task(s) for s in task_metrics]
    res = tune(m, feeds, config, parsed_target, tasks=tasks, top_k=top_k, progress=progress)
    with output_dir(out, REPORTS_DIR, f"{src.name}-tune") as folder:
        progress("writing keep_dtype.txt, tuned_config.json and the report")
        files = {"keep_dtype": "keep_dtype.txt", "config": "tuned_config.json", "summary": "summary.json",
                 "ranking": "ranking.csv", "ranges": "ranges.csv"}
        entries = list(res.config.keep_dtype)
        keep_text = keep_file_text(entries)  # None: a node name no line of the file can hold
        if keep_text is None:
            del files["keep_dtype"]
        else:
            write_text(folder / files["keep_dtype"], keep_text)
        write_json(folder / files["config"], dataclasses.replace(res.config, keep_dtype=entries).to_dict())
        summary = res.summary()
        summary.update({"model": str(src.path), "model_name": src.name, "files": files})
        write_json(folder / files["summary"], summary)
        write_text(folder / files["ranking"], to_csv_safe(res.ranking, index=False))
        write_text(folder / files["ranges"], to_csv_safe(res.ranges, index=False))
        if html:
            files["report"] = render_tune_report(res, folder, src.name, artifacts=dict(files)).name
    c0, c1 = res.coverage_before, res.coverage_after
    lines = [f"target {'MET' if res.met else 'NOT MET'} on {len(feeds)} input(s): "
             + ", ".join(format_target(res.target)),
             *(f"note: {n}" for n in res.notes),
             f"{res.kept_text()} ({res.trials} trials, {res.timings_ms['total_ms'] / 1e3:.1f} s)"]
    lines += [f"  - {e['node']} ({e['op_type']}): local RED {e['local_red']:.3g}"
              + (", overflow" if e["local_overflow"] or e["range_overflow"] else "")
              + (f"; without it the target {e['without_it']}" if str(e["without_it"]).startswith("fails") else "")
              for e in res.evidence[:10]]
    floats = res.after[res.after["CosineSimilarity"].notna()] if len(res.after) else res.after
    worst = floats.sort_values("CosineSimilarity").head(1).to_dict("records") if len(floats) else []
    if worst:
        w = worst[0]
        lim = {m: [v for t, _, v in res.target if t == m] for m in ("CosineSimilarity", "MaxAbsoluteError")}
        used = w.get("FP16AllowanceUsed", math.nan)  # an |fp16 condition: per element, against FP16 rounding
        lines.append(f"worst output after: {w['Output']} on {w['Input']}: CosineSimilarity "
                     f"{show(w['CosineSimilarity'], *lim['CosineSimilarity'], digits=10)}, "
                     f"MaxAbsoluteError {show(w['MaxAbsoluteError'], *lim['MaxAbsoluteError'], digits=3)}"
                     + (f" (per element {show(used, 1.0, digits=3)} of max(limit, FP16 rounding of the value"
                        f"{_depth_text(w.get('RoundingDepth'))}))" if used == used else ""))
    exact = res.after[res.after["ExactMatchRate"].notna()] if "ExactMatchRate" in res.after else res.after.iloc[:0]
    if len(exact):  # integer/bool outputs, checked by an ExactMatchRate target
        e = exact.sort_values("ExactMatchRate").iloc[0]
        lines.append(f"worst integer output after: {e['Output']} on {e['Input']}: ExactMatchRate "
                     f"{float(e['ExactMatchRate']):.6g}")
    flops = (f"FLOPs {c0['flops_fp16_share']:.1%} -> {c1['flops_fp16_share']:.1%}" if c0["flops_total"]
             else "no Conv/MatMul/Gemm FLOPs")
    lines.append(f"FP16 coverage: ops {c0['ops_fp16_share']:.1%} -> {c1['ops_fp16_share']:.1%}, {flops}; "
                 f"{count_change('Casts', res.cost['casts_added'])}")
    if "keep_dtype" in files:
        lines.append(f"wrote {folder / 'keep_dtype.txt'} and {folder / 'tuned_config.json'}")
    else:
        lines.append(f"wrote {folder / 'tuned_config.json'}; keep_dtype.txt not written: node name "
                     f"{unwritable_entry(res.config.keep_dtype)!r} cannot be one line of it (a line break, or "
                     "spaces at an end); the config's keep_dtype list holds it")
    lines.append(f"report: {(folder / ('tune.html' if html else 'summary.json')).resolve()}")
    return {"summary": lines, "out": folder, "files": files, "result": res, "met": res.met}
