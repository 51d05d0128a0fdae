"""`npuscope compare-dumps GOLDEN TARGET`: compare two sets of dumps with compare's metrics, advisor and report.

:func:`compare_dumps` reads both sides (:mod:`toolkit.dumps.readers`), pairs them (:mod:`toolkit.dumps.match`),
compares each pair (:mod:`toolkit.dumps.table`), runs the first-divergence advisor
(:func:`toolkit.compare.advisor.advise` over the plan the dumps imply, :mod:`toolkit.dumps.dump_plan`: one
kernel per target op)
and returns a :class:`~toolkit.compare.diagnosis.Diagnosis`. :func:`compare_dumps_command` writes the folder:
result.csv, summary.json, findings.json, kernel_times.csv (empty: dumps carry no times) and index.html.

Verdict: FAIL when an abnormal (or overflowing) tensor is a model output (with ``model``) or any abnormal
tensor (without: the outputs are unknown); with ``model``, also when a graph output could not be compared
(its dump missing on a side, unreadable or mis-shaped: nothing vouches for it, as in ``compare``); and when
no tensor at all could be compared. WARN when intermediates are abnormal or intermediate rows could not be
compared (missing, unreadable, mis-shaped dumps; "fused into" rows do not count); PASS otherwise.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from toolkit.compare.advisor import advise, first_divergence, golden_nonfinite_rows
from toolkit.compare.counts import layer_counts
from toolkit.compare.diagnosis import Diagnosis
from toolkit.compare.metrics import resolve_thresholds, with_shorthands
from toolkit.compare.metrics.thresholds import check_tensors
from toolkit.compare.metrics.registry import METRICS
from toolkit.compare.metrics.spec import HIGHER_IS_BETTER
from toolkit.core.artifacts import check_out, output_dir
from toolkit.core.env import environment
from toolkit.core.errors import InputError
from toolkit.core.records import Finding
from toolkit.core.text import join_present, show_crossed
from toolkit.dumps.dump_plan import plan_of_pairs
from toolkit.dumps.entry import DumpSet
from toolkit.dumps.mapping import check_mapping_model, load_mapping
from toolkit.dumps.match import Pairing, pair_with_model, pair_without_model
from toolkit.dumps.readers import SideSpec, read_side
from toolkit.dumps.sides import lower_precision_golden
from toolkit.dumps.table import compare_pairs, reason_kind
from toolkit.ir.load import load_model, loaded_sha256
from toolkit.report.assets import PLOTLY_FILE
from toolkit.report.dumps_html import render_dump_report
from toolkit.report.tables import write_tables
from toolkit.source import resolve_model

REPORTS_DIR = Path("reports")
#: summary.json first_divergence "basis" without --model: the graph, so each tensor's inputs, is unknown.
NO_MODEL_BASIS = "dump order (no --model: its inputs cannot be checked; pass --model)"
KERNEL_TIME_COLUMNS = ["Kernel", "OpType", "Precision", "Nodes", "HostMs"]
#: CompareFailReason kinds that do not make the verdict WARN.
EXPECTED_GAPS = ("fused into",)
_ADVICE = {
    "shape mismatch": "the target may be in a device layout (NC1HWC0, FRACTAL_NZ): convert it with msaccucmp.py "
                      "convert -f NCHW, or check that --mapping names the right original node",
    "dtype class mismatch": "integer vs float dumps are of different tensors: check the names and the --mapping",
    "no target dump": "the target holds no dump of these tensors: fused on the device (give --mapping) or not dumped",
    "no golden dump": "the golden run holds no dump of these: ops the device compiler added (TransData, Cast) or "
                      "a golden run that dumped less",
}


#: Why a dump could not be read (toolkit.dumps.entry.read_npy's reasons) -> what to do about it.
_UNREADABLE_ADVICE = {
    "truncated": "a truncated .npy means the dump was interrupted or the disk filled: re-dump these files",
    "object (pickled)": "object (pickled) arrays are refused for safety (loading them can run code): save the "
                        "tensors as numeric arrays, np.save(path, np.asarray(t, dtype=np.float32))",
    "not a readable .npy": "these files are not .npy arrays that NumPy can read: re-dump or re-convert them",
    "not a regular file": "FIFOs, sockets, devices and links to them are never read (they can block or never end): "
                          "replace them with the .npy files themselves",
    "a broken symbolic link": "these symbolic links point nowhere: re-dump the files or fix the links",
    "raw dump": "these raw device dumps fail a check of their header (the reason names it: truncated, sizes that "
                "do not add up, an unknown data type or format, a layout that cannot be converted): re-dump them, "
                "or convert them with msaccucmp.py convert",
    "file name not understood": "these files are named like dumps but fit no naming convention (the reason says "
                                "why): rename them (docs/compare-dumps.md) or move them out of the folder",
}


def _advice(kind: str, reasons) -> str:
    """The recommendation for rows of ``kind``; for '<side> dump unreadable' the advice for each reason the
    rows' CompareFailReason texts ``reasons`` give (truncated, pickled, not .npy)."""
    if not kind.endswith("dump unreadable"):
        return _ADVICE.get(kind, "see CompareFailReason in result.csv")
    prefix = f"{kind} ("
    found = []
    for reason in reasons:
        rest = reason[reason.find(prefix):].split("; target dump unreadable (")[0] if prefix in reason else ""
        for why, advice in _UNREADABLE_ADVICE.items():
            if f"): {why}" in rest and advice not in found:
                found.append(advice)
    return "; ".join(found) or "these dumps could not be read (CompareFailReason in result.csv says why): re-dump them"


