"""Turn a :class:`~toolkit.compare.diagnosis.Diagnosis` into the plain data the report templates loop over.

All formatting happens here; the templates only loop and branch over strings, lists and dicts. Every
model-derived string reaches the template as a plain ``str`` and is escaped by jinja2's autoescape, except in
the per-tensor table rows (:func:`rows_html`: thousands of rows, built here as Markup with markupsafe.escape
applied to every value). Generic shapes used throughout:

- facts: list of ``{"key": str, "value": str}`` (a two-column key/value table);
- grid: ``{"columns": [str], "rows": [{"css": str, "mark": str, "cells": [{"text": str, "sort": str}]}]}``
  (``sort`` is the raw number for numeric cells, "" otherwise).
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd
from markupsafe import Markup, escape

from toolkit.cache.settings import compile_cache
from toolkit.compare.counts import compared_mask
from toolkit.compare.diagnosis import Diagnosis
from toolkit.core.text import human_bytes, show

#: Columns shown first in the per-tensor table; the rest follow in the DataFrame's order.
LEADING_COLUMNS = ["Index", "OpType", "NodeName", "TensorName", "Kernel", "Precision", "Role", "Abnormal",
                   "AbnormalMetrics", "CosineSimilarity", "RelativeEuclideanDistance", "MaxAbsoluteError",
                   "MeanRelativeError", "KullbackLeiblerDivergence", "RootMeanSquareError", "OverFlow",
                   "CompareFailReason"]
KERNEL_TOP = 20
VERDICT_CSS = {"PASS": "pass", "WARN": "warn", "FAIL": "fail"}
SEVERITY_CSS = {"error": "fail", "warning": "warn", "info": "info"}
STAGE_TEXT = {
    "compile": ("Compile-stage fault",
                "The plan diverges from the FP32 reference even when re-run in force_fp32: a rewrite, fusion or "
                "memory plan changed the math. Precision settings will not fix it; look at the kernel named below."),
    "precision": ("Precision",
                  "The force_fp32 re-run of the same plan matches the reference, so the divergence comes from "
                  "reduced precision (FP16 storage or FP16 accumulation). Keep the origin in FP32."),
    "none": ("No divergence", "Every compared tensor stays within the abnormal lines in both runs."),
}


# ----------------------------------------------------------------------------------------------- formatting
def is_missing(v) -> bool:
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return math.isnan(v)
    return v is pd.NA or v is pd.NaT


def fmt(v) -> str:
    """A value as display text: floats as toolkit.core.text.show prints them (6 significant digits, more
    when that would read as ±1 or on the wrong side of it), NaN/None → '',
    booleans yes/no, lists joined with ', ', dicts as 'key: value; ...'."""
    if is_missing(v):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return show(v) if np.isfinite(v) else str(float(v))
    if isinstance(v, (list, tuple, set, np.ndarray)):
        return ", ".join(fmt(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {fmt(x)}" for k, x in v.items())
    return str(v)


def sort_key(v) -> str:
    """The raw number as text for client-side numeric sorting ('' for non-numbers)."""
    if isinstance(v, (bool, np.bool_)) or is_missing(v):
        return ""
    if isinstance(v, (int, float, np.integer, np.floating)):
        return repr(float(v))
    return ""


def facts(mapping: dict | None, keys=None) -> list[dict]:
    mapping = mapping or {}
    keys = list(mapping) if keys is None else [k for k in keys if k in mapping]
    return [{"key": str(k), "value": fmt(mapping[k])} for k in keys]


def _float_cells(values: np.ndarray) -> tuple[list[str], list[str]]:
    """:func:`fmt` and :func:`sort_key` of a float column in two list passes (no per-cell type dispatch)."""
    nums, missing = values.tolist(), np.isnan(values).tolist()
    texts = ["" if nan else f"{v + 0.0:.6g}" for v, nan in zip(nums, missing)]  # + 0.0: -0.0 reads "0" as in fmt
    for i, v in enumerate(nums):
        # 6 significant digits read right except within ~1e-6 of ±1 (a cosine of 0.99999994 is not 1): those,
        # and inf, take fmt's own rule
        if not missing[i] and (abs(abs(v) - 1.0) < 1e-4 or v in (float("inf"), float("-inf"))):
            texts[i] = show(v) if abs(v) != float("inf") else str(v)
    return texts, ["" if nan else repr(v) for v, nan in zip(nums, missing)]


def column_cells(col: pd.Series) -> tuple[list[str], list[str]]:
    """Display text (:func:`fmt`) and sort key (:func:`sort_key`) of every value of ``col``, in row order.

    numpy float, int and bool columns are formatted a whole column at a time; any other dtype (object, str,
    categorical, nullable, datetime) value by value, with a shortcut for plain ``str`` values. The result is
    the same as calling fmt / sort_key on each value the column yields when iterated."""
    dtype = col.dtype
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        return _float_cells(col.to_numpy())
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        nums = col.to_numpy().tolist()
        return [str(v) for v in nums], [repr(float(v)) for v in nums]
    if isinstance(dtype, np.dtype) and dtype.kind == "b":
        return ["yes" if v else "no" for v in col.to_numpy().tolist()], [""] * len(col)
    # object and string columns: to_numpy yields the same objects as iterating, without pandas' per-item access
    values = col.to_numpy(dtype=object).tolist() if dtype == object or isinstance(dtype, pd.StringDtype) else list(col)
    return ([v if type(v) is str else fmt(v) for v in values],
            ["" if type(v) is str else sort_key(v) for v in values])


def grid(df: pd.DataFrame | None, columns=None, row_css=None, row_mark=None) -> dict:
    """A DataFrame as a grid (see module docstring); ``row_css``/``row_mark`` are per-row string lists."""
    if df is None or df.empty:
        return {"columns": [], "rows": []}
    cols = [c for c in (columns or df.columns) if c in df.columns]
    sub = df[cols]
    cells = [list(zip(*column_cells(sub.iloc[:, j]))) for j in range(sub.shape[1])]
    rows = [{"css": row_css[i] if row_css else "", "mark": row_mark[i] if row_mark else "",
             "cells": [{"text": text, "sort": sort} for text, sort in rec]}
            for i, rec in enumerate(zip(*cells))]
    return {"columns": [str(c) for c in cols], "rows": rows}


# ------------------------------------------------------------------------------------------------- sections
def origin_mask(diag: Diagnosis) -> pd.Series:
    """Rows that are an origin: Role == "origin", or the tensor of the stage's first divergence."""
    t = diag.table
    role = t["Role"].astype(str) if "Role" in t.columns else pd.Series("", index=t.index)
    mask = role == "origin"
    tri = diag.triage or {}
    first = (tri.get("fp32_first_divergence") if (diag.summary.get("stage") or tri.get("stage")) == "compile"
             else diag.summary.get("first_divergence")) or {}
    if first.get("tensor") and "TensorName" in t.columns:
        mask = mask | (t["TensorName"].astype(str) == str(first["tensor"]))
    return mask.fillna(False).astype(bool)


