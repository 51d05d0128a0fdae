"""``npuscope parse-log FILE...``: detect each file's format, parse it, merge everything into one op summary,
write CSV/JSON and profile.html.

Files written into the output folder (new or empty; default ``reports/<first file>-parse-log-<time>/``):

- ``op_summary.csv``: all per-task rows, columns toolkit.profile.optable.OP_SUMMARY_COLUMNS (Source = file);
- ``op_statistic.csv``: toolkit.profile.optable.op_statistic of that summary (the profiler's columns plus Time
  Kind; Ratio(%) within each Time Kind); when no file had per-task rows but op_statistic CSVs were read, their
  rows merged per (Time Kind, OP Type, Core Type);
- ``<table>.csv`` for every other table a parser produced (log_levels, log_messages, compile_passes,
  fusion_decisions, fusion_counts, ort_sessions, ...), rows of all files with a leading ``LogFile`` column (the file a row was read from);
- ``findings.json`` and ``parse_summary.json`` (files with detected format, status, records, malformed and
  notes; skipped files and why; totals; findings);
- ``profile.html`` (toolkit.report.profile_html.render_profile) unless ``html=False``.

Decisions: a directory argument means the non-hidden files directly inside it (not its subfolders) — for a
profiler folder (PROF_*, a torch_npu *_ascend_pt folder) its one exported-files folder
(toolkit.logs.profdirs.output_folder: ASCEND_PROFILER_OUTPUT, else mindstudio_profiler_output), so a run is read
once; a timeline JSON next to that folder's op_summary / kernel_details / task_time CSV is skipped with the reason
(toolkit.logs.profdirs.timeline_twins: the same device tasks); a
directory with no such file is an InputError at once, naming what it holds instead. A file reached twice (the
same resolved path, e.g. given twice or given and inside a given folder) is read once; the repeat is listed
under ``duplicates`` in parse_summary.json. An ``npuscope profile`` folder's trace.json and op_summary.csv
describe the same tasks (trace.json repeats one request's simulated rows for each of N requests): when both
are read and the folder's profile.json names them, op_summary.csv is read and trace.json is *skipped* with
that reason (parse_summary.json, the HTML meta, the summary lines), so no task is counted twice. A path that does not exist
is an InputError at once. Every text value stored (log messages, op names, ...) longer than 2,000 characters
is truncated with a marker giving its original length (toolkit.logs.textcap); numbers that are not finite or
beyond 1e18 make their record malformed (toolkit.logs.numbers). A file no parser recognises (empty, binary, unknown format) or whose parser fails is
*skipped* — listed in parse_summary.json, the HTML meta and the summary lines — as long as another file was
parsed; when no file could be parsed, an InputError names each file, why, and the formats supported (exit
code 2, bad input). A recognised file of which nothing could be read (0 records, some malformed) counts as not parsed, and
so does one that holds no record at all (0 records, no op row, every table empty: e.g. an onnxruntime profile
with no kernel event): a report of nothing is never written.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from toolkit.core.artifacts import check_out, output_dir
from toolkit.core.boundedjson import json_loads
from toolkit.core.csvjson import _dumps, atomic_write_text, to_csv_safe
from toolkit.core.errors import InputError, UsageError
from toolkit.core.records import Finding
from toolkit.core.textfile import open_regular_text
from toolkit.core.userpaths import check_path
from toolkit.logs import parsers as built_in_parsers  # noqa: F401 - registers the built-in formats
from toolkit.logs.detect import detect_format
from toolkit.logs.findings import op_summary_findings
from toolkit.logs.profdirs import output_folder, timeline_twins
from toolkit.logs.registry import ParseResult, parsers
from toolkit.logs.textcap import MAX_TEXT_CHARS, clip_frame
from toolkit.profile.optable import (
    OP_STATISTIC_COLUMNS,
    integer_columns,
    kind_order,
    op_statistic,
    op_summary_frame,
    share_pct,
)
from toolkit.report.profile_html import render_profile

REPORTS_DIR = Path("reports")
#: profile.json is read up to this many characters (npuscope writes a few hundred).
PROFILE_JSON_MAX_CHARS = 1 << 20
_log = logging.getLogger("npuscope.logs")


def _noop(msg: str) -> None:
    pass


def expand(files: list[str], duplicates: list[str] | None = None) -> list[Path]:
    """Paths to read: files as given, directories replaced by the (non-hidden) files directly inside them; a
    path whose resolved file was already listed is dropped (and appended to ``duplicates`` when given).

    Raises:
        UsageError: no FILE given.
        InputError: a path does not exist or is one the file system refuses (toolkit.core.userpaths.check_path: a
            name too long, a symbolic link loop, a file on the way, permission denied); a folder holds no
            (non-hidden) file directly inside it.
    """
    if not files:
        raise UsageError("parse-log needs at least one FILE (a log, profile CSV/JSON or a report folder)")
    out, seen = [], set()
    for f in files:
        p = Path(f)
        check_path(p, "FILE", InputError, "give a log, profile CSV/JSON file or a folder of them")
        if not p.exists():
            raise InputError(f"'{f}' does not exist; give a log, profile CSV/JSON file or a folder of them")
        for q in (_folder_files(output_folder(p)) if p.is_dir() else [p]):
            key = q.resolve()
            if key in seen:
                if duplicates is not None:
                    duplicates.append(str(q))
                continue
            seen.add(key)
            out.append(q)
    return out


def profile_twins(paths: list[Path]) -> dict[Path, str]:
    """{trace.json path: why it is skipped} for every ``npuscope profile`` folder of which both trace.json and
    op_summary.csv are among ``paths``: the folder's profile.json lists them under "files" (as
    toolkit.commands.profile writes it), and the two describe the same tasks."""

    by_dir: dict[Path, dict[str, Path]] = {}
    for p in paths:
        by_dir.setdefault(p.resolve().parent, {})[p.name] = p
    out = {}
    for folder, names in by_dir.items():
        try:
            with open_regular_text(folder / "profile.json", errors="strict") as fh:  # never a FIFO
                files = json_loads(fh.read(PROFILE_JSON_MAX_CHARS), "profile.json", ValueError).get("files", {})
        except (OSError, ValueError, AttributeError):  # json_loads: ValueError also when nested too deep
            continue
        trace, summary = files.get("trace") if isinstance(files, dict) else None, \
            files.get("op_summary") if isinstance(files, dict) else None
        if trace in names and summary in names:
            out[names[trace]] = (f"same tasks as {summary} of this npuscope profile folder (profile.json); "
                                 f"{summary} was read instead, so nothing is counted twice")
    return out


def _folder_files(folder: Path) -> list[Path]:
    """The non-hidden entries directly inside ``folder`` that are not folders, sorted: regular files, and also
    FIFOs, sockets, devices and (broken) symbolic links, which are then skipped with the reason (never opened:
    toolkit.logs.detect) instead of vanishing. Raises InputError when there are none."""
    try:
        children = sorted(folder.iterdir())
    except OSError as exc:
        raise InputError(f"folder '{folder}' cannot be listed ({exc.strerror or exc}); check its permissions") from None
    files = [c for c in children if not c.is_dir() and not c.name.startswith(".")]
    if files:
        return files
    subdirs = sum(1 for c in children if c.is_dir())
    hidden = sum(1 for c in children if not c.is_dir() and c.name.startswith("."))
    what = ", ".join(x for x in (f"{subdirs} subfolder(s)" if subdirs else "",
                                 f"{hidden} hidden file(s)" if hidden else "") if x) or "nothing"
    raise InputError(f"folder '{folder}' holds no files to read (it has {what}); parse-log reads the non-hidden "
                     "files directly inside a folder, not its subfolders: give the files or the subfolder itself")


def read_file(path: Path) -> tuple[ParseResult | None, str]:
    """(result, "") for a parsed file, (None, reason) for a skipped one. Never raises for file content."""
    det = detect_format(path)
    if det.parser is None:
        _log.warning("%s: skipped (%s)", path, det.reason)
        return None, det.reason
    try:
        res = det.parser.parse(path)
    except Exception as exc:  # noqa: BLE001 - one unreadable file must not sink the others
        _log.warning("parser %s failed on %s: %s: %s", det.parser.name, path, type(exc).__name__, exc, exc_info=True)
        return None, f"{det.parser.name} could not read it ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    _log.info("%s: %s, %d record(s), %d malformed, %d op row(s)", path, res.format, res.records, res.malformed,
              len(res.op_summary))
    if res.records == 0 and res.malformed > 0:
        why = "; ".join(n for n in res.notes if "malformed" in n)
        return res, f"{det.parser.name}: no readable record, {res.malformed} malformed" + (f" ({why})" if why else "")
    if nothing_read(res):
        note = f" ({res.notes[0]})" if res.notes else ""
        return res, f"{det.parser.name}: no record in it{note}"
    return res, ""


def nothing_read(res: ParseResult) -> bool:
    """True when a parse produced no data at all: no record, no op row, every table empty (e.g. an
    onnxruntime profile holding only non-kernel events). Such a file counts as not parsed."""
    return (res.records == 0 and not len(res.op_summary)
            and not any(df is not None and len(df) for df in res.tables.values()))


def merge_statistics(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """op_statistic rows of several files merged per (Time Kind, Device_id, Model Name, OP Type, Core Type): counts
    and totals summed, min/max kept, Avg = Total / Count, Ratio(%) recomputed within each (Time Kind, Device_id,
    Model Name), as toolkit.profile.optable.op_statistic does: two devices or models never share one 100% (kinds in
    toolkit.profile.optable.kind_order; devices and models in first-seen order, largest total first within each)."""
    df = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=OP_STATISTIC_COLUMNS)
    if df.empty:
        return pd.DataFrame(columns=OP_STATISTIC_COLUMNS)
    if "Time Kind" not in df.columns:
        df["Time Kind"] = "device"
    for col in ("Device_id", "Model Name"):
        df[col] = df[col].fillna("").astype(str) if col in df.columns else ""
    parts = []
    for kind in kind_order(df["Time Kind"]):
        g = df[df["Time Kind"] == kind].groupby(["Device_id", "Model Name", "OP Type", "Core Type"], sort=False).agg(
            **{"Count": ("Count", "sum"), "Total Time(us)": ("Total Time(us)", "sum"),
               "Min Time(us)": ("Min Time(us)", "min"), "Max Time(us)": ("Max Time(us)", "max")}).reset_index()
        g["Avg Time(us)"] = g["Total Time(us)"] / g["Count"].where(g["Count"] > 0)
        for _, grp in g.groupby(["Device_id", "Model Name"], sort=False):  # one 100% per device and model
            part = grp.assign(**{"Ratio(%)": share_pct(grp["Total Time(us)"]), "Time Kind": kind})
            parts.append(part.sort_values("Total Time(us)", ascending=False, kind="stable"))
    return pd.concat(parts, ignore_index=True)[OP_STATISTIC_COLUMNS]


def merge_tables(results: list[ParseResult]) -> dict[str, pd.DataFrame]:
    """Every non-op-statistic table, rows of all files concatenated, with a leading LogFile column (the name of
    the file each row was read from; a table's own File column, e.g. a plog line's source file, is kept)."""
    by_name: dict[str, list[pd.DataFrame]] = {}
    for r in results:
        for name, df in r.tables.items():
            if name != "op_statistic" and df is not None and len(df):
                by_name.setdefault(name, []).append(df.assign(LogFile=Path(r.path).name))
    out = {}
    for name, dfs in by_name.items():
        df = pd.concat(dfs, ignore_index=True)
        out[name] = df[["LogFile"] + [c for c in df.columns if c != "LogFile"]]
    return out


def _file_entry(path: Path, res: ParseResult | None, reason: str) -> dict:
    entry = {"path": str(path), "format": res.format if res else None,
             "status": "skipped" if reason else "parsed", "reason": reason,
             "records": res.records if res else 0, "malformed": res.malformed if res else 0,
             "rows": len(res.op_summary) if res else 0, "notes": list(res.notes) if res else []}
    return entry


def _no_input_error(entries: list[dict]) -> InputError:
    formats = ", ".join(p.name for p in parsers())
    what = "; ".join(f"'{e['path']}': {e['reason']}" for e in entries[:5])
    more = f" (and {len(entries) - 5} more)" if len(entries) > 5 else ""
    return InputError(f"nothing could be parsed: {what}{more}; parse-log reads {formats}")


def _file_findings(entries: list[dict]) -> list[Finding]:
    out = []
    for e in entries:
        name = Path(e["path"]).name
        if e["malformed"]:
            out.append(Finding("warning", "malformed_input", name, {"format": e["format"], "malformed": e["malformed"],
                                                                     "records": e["records"]},
                               "malformed records were skipped; check the file was not truncated or edited"))
        if e["status"] == "skipped":
            out.append(Finding("info", "file_skipped", name, {"reason": e["reason"]},
                               "nothing to do: its tasks were read from the folder's op_summary.csv"
                               if e.get("same_tasks_as") else "give a supported file (see npuscope parse-log --help)"))
    return out


def collect(paths: list[Path], progress=_noop, duplicates: list[str] | None = None) -> dict:
    """Parse every path (a profile folder's trace.json is skipped when its op_summary.csv is read too:
    :func:`profile_twins`); returns {"entries", "results", "summary" (op summary), "statistic", "tables",
    "findings", "truncated", "duplicates"}. Raises InputError when no file could be parsed."""
    entries, results = [], []
    twins = {**profile_twins(paths), **timeline_twins(paths)}
    for p in paths:
        if p in twins:
            _log.info("%s: skipped (%s)", p, twins[p])
            found = detect_format(p).parser  # the skipped file's own format (a timeline, task_time, kernel_details)
            entries.append({**_file_entry(p, None, twins[p]), "format": found.name if found else "",
                            "same_tasks_as": "op_summary"})
            continue
        progress(f"reading {p}")
        res, reason = read_file(p)
        entries.append(_file_entry(p, res, reason))
        if res is not None and not reason:
            results.append(res)
    if not results:
        raise _no_input_error(entries)
    frames = [r.op_summary for r in results if len(r.op_summary)]
    summary = op_summary_frame(pd.concat(frames, ignore_index=True)) if frames else op_summary_frame([])
    summary, clipped = clip_frame(summary)
    stats = [r.tables["op_statistic"] for r in results if "op_statistic" in r.tables]
    statistic = op_statistic(summary) if len(summary) or not stats else merge_statistics(stats)
    tables = {}
    for name, df in merge_tables(results).items():
        tables[name], n = clip_frame(df)
        clipped += n
    findings = [f for r in results for f in r.findings] + op_summary_findings(summary) + _file_findings(entries)
    return {"entries": entries, "results": results, "summary": summary, "statistic": statistic,
            "tables": tables, "findings": findings, "truncated": clipped, "duplicates": list(duplicates or [])}


def _csv(folder: Path, name: str, df: pd.DataFrame) -> str:
    """Write ``df`` as ``name``; the profiler's integer columns (Task ID, Stream ID, ...) as integers
    (toolkit.profile.optable.integer_columns)."""
    atomic_write_text(folder / name, to_csv_safe(integer_columns(df), index=False, lineterminator="\n"))
    return name


def _meta(data: dict) -> dict:
    entries = data["entries"]
    parsed = [e for e in entries if e["status"] == "parsed"]
    meta = {"files parsed": ", ".join(f"{Path(e['path']).name} ({e['format']})" for e in parsed),
            "op summary rows": f"{len(data['summary']):,}",
            "malformed records skipped": ", ".join(f"{Path(e['path']).name}: {e['malformed']}" for e in entries) or "0"}
    skipped = [e for e in entries if e["status"] == "skipped"]
    if skipped:
        meta["files skipped"] = "; ".join(f"{Path(e['path']).name}: {e['reason']}" for e in skipped)
    if data.get("duplicates"):
        meta["files given twice (read once)"] = ", ".join(data["duplicates"])
    return meta


def write_outputs(folder: Path, data: dict, html: bool) -> dict[str, str]:
    """Write the files of the module docstring into ``folder``; returns {label: file name}."""
    files = {"op_summary": _csv(folder, "op_summary.csv", data["summary"]),
             "op_statistic": _csv(folder, "op_statistic.csv", data["statistic"])}
    for name, df in data["tables"].items():
        files[name] = _csv(folder, f"{name}.csv", df)
    atomic_write_text(folder / "findings.json", _dumps([f.to_dict() for f in data["findings"]]))
    files["findings"] = "findings.json"
    files["parse_summary"] = "parse_summary.json"
    if html:
        names = ", ".join(Path(e["path"]).name for e in data["entries"] if e["status"] == "parsed")
        tables = dict(data["tables"])
        if data["summary"].empty and len(data["statistic"]):
            tables = {"op_statistic (read from file)": data["statistic"], **tables}
        files["report"] = render_profile(folder, title=f"npuscope parse-log: {names[:120]}",
                                         op_summary=data["summary"], findings=data["findings"], meta=_meta(data),
                                         tables=tables).name
    entries = data["entries"]
    summary = {"files": entries, "formats": sorted({e["format"] for e in entries if e["status"] == "parsed"}),
               "rows": len(data["summary"]), "malformed": sum(e["malformed"] for e in entries),
               "truncated_texts": data.get("truncated", 0),
               "skipped": [{"path": e["path"], "reason": e["reason"]} for e in entries if e["status"] == "skipped"],
               "duplicates": list(data.get("duplicates", [])),
               "outputs": files, "findings": [f.to_dict() for f in data["findings"]]}
    atomic_write_text(folder / "parse_summary.json", _dumps(summary))
    return files


def _summary_lines(data: dict, folder: Path, files: dict) -> list[str]:
    lines = []
    for e in data["entries"]:
        if e["status"] == "parsed":
            lines.append(f"{e['path']}: {e['format']}, {e['records']:,} record(s), {e['malformed']:,} malformed"
                         + (f", {e['rows']:,} op row(s)" if e["rows"] else ""))
        else:
            lines.append(f"{e['path']}: skipped ({e['reason']})")
    for d in data.get("duplicates", []):
        lines.append(f"{d}: given twice, read once")
    kinds = data["summary"]["Time Kind"].value_counts()
    kinds = kinds[kinds > 0]  # a Categorical counts its categories no row holds
    lines.append(f"op summary: {len(data['summary']):,} row(s)"
                 + (" (" + ", ".join(f"{k} {v:,}" for k, v in kinds.items()) + ")" if len(kinds) else ""))
    if data.get("truncated"):
        lines.append(f"{data['truncated']:,} text value(s) longer than {MAX_TEXT_CHARS:,} characters were truncated "
                     "(marked '… [truncated: N characters]')")
    for f in [f for f in data["findings"] if f.severity in ("error", "warning")][:5]:
        lines.append(f"  {f.severity}: {f.kind} {f.subject}")
    lines.append(f"report: {(folder / files.get('report', 'parse_summary.json')).resolve()}")
    return lines


def parse_log_command(files: list[str], *, out: str | None = None, html: bool = True, progress=_noop) -> dict:
    """Parse ``files`` (module docstring) and write the outputs.

    Returns {"summary": terminal lines, "out": folder, "files": {label: file name}, "parsed": n files parsed,
    "skipped": n skipped, "malformed": total malformed records}.

    Raises:
        UsageError: no FILE, or ``out`` is not a new or empty folder.
        InputError: a path does not exist, or no file could be parsed.
    """
    check_out(out)  # a taken --out is refused before any file is read
    duplicates: list[str] = []
    paths = expand(files, duplicates)
    data = collect(paths, progress, duplicates)
    with output_dir(out, REPORTS_DIR, f"{paths[0].stem}-parse-log") as folder:
        progress(f"writing {folder}")
        written = write_outputs(folder, data, html)
    parsed = sum(e["status"] == "parsed" for e in data["entries"])
    return {"summary": _summary_lines(data, folder, written), "out": folder, "files": written, "parsed": parsed,
            "skipped": len(data["entries"]) - parsed, "malformed": sum(e["malformed"] for e in data["entries"])}