def _noop(msg: str) -> None:
    pass


def compare_dumps(golden: SideSpec, target: SideSpec, *, mapping: str | None = None, model: str | None = None,
                  thresholds: str | dict | None = None, progress=_noop) -> Diagnosis:
    """Compare ``target`` with ``golden`` (see module docstring).

    Args:
        golden, target: how to read each side (:class:`toolkit.dumps.readers.SideSpec`).
        mapping: a mapping JSON file (:mod:`toolkit.dumps.mapping`); applies to the target's op names.
        model: an ONNX file, bundled sample or zoo name (toolkit.source.resolve_model); gives the row order,
            node→tensor names and the graph for origin/propagated roles.
        thresholds: abnormal lines (toolkit.compare.metrics.parse_thresholds syntax or a dict; default the
            compare tool's).

    Raises:
        toolkit.core.errors.UserError (one line): unreadable sides, mapping or model; sides keyed differently
        without a model; bad thresholds.
    """
    t0 = time.perf_counter()
    lines = resolve_thresholds(thresholds)
    maps = load_mapping(mapping) if mapping else None
    onnx_model, model_info = _load_model(model, progress)
    if maps and onnx_model is not None:
        check_mapping_model(maps, [n.name for n in onnx_model.graph.node if n.name], f"mapping file '{mapping}'",
                            model)
    progress(f"reading golden {golden.path}")
    g = read_side(golden)
    progress(f"reading target {target.path}")
    t = read_side(target)
    pairing = pair_with_model(onnx_model, g, t, maps) if onnx_model is not None else pair_without_model(g, t, maps)
    check_comparable(pairing, golden.path, target.path, model)
    check_tensors(lines, [p.tensor for p in pairing.pairs], "compared tensor")
    read_ms = (time.perf_counter() - t0) * 1e3
    progress(f"comparing {len(pairing.pairs)} tensor(s)")
    ts = time.perf_counter()
    df = compare_pairs(pairing.pairs, lines, by_graph=onnx_model is not None)
    outputs = [o.name for o in onnx_model.graph.output] if onnx_model is not None else None
    plan = plan_of_pairs(pairing.pairs, df, outputs)
    swapped = lower_precision_golden(df)
    findings = ([swapped] if swapped else []) + advise(df, plan, outputs=outputs, graph_known=onnx_model is not None,
                                                       lines=lines) + gap_findings(df)
    for f in findings:  # dumps cannot be re-run here: a keep_dtype set is a candidate, never a verified fix
        if isinstance(f.evidence, dict) and (f.evidence.get("keep_dtype") or "(keep_dtype)" in f.recommendation):
            f.evidence["verified"] = False
            f.recommendation += UNVERIFIED
            if swapped:  # the advice takes TARGET for the low-precision run: here it is GOLDEN
                f.recommendation += f" [doubtful: {swapped.kind}, the arguments look swapped]"
    first = first_divergence(df)
    if first:
        first["basis"] = "graph" if onnx_model is not None else NO_MODEL_BASIS
    verdict, reasons = judge(df, outputs, findings)
    timings = {"read_ms": read_ms, "compare_ms": (time.perf_counter() - ts) * 1e3,
               "total_ms": (time.perf_counter() - t0) * 1e3}
    if swapped:
        pairing.notes.insert(0, f"{swapped.kind}: {swapped.recommendation}")
    summary = _summary(golden, target, g, t, pairing, df, mapping, model_info, lines, verdict, reasons, first, timings)
    return Diagnosis(summary=summary, table=df, findings=findings, environment=environment(),
                     kernel_times=pd.DataFrame(columns=KERNEL_TIME_COLUMNS))