def verdict_section(diag: Diagnosis) -> dict:
    s = diag.summary
    verdict = str(s.get("verdict", "UNKNOWN"))
    counts = s.get("counts") or {}
    keys = ["model", "model_sha256", "inputs", "seed", "stage"]
    return {"label": verdict, "css": VERDICT_CSS.get(verdict, "info"),
            "reasons": [fmt(r) for r in s.get("reasons") or []],
            "facts": facts(s, keys) + facts(counts),
            "timings": [{"key": k, "value": f"{v:.1f} ms" if isinstance(v, (int, float)) and not is_missing(v) else fmt(v)}
                        for k, v in (s.get("timings_ms") or {}).items()]}


#: The sentence under the verdict: can the model ship (PASS / WARN / FAIL).
SHIP_TEXT = {
    "PASS": "Can ship: every graph output and task check holds within the abnormal lines.",
    "WARN": ("Can ship with care: {what}. Apply the fix below so that other inputs do not carry the error on to an "
             "output."),
    "FAIL": "Do not ship: {what}.",
}


def _first_finding(diag: Diagnosis, kinds=("compile_stage_fault", "first_divergence")):
    for f in diag.findings:
        if getattr(f, "kind", None) in kinds:
            return f
    return None


def _why(first: dict, lines: dict, finding=None) -> str:
    """One line of evidence for the origin ``first`` (a first_divergence record): the storage rounding, the
    overflow, or the constant FP16 changes that its kernel reads (the first of toolkit.compare.advisor's
    kernel_constants, in the evidence of ``finding``, the first_divergence finding, when it is about the same
    node) and the lines its tensor crosses."""
    ev = first.get("evidence") or {}
    sr = ev.get("storage_rounding")
    if isinstance(sr, dict) and sr.get("metric"):
        return (f"its FP16 storage breaks {sr.get('consumer_node')} ({sr.get('consumer_op_type')}): "
                f"{sr['metric']} {fmt(sr.get('exact_value'))} on the exact values, {fmt(sr.get('stored_value'))} "
                "on them rounded to FP16 as the plan stores them")
    ov = ev.get("overflow")
    if isinstance(ov, dict):
        return "FP16 overflow: " + fmt(ov)
    fev = finding.evidence if finding is not None and finding.subject == first.get("node") and \
        isinstance(finding.evidence, dict) else {}
    consts = [c for c in fev.get("fp16_constants") or [] if isinstance(c, dict)]
    parts = [f"it reads constant '{c.get('name')}'" + (f" ({c['source']})" if c.get("source") else "")
             + f", which FP16 changes ({c.get('change')})" for c in consts[:1]]
    for metric in ev.get("abnormal_metrics") or []:
        if metric in ev and metric in lines:
            parts.append(f"{metric} {fmt(ev[metric])} (line {fmt(lines[metric])})")
        else:
            parts.append(str(metric))
    return "; ".join(parts) or fmt({k: ev[k] for k in ("CosineSimilarity", "MaxAbsoluteError") if k in ev})