def check_comparable(pairing: Pairing, golden: str, target: str, model: str | None) -> None:
    """Raise InputError when no row has a golden and a target dump to compare (dumps of another model than
    ``--model``, or golden and target folders of different models): a verdict over nothing would vouch for
    nothing. The message names the first row and why it is not compared."""
    if any(p.golden is not None and p.target is not None and not p.reason for p in pairing.pairs):
        return
    first = pairing.pairs[0] if pairing.pairs else None
    if first is None:
        why = "no dump was read"
    else:
        why = first.reason or ("no target dump" if first.target is None else "no golden dump")
        why = f"first row '{first.tensor}': {why}"
    hint = ("pass the model the dumps were taken from as --model, or leave --model out" if model else
            "check that both folders hold dumps of one model (names as the compare tool writes them)")
    raise InputError(f"nothing to compare between '{golden}' and '{target}': none of the {len(pairing.pairs)} "
                     f"row(s) has both a golden and a target dump ({why}); {hint}")


def compare_dumps_command(golden: str, target: str, *, mapping: str | None = None, model: str | None = None,
                          thresholds: str | None = None, out: str | None = None, html: bool = True,
                          golden_format: str = "auto", target_format: str = "auto", golden_runner: str | None = None,
                          golden_iteration: int = 0, target_runner: str | None = None, target_iteration: int = 0,
                          atol=(), rtol=(), progress=_noop) -> dict:
    """Run :func:`compare_dumps` and write the report folder (default ``reports/compare-dumps-<time>/``).
    ``atol`` / ``rtol``: the ``--atol`` / ``--rtol`` shorthands, appended to ``thresholds``.

    Returns {"summary": [lines], "out": folder, "files": {label: file}, "diagnosis", "verdict"}.
    """
    thresholds = with_shorthands(thresholds, atol, rtol)
    resolve_thresholds(thresholds)  # a bad line is a usage error before any work
    check_out(out)  # a taken --out is refused before the dumps or the model are read
    diag = compare_dumps(SideSpec(golden, "golden", golden_format, golden_runner, golden_iteration),
                         SideSpec(target, "target", target_format, target_runner, target_iteration),
                         mapping=mapping, model=model, thresholds=thresholds, progress=progress)
    with output_dir(out, REPORTS_DIR, "compare-dumps") as folder:
        progress("writing the report")
        diag.artifacts = {"result": "result.csv", "summary": "summary.json", "findings": "findings.json"}
        if html:
            diag.artifacts["report"] = "index.html"
            diag.artifacts["plotly.js"] = PLOTLY_FILE  # written beside the page by the render
        files = write_tables(diag, folder)
        if html:
            files["report"] = render_dump_report(diag, folder).name
    lines = console_lines(diag)
    lines.append(f"report: {(folder / ('index.html' if html else 'summary.json')).resolve()}")
    return {"summary": lines, "out": folder, "files": files, "diagnosis": diag, "verdict": diag.summary["verdict"]}


def _load_model(model: str | None, progress):
    if not model:
        return None, {"model": "", "model_name": "", "model_sha256": ""}

    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    sha = loaded_sha256(src.path)  # the bytes loaded
    return m, {"model": str(src.path), "model_name": src.name, "model_sha256": sha}


#: Appended to a compare-dumps finding that names a keep_dtype set: nothing was applied or re-run.
UNVERIFIED = (" [a candidate, not applied: compare-dumps only reads the dumps and cannot re-run them (it does not "
              "know which kernels ran in FP16 either); `npuscope diagnose MODEL --inputs INPUTS` applies and "
              "re-runs every keep_dtype set it advises]")


def judge(df: pd.DataFrame, outputs: list[str] | None, findings=()) -> tuple[str, list[str]]:
    """(verdict, reasons): see module docstring. ``outputs``: the model's output tensors, None without a model.
    ``findings``: the advisor's; an error-severity finding the table does not already explain (abnormal rows,
    an output whose golden holds NaN/Inf) makes a PASS a WARN: never PASS beside an error finding. A golden
    dump holding NaN/Inf (any tensor without a model, the outputs with one) is a WARN reason."""
    bad = df["Abnormal"] | df["OverFlow"]
    failing = df[bad & df["TensorName"].isin(outputs)] if outputs is not None else df[bad]
    reasons = []
    if len(failing):
        what = "output" if outputs is not None else "tensor"
        reasons = [f"{what} '{r.TensorName}' is abnormal ({_crossed(r)})" for r in failing.head(10).itertuples()]
        if len(failing) > 10:
            reasons.append(f"... and {len(failing) - 10} more abnormal {what}(s) (result.csv)")
    reasons += [f"output '{name}' could not be compared ({why}): nothing vouches for it"
                for name, why in uncompared_outputs(df, outputs)]
    if reasons:
        return "FAIL", reasons
    if len(df) and not (df["CompareFailReason"] == "").any():
        return "FAIL", [f"no tensor could be compared ({len(df)} row(s), see CompareFailReason): check that the "
                        "two sides name the same ops (or give --mapping / --model); a verdict cannot rest on nothing"]
    reasons = []
    if bad.any():
        reasons.append(f"{int(bad.sum())} intermediate tensor(s) abnormal; the model outputs hold")
    # without a model no tensor is known to be an output: a golden dump holding NaN/Inf is named wherever it is
    what, names = ("output", outputs) if outputs is not None else ("dump", list(df["TensorName"]))
    nonfinite = golden_nonfinite_rows(df, names)
    for r in nonfinite.head(5).itertuples():
        reasons.append(f"the golden {what} '{r.TensorName}' holds NaN/Inf ({int(r.GoldenNaN)} NaN, "
                       f"{int(r.GoldenInf)} Inf): the model computes it; compared where finite")
    if len(nonfinite) > 5:
        reasons.append(f"... and {len(nonfinite) - 5} more golden {what}(s) holding NaN/Inf (result.csv)")
    gaps = _gap_counts(df)
    if gaps:
        reasons.append("not compared: " + ", ".join(f"{n} {kind}" for kind, n in gaps.items()))
    explained = {"golden_nonfinite"} | ({"first_divergence", "divergence_origin"} if bad.any() else set())
    errors = [f for f in findings if f.severity == "error" and f.kind not in explained]
    if errors:
        reasons.append(f"{len(errors)} finding(s) to read before signoff: "
                       + ", ".join(f"{f.kind} at '{f.subject}'" for f in errors[:5]) + " (see findings)")
    if reasons:
        return "WARN", reasons
    return "PASS", ["every compared tensor within the abnormal lines"]


def uncompared_outputs(df: pd.DataFrame, outputs: list[str] | None) -> list[tuple[str, str]]:
    """[(output tensor, why)] for each graph output (``outputs``; none without a model) that has no compared
    row: its dump is missing on a side, unreadable or mis-shaped (the row's CompareFailReason; "fused into"
    rows are the device's intermediates, never outputs, and do not count), or no row names it at all."""
    if outputs is None:
        return []
    out = []
    for name in outputs:
        rows = df[df["TensorName"] == name]
        if not len(rows):
            out.append((name, "no dump on either side"))
            continue
        why = [r for r in rows["CompareFailReason"] if r and reason_kind(r) not in EXPECTED_GAPS]
        if len(why) == len(rows):
            out.append((name, why[0]))
    return out


def _crossed(r) -> str:
    """'CosineSimilarity 0.999999, OverFlow': each crossed metric rounded away from its line
    (toolkit.core.text.show_crossed), so it never reads as the line or as 1."""
    metrics = list(r.AbnormalMetrics) or ["OverFlow"]
    shown = [f"{m} {show_crossed(getattr(r, m), METRICS[m].direction == HIGHER_IS_BETTER)}"
             if m != "OverFlow" else "OverFlow" for m in metrics]
    return ", ".join(shown)