def _restores(diag: Diagnosis, first: dict, stage: str) -> str:
    ev = first.get("evidence") or {}
    sr = ev.get("storage_rounding")
    if isinstance(sr, dict) and sr.get("metric"):
        return (f"{sr.get('consumer_node')}'s {sr['metric']} back to {fmt(sr.get('exact_value'))}: measured by "
                "re-running it alone on the exact (unrounded) reference inputs")
    checked = (diag.triage or {}).get("fp32_tensors_checked")
    tight = (diag.triage or {}).get("fp32_tight_lines") or []
    if stage == "precision" and tight:  # toolkit.diagnose.triage: a user line FP32 rounding itself crosses
        return ("the reference's values within FP32 rounding only: the same plan re-run in force_fp32 still "
                f"crosses the line you set at '{tight[0]['tensor']}' by FP32 rounding (line_tighter_than_fp32), "
                "which no precision setting can meet")
    if stage == "precision":
        return ("the reference's values: the same plan re-run in force_fp32 matches the FP32 reference"
                + (f" at all {checked} tensors checked" if checked else ""))
    if stage == "compile":
        return "nothing a precision setting can: the plan diverges even in force_fp32 (a rewrite or fusion)"
    return ""


def answer_section(diag: Diagnosis) -> dict:
    """The first screen of a diagnose page: {"label", "css", "ship", "where": facts, "why", "fix": {"text",
    "how"} | None, "restores", "recommendation", "found"} from the summary, the stage's first divergence and its
    finding; the fix is the verified one (summary["fix"], toolkit.tuning.advice: applied and re-run), never an
    unverified keep_dtype, and "restores" its sentence. "recommendation" is the accumulated_error finding's when
    there is one (the first divergence is then only where a line is crossed first). With a
    device_kernel_deviation finding (device dumps: the device op computes something else than the simulated
    kernel on the same inputs), "recommendation" and
    "restores" are that finding's: no simulated precision setting is claimed to restore the device's output."""
    s = diag.summary
    verdict = str(s.get("verdict", "UNKNOWN"))
    reasons = [fmt(r) for r in s.get("reasons") or []]
    what = "; ".join(reasons) or "see the findings"
    ship = s.get("ship") or SHIP_TEXT.get(verdict, "{what}").format(what=what)
    tri = diag.triage or {}
    stage = str(s.get("stage") or tri.get("stage") or "none")
    first = (tri.get("fp32_first_divergence") if stage == "compile" else s.get("first_divergence")) or {}
    # accumulated error (toolkit.tuning.advice): no single kernel explains the outputs, whatever diverged first
    finding = _first_finding(diag, ("accumulated_error",)) or _first_finding(diag)
    out = {"label": verdict, "css": VERDICT_CSS.get(verdict, "info"), "ship": ship, "found": bool(first),
           "where": [], "why": "", "fix": None, "restores": "",
           "recommendation": fmt(finding.recommendation) if finding is not None else ""}
    verified = s.get("fix") if isinstance(s.get("fix"), dict) else {}
    keep = verified.get("keep_dtype") if verified.get("met") else None
    if keep:  # only a fix that was applied and re-run (toolkit.tuning.advice)
        items = ", ".join('"' + str(k).replace("\\", "\\\\").replace('"', '\\"') + '"' for k in keep)
        files = verified.get("files") or {}
        out["fix"] = {"text": f"keep_dtype = [{items}]",
                      "how": (f"pass --config {files['config']} (written beside this page"
                              + (f", with {files['keep_dtype']})" if files.get("keep_dtype") else ")")
                              if files.get("config") else "add the line to your config and pass --config")}
    out["restores"] = verified.get("sentence") or ""
    out["found"] = bool(first) or out["fix"] is not None  # accumulated error: no origin, but a verified fix
    if not first:
        return out
    lines = s.get("thresholds") if isinstance(s.get("thresholds"), dict) else {}
    out["where"] = [{"key": k, "value": fmt(first.get(k))} for k in ("node", "op_type", "kernel", "precision", "tensor")
                    if not is_missing(first.get(k)) and first.get(k) != ""]
    out["why"] = _why(first, lines, _first_finding(diag, ("first_divergence",)))
    device = _first_finding(diag, ("device_kernel_deviation",))
    if device is not None:  # device dumps: the device op itself computes something else than the simulated kernel
        out["recommendation"] = fmt(device.recommendation)
        out["restores"] = ("nothing the simulated plan can show: on the device's own inputs the simulated kernel "
                           f"'{device.subject}' matches the reference, the device op does not "
                           "(device_kernel_deviation)")
        return out
    out["restores"] = out["restores"] or _restores(diag, first, stage)
    return out