def _gap_counts(df: pd.DataFrame) -> dict[str, int]:
    kinds = [reason_kind(r) for r in df["CompareFailReason"] if r]
    counts: dict[str, int] = {}
    for k in kinds:
        if k not in EXPECTED_GAPS:
            counts[k] = counts.get(k, 0) + 1
    return counts


def gap_findings(df: pd.DataFrame) -> list[Finding]:
    """One finding per kind of row that could not be compared (warning for broken dumps, info for gaps)."""
    out = []
    for kind, n in _gap_counts(df).items():
        rows = df[[reason_kind(r) == kind for r in df["CompareFailReason"]]]
        first = rows.iloc[0]
        severity = "info" if kind.startswith("no ") or kind.endswith("not in the model") else "warning"
        evidence = {"rows": n, "first_reason": first["CompareFailReason"],
                    "tensors": list(rows["TensorName"].head(5))}
        out.append(Finding(severity, kind.replace(" ", "_"), str(first["TensorName"]), evidence,
                           _advice(kind, rows["CompareFailReason"])))
    return out


def _side(spec: SideSpec, ds: DumpSet) -> dict:
    return {"path": str(spec.path), "format": ds.format, "detail": ds.detail, "dumps": len(ds.entries),
            "ignored_files": len(ds.ignored), "input_dumps_skipped": ds.input_dumps,
            "superseded_dumps": ds.superseded}


def _summary(golden, target, g, t, pairing: Pairing, df, mapping, model_info, lines, verdict, reasons, first,
             timings) -> dict:
    counts = {**layer_counts(df), "golden_dumps": len(g.entries), "target_dumps": len(t.entries)}
    counts.update({f"not compared: {k}": v for k, v in _gap_counts(df).items()})
    return {"verdict": verdict, "reasons": reasons, "command": "compare-dumps", **model_info,
            "inputs": f"golden {golden.path} ({g.detail}) vs target {target.path} ({t.detail})",
            "golden": _side(golden, g), "target": _side(target, t), "mapping": str(mapping) if mapping else None,
            "order": pairing.order, "notes": pairing.notes, "thresholds": lines, "first_divergence": first,
            "config": {"golden_format": g.format, "target_format": t.format, "mapping": str(mapping or ""),
                       "order": pairing.order, "thresholds": lines},
            "counts": counts, "timings_ms": timings}


def console_lines(diag: Diagnosis) -> list[str]:
    """The terminal summary: verdict, reasons, sides, first divergence and the top findings."""
    s = diag.summary
    lines = [f"verdict: {s['verdict']}"] + [f"  - {r}" for r in s["reasons"]]
    for side in ("golden", "target"):
        d = s[side]
        extra = [f"{d['ignored_files']} file(s) ignored"] if d["ignored_files"] else []
        extra += [f"{d['input_dumps_skipped']} input dump(s) skipped"] if d["input_dumps_skipped"] else []
        extra += [f"{d['superseded_dumps']} dump(s) superseded (older, or raw files converted to .npy)"] \
            if d["superseded_dumps"] else []
        lines.append(f"{side}: {d['path']}: {d['dumps']} dump(s), {d['detail']}" + (f"; {', '.join(extra)}" if extra else ""))
    lines.append(f"order: {s['order']}")
    lines += [f"note: {n}" for n in s["notes"]]
    c = s["counts"]
    lines.append(f"{c['tensors']} row(s), {c['compared']} compared, {c['abnormal']} abnormal, {c['overflow']} overflow")
    fd = s.get("first_divergence")
    if fd:
        what = join_present(fd.get("op_type"), f"tensor {fd['tensor']}",
                            f"device op {fd['kernel']}" if fd.get("kernel") else "")  # no op type without --model
        lines.append(f"first divergence: node '{fd['node']}' ({what}) [{fd['kind']}]"
                     + (f"; the first abnormal tensor in {fd['basis']}" if fd.get("basis", "graph") != "graph" else ""))
    for f in diag.findings[:5]:
        lines.append(f"{f.severity.upper():7} {f.kind}: {f.subject}: {f.recommendation}")
    return lines