def _divergence_run(title: str, first: dict | None) -> dict:
    if not first:
        return {"title": title, "found": False, "facts": [], "evidence": []}
    return {"title": title, "found": True,
            "facts": facts(first, ["node", "op_type", "tensor", "kernel", "precision", "kind"]),
            "evidence": facts(first.get("evidence") or {})}


def triage_section(diag: Diagnosis) -> dict:
    tri = diag.triage or {}
    stage = str(tri.get("stage") or diag.summary.get("stage") or "none")
    headline, explanation = STAGE_TEXT.get(stage, (stage, ""))
    npu_first = tri.get("npu_first_divergence", diag.summary.get("first_divergence"))
    extra = {k: v for k, v in tri.items()
             if k not in ("stage", "fp32_first_divergence", "npu_first_divergence") and not isinstance(v, pd.DataFrame)}
    if diag.summary.get("origin_nodes"):
        extra["origin_nodes"] = diag.summary["origin_nodes"]
    return {"stage": stage, "css": {"compile": "fail", "precision": "warn"}.get(stage, "pass"),
            "headline": headline, "explanation": explanation,
            "runs": [_divergence_run("NPU run (configured precision)", npu_first),
                     _divergence_run("Re-run in force_fp32", tri.get("fp32_first_divergence"))],
            "facts": facts(extra)}


#: Card order of the findings: errors first, then warnings, then the rest (the advisor's order within each).
SEVERITY_ORDER = {"error": 0, "warning": 1}


def findings_section(diag: Diagnosis) -> dict:
    """{"count", "rows": [{"severity", "css", "kind", "subject", "evidence" (facts), "recommendation"}]}, errors
    first (:data:`SEVERITY_ORDER`)."""
    out = []
    ordered = sorted(diag.findings, key=lambda f: SEVERITY_ORDER.get(
        str(f.get("severity") if isinstance(f, dict) else getattr(f, "severity", "")), 2))
    for f in ordered:
        d = f.to_dict() if hasattr(f, "to_dict") else dict(f)
        sev = str(d.get("severity", ""))
        ev = d.get("evidence")
        out.append({"severity": sev, "css": SEVERITY_CSS.get(sev, "info"), "kind": fmt(d.get("kind")),
                    "subject": fmt(d.get("subject")),
                    "evidence": facts(ev) if isinstance(ev, dict) else [{"key": "", "value": fmt(ev)}],
                    "recommendation": fmt(d.get("recommendation"))})
    return {"count": len(out), "rows": out}


def tasks_section(diag: Diagnosis) -> list[dict]:
    return [{"name": fmt(t.get("name")), "passed": "pass" if t.get("passed") else "FAIL",
             "css": "pass" if t.get("passed") else "fail", "value": fmt(t.get("value")),
             "detail": fmt(t.get("detail"))} for t in diag.tasks]


def table_section(diag: Diagnosis) -> dict:
    """The per-tensor table: {"columns" ([{"name", "num"}]: num for the columns sorted as numbers), "rows_html"
    (one Markup ``<tr>`` per tensor, see :func:`rows_html`),
    "n_rows", "n_abnormal", "n_origin", "n_compared", "n_uncompared"}. Columns: LEADING_COLUMNS first, then the
    rest in table order. Rows: the compared tensors (toolkit.compare.counts.compared_mask: with metrics, or
    abnormal without them) in execution order, then the rest (folded constants, fused away: css ``uncompared``,
    hidden until the page's toggle shows them)."""
    t = diag.table
    if t.empty:
        return {"columns": [], "rows_html": [], "n_rows": 0, "n_abnormal": 0, "n_origin": 0, "n_compared": 0,
                "n_uncompared": 0}
    compared = compared_mask(t)
    order = list(np.flatnonzero(compared.to_numpy())) + list(np.flatnonzero(~compared.to_numpy()))
    t = t.iloc[order]
    cols = [c for c in LEADING_COLUMNS if c in t.columns] + [c for c in t.columns if c not in LEADING_COLUMNS]
    abnormal = (t["Abnormal"].fillna(False).astype(bool) if "Abnormal" in t.columns
                else pd.Series(False, index=t.index)).tolist()
    origin = origin_mask(diag).iloc[order].tolist()
    done = compared.iloc[order].tolist()
    css = [" ".join(c for c, on in (("abnormal", a), ("origin", o), ("uncompared", not d)) if on)
           for a, o, d in zip(abnormal, origin, done)]
    mark = ["origin" if o else ("abnormal" if a else "") for a, o in zip(abnormal, origin)]
    nodes = t["NodeName"].astype(str).tolist() if "NodeName" in t.columns else [""] * len(t)
    counts = {"n_rows": len(t), "n_abnormal": int(sum(abnormal)), "n_origin": int(sum(origin)),
              "n_compared": int(sum(done)), "n_uncompared": len(t) - int(sum(done))}
    return {"columns": [{"name": str(c), "num": is_numeric(t[c]) and t[c].dtype.kind != "b"} for c in cols],
            "rows_html": rows_html(t[cols], css, mark, nodes), **counts}


def is_numeric(col: pd.Series) -> bool:
    """A numpy float, int or bool column (its cells need no escaping; the page sorts them as numbers)."""
    return isinstance(col.dtype, np.dtype) and col.dtype.kind in "fiub"


def _column_html(col: pd.Series) -> list[str]:
    """``<td>`` cells of one column, end tags omitted (HTML allows it before the next cell or the row's end; it
    halves a large table). Text escaped with markupsafe.escape unless the column is numeric (digits, signs,
    '.', 'e', 'inf' need no escaping). The page sorts a numeric column by its text (``data-num`` on its
    header); ``data-v`` holds the number only where the text does not read as a finite one (inf, nan), and in
    other columns for the numbers among their values."""
    texts, sorts = column_cells(col)
    if not is_numeric(col):  # numbers among other values keep their sort key
        return [f'<td data-v="{sort}">{text}' if sort else f"<td>{text}" for text, sort in zip(escape_all(texts), sorts)]
    if col.dtype.kind == "b":
        return [f"<td>{text}" for text in texts]
    out = []
    for text, sort in zip(texts, sorts):
        if sort and text in ("inf", "-inf", "nan"):
            out.append(f'<td data-v="{sort}">{text}')
        else:
            out.append(f"<td>{text}")
    return out


def escape_all(texts: list[str]) -> list[str]:
    """markupsafe.escape of every (plain) string, in one call on the NUL-joined list (escape leaves NUL alone);
    value by value when a text holds a NUL itself."""
    joined = "\x00".join(texts)
    if joined.count("\x00") != len(texts) - 1:
        return [str(escape(text)) for text in texts]
    return str(escape(joined)).split("\x00")


def rows_html(df: pd.DataFrame, row_css: list[str], row_mark: list[str], nodes: list[str] | None = None) -> list[Markup]:
    """One ``<tr>`` per row of ``df``: a mark cell, then a cell per column; ``nodes`` (the row's NodeName) goes
    into ``data-node`` for the graph view. Thousands of rows: built a column at a time here (every
    model-derived string escaped with markupsafe.escape) rather than by a per-cell template loop, which
    dominated report time on large models."""
    cells = [_column_html(df.iloc[:, j]) for j in range(df.shape[1])]
    nodes = nodes if nodes is not None else [""] * len(row_css)
    heads = [(f'<tr class="{escape(c)}"' if c else "<tr") + (f' data-node="{escape(n)}"' if n else "")
             + f"><td>{escape(m)}" for c, m, n in zip(row_css, row_mark, nodes)]
    return [Markup(head + "".join(row) + "</tr>") for head, row in zip(heads, zip(*cells))]


def fusion_section(diag: Diagnosis) -> dict:
    rows = []
    for graph_id, levels in (diag.fusion_result or {}).items():
        for level, passes in (levels or {}).items():
            for name, counts in (passes or {}).items():
                rows.append({"Graph": graph_id, "Level": level, "Pass": name,
                             "Matches": (counts or {}).get("match_times", ""),
                             "Effects": (counts or {}).get("effect_times", "")})
    return {"passes": grid(diag.passes), "fusions": grid(pd.DataFrame(rows))}


def memory_section(diag: Diagnosis) -> list[dict]:
    m = diag.memory or {}
    out = []
    arena, bound = m.get("arena_bytes"), m.get("lower_bound_bytes")
    if arena is not None:
        out.append({"key": "arena", "value": f"{human_bytes(arena)} ({int(arena):,} bytes)"})
    if bound is not None:
        out.append({"key": "lower bound (peak of live tensors)", "value": f"{human_bytes(bound)} ({int(bound):,} bytes)"})
    if arena is not None and bound:
        out.append({"key": "arena / lower bound", "value": f"{arena / bound:.3f}x"})
    rest = {k: v for k, v in m.items() if k not in ("arena_bytes", "lower_bound_bytes")}
    return out + facts(rest)


def kernels_section(diag: Diagnosis) -> dict:
    kt = diag.kernel_times
    if kt is None or kt.empty:
        return {"table": grid(None), "shown": 0, "total": 0, "total_ms": ""}
    ms = pd.to_numeric(kt["HostMs"], errors="coerce") if "HostMs" in kt.columns else pd.Series(dtype=float)
    top = kt.assign(HostMs=ms).sort_values("HostMs", ascending=False, na_position="last").head(KERNEL_TOP)
    total = float(ms.sum())
    if total > 0:
        top = top.assign(Share=[f"{100 * v / total:.1f} %" if not is_missing(v) else "" for v in top["HostMs"]])
    return {"table": grid(top), "shown": len(top), "total": len(kt), "total_ms": f"{total:.3f} ms"}


def environment_section(diag: Diagnosis) -> list[dict]:
    env = dict(diag.environment or {})
    s = diag.summary
    sections = []
    if isinstance(env.get("packages"), dict):
        sections.append({"title": "Package versions", "facts": facts(env.pop("packages"))})
    env_vars = env.pop("env", None)
    sections.append({"title": "Machine", "facts": facts(env)})
    sections.append({"title": "Environment variables",
                     "facts": facts(env_vars) if env_vars else [{"key": "(none of the relevant variables set)", "value": ""}]})
    sections.append({"title": "Configuration", "facts": facts(s.get("config") or {})})
    cache = s.get("compile_cache") or compile_cache(s.get("config"))  # the folder used when the config says ""
    if cache:
        sections.append({"title": "Compile cache used", "facts": facts(cache)})
    sections.append({"title": "Run", "facts": facts(s, ["seed", "inputs", "model", "model_sha256"])})
    return sections


def safe_href(name: str) -> str | None:
    """A relative, percent-encoded link to a file next to the report; None for anything else (absolute paths,
    schemes such as ``javascript:``, parent-directory escapes)."""
    name = str(name).replace("\\", "/")
    if not name or name.startswith("/") or ":" in name.split("/")[0] or ".." in name.split("/"):
        return None
    return quote(name, safe="/._-~")


#: The size cell of the artifact row naming the report being rendered: it is written after its own table.
THIS_PAGE = "this page"


def artifacts_section(diag: Diagnosis, out_dir=None, page: str = "index.html") -> list[dict]:
    """One row per ``diag.artifacts`` entry: {label, name, href, size}. ``size`` (with ``out_dir``) is the file's
    size on disk, "folder", "missing", or :data:`THIS_PAGE` for ``page``, the report file being rendered (not on
    disk yet, or an older copy, while its own table is built). A name not in ``out_dir`` is looked up in
    ``diag.artifact_dirs`` (files the report lists but another part of the run writes)."""
    out = []
    for label, name in (diag.artifacts or {}).items():
        href = safe_href(name)
        size = ""
        if out_dir is not None and href is not None:
            p = next((d / str(name) for d in [Path(out_dir), *map(Path, getattr(diag, "artifact_dirs", []) or [])]
                      if (d / str(name)).exists()), Path(out_dir) / str(name))
            size = (THIS_PAGE if str(name) == page else human_bytes(p.stat().st_size) if p.is_file()
                    else "folder" if p.is_dir() else "missing")
        out.append({"label": fmt(label), "name": fmt(name), "href": href or "", "size": size})
    return out


def build_context(diag: Diagnosis, out_dir=None, figures: dict | None = None, page: str = "index.html") -> dict:
    """Everything the report template needs, as plain data (``figures``: {key: {"id", "json"}} from html.py;
    ``page``: the report's file name in ``out_dir``, see :func:`artifacts_section`)."""
    s = diag.summary
    title = s.get("model_name") or s.get("model") or "model"
    return {
        "title": f"npuscope diagnosis: {fmt(title)}",
        "generated": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
        "verdict": verdict_section(diag),
        "answer": answer_section(diag),
        "triage": triage_section(diag),
        "findings": findings_section(diag),
        "tasks": tasks_section(diag),
        "table": table_section(diag),
        "fusion": fusion_section(diag),
        "precision": grid(diag.precision),
        "memory": memory_section(diag),
        "kernels": kernels_section(diag),
        "environment": environment_section(diag),
        "artifacts": artifacts_section(diag, out_dir, page),
        "figures": figures or {},
    }
