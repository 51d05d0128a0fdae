"""Command workflows for shape gears: ``npuscope gears`` (recommend gears from observed lengths) and the gear
paths of ``compile`` and ``run`` (toolkit.api delegates here when the config has gears).

Each returns a dict with ``summary`` (terminal lines), ``out`` (the output folder) and ``files``.

Files:

- gears: ``gears.csv`` (one row per strategy, :data:`toolkit.gears.dp.STRATEGY_COLUMNS`), ``gears.json``
  (summary with the config snippet, strategies, waste curve, histogram), ``gears.html`` (unless ``html=False``).
- compile with gears: ``gears.json`` (spec, per-gear input_shape, folder, kernels, arena bytes, output slicing
  rules) and one folder ``gear_<label>/`` per gear with plan.json, compile.log, fusion_result.json,
  compile_findings.json.
- run with gears: the chosen gear's plan.json & co., ``gear.json`` (gear, shapes, padded), ``outputs.npz``
  (sliced to the exact shapes), ``--dump`` files (gear shapes, unsliced) and, when the input was padded,
  ``padding.csv`` (:data:`toolkit.gears.padding.COLUMNS`) and ``padding.json`` (summary + findings). When a
  padding leak reaches a graph output the files are still written, the result's ``outputs_wrong`` lists those
  outputs and ``exit_code`` is 1 (the CLI exits with it).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import numpy as np

from toolkit.commands.common import check_output_paths
from toolkit.config.schema import Config
from toolkit.core.artifacts import (
    check_dump_dir,
    check_out,
    output_dir,
    write_compile_artifacts,
    write_dumps,
    write_json,
    write_npz,
)
from toolkit.core.csvjson import atomic_write_text, json_safe, to_csv_safe
from toolkit.core.errors import ConfigError, InputError, UsageError
from toolkit.core.text import compile_summary, human_bytes, suggest
from toolkit.core.textfile import read_user_text
from toolkit.core.userpaths import check_path
from toolkit.engine import compile_model
from toolkit.gears import dp
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, output_rules
from toolkit.gears.spec import MAX_GEARS, label
from toolkit.ir.load import load_model
from toolkit.report.gears_html import render_gears_report
from toolkit.source import prepare_inputs, resolve_model

REPORTS_DIR = Path("reports")
#: Most distinct lengths the exact DP takes (O(K m^2): about 5 s at this size with K = 8).
MAX_DISTINCT = 20000
#: Most K * m^2 the exact DP is asked to do (m distinct lengths; the MAX_DISTINCT case at K = 8).
_DP_BUDGET = 8 * MAX_DISTINCT**2


def _noop(msg: str) -> None:
    pass


# ------------------------------------------------------------------------------------------- lengths file
def read_lengths(path: str | Path, column: str | None = None) -> np.ndarray:
    """Observed lengths (int64) from ``path``: one integer per line (blank lines and '#' comments skipped), or
    with ``column`` the named column of a CSV with a header row (blank lines skipped). Lines end at ``\n``
    (``\r\n`` too) only: a form feed, vertical tab or lone ``\r`` inside a line is part of it, so error line
    numbers are those of an editor (1-based). Only a regular file is read (toolkit.core.textfile.open_regular).

    Raises:
        InputError: missing, unreadable, not a regular file (a FIFO, device such as /dev/null, socket or a link
        to one), empty or non-UTF-8 file (a UTF-8 BOM is skipped), unknown column or
        one the header names twice, an empty cell in the column or a value that is not a positive integer in
        ASCII digits (named by line number), or no lengths at all; a path the file system refuses
        (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way, permission
        denied).
    """
    p = Path(path)
    check_path(p, "lengths file", InputError, "give a file with one length per line, or a CSV with --column")
    if not p.exists() or p.is_dir():
        raise InputError(f"lengths file '{p}' {'is a folder' if p.is_dir() else 'does not exist'}; give a file with "
                         "one length per line, or a CSV with --column")
    text = read_user_text(p, "lengths file", InputError, "it holds no lengths npuscope reads: save them to a "
                          "regular file with one positive integer per line", regular_only=True)
    if not text.strip():
        raise InputError(f"lengths file '{p}' is empty; give one positive integer per line")
    if column:
        return _csv_column(p, text, column)
    lines = text_lines(text)
    out = []
    for no, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        out.append(_length(text, f"lengths file '{p}' line {no}",
                           " (for a CSV give --column NAME)" if "," in text or ";" in text or "\t" in text else ""))
    if not out:
        raise InputError(f"lengths file '{p}' holds no lengths; give one positive integer per line")
    return np.asarray(out, dtype=np.int64)


def text_lines(text: str) -> list[str]:
    """``text`` split at ``\n`` only, a ``\r`` before it dropped (unlike str.splitlines, which also splits at
    form feed, vertical tab, lone ``\r``, U+2028, ...); line ``i + 1`` of the file is item ``i``."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.removesuffix("\r") for ln in lines]


MAX_LENGTH = dp.MAX_LENGTH
#: Number syntax read from a lengths file: ASCII digits only (re.ASCII; int() and float() would also take
#: full-width or other Unicode digits such as "１２").
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE | re.ASCII)
_INTEGER = re.compile(r"\+?\d+", re.ASCII)


def _length(text: str, where: str, hint: str = "") -> int:
    """One length from its text: a decimal integer in ASCII digits (a number whose exact decimal value is whole,
    such as "12.0" or "1e3", is taken too; "5.000000000000000001" and "4.5" are not whole).

    Raises:
        InputError naming ``where``: not a number (full-width or other non-ASCII digits included), not finite
        (nan, inf, 1e400), not whole, < 1 or > MAX_LENGTH.
    """
    shown = text[:40] + ("..." if len(text) > 40 else "")
    if not _NUMBER.fullmatch(text):
        if not text.isascii():
            hint += " (only ASCII digits 0-9 are read)"
        raise InputError(f"{where}: '{shown}' is not a length{hint}; lengths are positive integers")
    if _INTEGER.fullmatch(text):
        digits = text.lstrip("+").lstrip("0") or "0"
        val = int(digits) if len(digits) <= 20 else MAX_LENGTH + 1  # int() of thousands of digits is refused
    else:
        val = _whole(Decimal(text), shown, where)
    if val < 1:
        raise InputError(f"{where}: '{shown}' is not a positive integer length")
    if val > MAX_LENGTH:
        raise InputError(f"{where}: '{shown}' is larger than the largest length npuscope takes ({MAX_LENGTH}); "
                         "check the file (a merged column? an id?)")
    return val


def _whole(num: Decimal, shown: str, where: str) -> int:
    """The integer value of a decimal number that is exactly whole ("12.0", "1e3"); compared exactly, so
    "5.000000000000000001" (which a float rounds to 5.0) is refused as not whole. Values beyond MAX_LENGTH
    come back as MAX_LENGTH + 1 and values below 1 as 0 (the caller's range checks name them)."""
    if not num.is_finite():
        raise InputError(f"{where}: '{shown}' is not a positive integer length")
    if num > MAX_LENGTH:
        return MAX_LENGTH + 1
    if num < 1:
        return 0
    if num != num.to_integral_value():
        raise InputError(f"{where}: '{shown}' is not a positive integer length (not a whole number)")
    return int(num)


def _csv_column(p: Path, text: str, column: str) -> np.ndarray:
    """The lengths in column ``column`` of the CSV ``text`` (header row first; leading blank lines and rows
    whose cells are all empty are skipped), read with Python's csv module over the lines of :func:`text_lines`,
    so each error names the line where its row starts. Raises InputError naming the file: not a CSV, the column
    missing or named twice in the header, a row with more or fewer fields than the header, an empty cell in
    the column, a bad value (:func:`_length`)."""
    rows = _csv_rows(p, text)
    if not rows:
        raise InputError(f"lengths file '{p}' is empty; give a CSV with a header row")
    header = [c.strip() for c in rows[0][1]]
    where = [i for i, name in enumerate(header) if name == column]
    if not where:
        raise InputError(f"lengths file '{p}' has no column '{column}'{suggest(column, header)}")
    if len(where) > 1:
        raise InputError(f"lengths file '{p}' has {len(where)} columns named '{column}' (columns "
                         f"{', '.join(str(i + 1) for i in where)} of the header); rename them so that --column "
                         "names one")
    out = []
    for no, cells in rows[1:]:
        at = f"lengths file '{p}' line {no} column '{column}'"
        if len(cells) != len(header):
            raise InputError(f"{at}: the row has {len(cells)} field(s), the header {len(header)}; give every row "
                             "the header's columns")
        cell = cells[where[0]].strip()
        if not cell:
            raise InputError(f"{at}: the cell is empty; give a positive integer length on every row (or delete "
                             "the row)")
        out.append(_length(cell, at))
    if not out:
        raise InputError(f"lengths file '{p}' column '{column}' holds no lengths")
    return np.asarray(out, dtype=np.int64)


def _csv_rows(p: Path, text: str) -> list[tuple[int, list[str]]]:
    """(1-based line where the row starts, cells) of each CSV row of ``text`` whose cells are not all blank."""
    import csv

    reader = csv.reader(ln + "\n" for ln in text_lines(text))
    rows, done = [], 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return rows
        except csv.Error as exc:
            raise InputError(f"lengths file '{p}' line {done + 1} is not a readable CSV row ({exc}); save it as "
                             "CSV with a header row") from None
        if any(c.strip() for c in cells):
            rows.append((done + 1, cells))
        done = reader.line_num


# ------------------------------------------------------------------------------------------- recommendation
_BATCH_DIMS = ("batch", "batch_size", "n")
#: A ``--dim`` name: identifier-like (ASCII letter or '_' first, then letters, digits, '_'), at most 64 chars;
#: it labels summaries and names the default output folder (``gears-<dim>-<time>``).
DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def check_dim(dim) -> str:
    """``dim`` when it is a dim name (:data:`DIM_NAME`, e.g. ``seq``, ``batch``, ``seq_len``); raises
    UsageError (exit 2) for anything else (empty, ``a;b``, a path, spaces)."""
    if isinstance(dim, str) and DIM_NAME.fullmatch(dim):
        return dim
    shown = repr(dim)[:40] if isinstance(dim, str) else type(dim).__name__
    raise UsageError(f"--dim {shown} is not a dim name; give an identifier (an ASCII letter or '_' first, then "
                     "letters, digits or '_', at most 64), e.g. seq, batch or seq_len")


def _fill_template(template: str, value: int) -> str:
    """``input_shape`` template with every -1 replaced by ``value``."""
    return ";".join(f"{name}:{','.join(str(value) if d == -1 else str(d) for d in dims)}"
                    for name, dims in Config(input_shape=template).input_shapes(dynamic=True).items())


def config_snippet(gears: list[int], dim: str, input_shape: str | None = None) -> dict:
    """The config options for ``gears`` (ascending), accepted by :class:`toolkit.config.schema.Config` validation.

    - two or more gears: ``dynamic_batch_size`` when ``dim`` names a batch dim ("batch", "batch_size", "n"),
      else ``dynamic_dims`` (each gear's value given to every -1 of ``input_shape``: one padded dim, e.g.
      x[1] and mask[1] both 'seq'); with ``input_shape`` (a template with -1 at the padded dim) it is included.
    - one gear (one distinct length, or K = 1): no gears (the converter takes 2..100): a static ``input_shape``
      with the gear's value at each -1, or ``{}`` without a template.

    Raises:
        ConfigError (exit 2): ``input_shape`` has no -1, or the snippet is refused by Config validation.
    """
    slots = 1
    if input_shape is not None:
        dims = Config(input_shape=input_shape).input_shapes(dynamic=True)
        slots = sum(d == -1 for v in dims.values() for d in v)
        if not slots:
            raise ConfigError(f"--input-shape '{input_shape}' has no -1; mark the padded {dim} dim with -1, e.g. "
                              "\"x:1,-1,64\"")
    if len(gears) == 1:
        snippet = {"input_shape": _fill_template(input_shape, gears[0])} if input_shape is not None else {}
    elif dim.lower() in _BATCH_DIMS:
        snippet = {"dynamic_batch_size": ",".join(map(str, gears))}
    else:
        snippet = {"dynamic_dims": ";".join(",".join([str(g)] * slots) for g in gears)}
    if input_shape is not None:
        snippet = {"input_shape": input_shape, **snippet} if len(gears) > 1 else snippet
        Config.from_dict(snippet, where="--input-shape with the recommended gears")
    return snippet


def recommend(lengths, k: int, cost: str = "linear", dim: str = "seq", source: str = "",
              input_shape: str | None = None) -> dict:
    """Optimal K gears vs power-of-two gears for ``lengths``: {"summary", "table" (strategies DataFrame),
    "curve" (waste per plan count DataFrame), "histogram" {values, counts}}.

    ``k`` above :data:`toolkit.gears.spec.MAX_GEARS` (100, the converter's limit) is clamped to it, with a note
    in ``summary["notes"]``; one gear (one distinct length, or k = 1) gives a static-shape snippet
    (:func:`config_snippet`). Raises UsageError (too many distinct lengths for the search, k < 1, ``dim`` not
    a dim name, :func:`check_dim`) or ConfigError (a bad ``input_shape`` template)."""
    check_dim(dim)
    notes = []
    k_used = k
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > MAX_GEARS:
        k_used = MAX_GEARS
        notes.append(f"-k {k} is above the {MAX_GEARS} gears the converter takes; chose {MAX_GEARS}")
    hist = dp.LengthHistogram.of(lengths)
    m = int(hist.values.size)
    if m > MAX_DISTINCT or min(int(k_used), m) * m * m > _DP_BUDGET:
        raise UsageError(f"{m} distinct lengths with -k {k_used} is beyond the exact search (at most "
                         f"{MAX_DISTINCT} distinct lengths, fewer for large K): round the lengths (e.g. up to "
                         "multiples of 8) or ask for fewer gears")
    table = dp.compare_gears(hist, k_used, cost)
    pow2 = table[table["Strategy"] == "power_of_two"].iloc[0].to_dict()
    best = table[table["Strategy"] == "optimal"].iloc[0].to_dict()
    curve = dp.waste_curve(hist, max(k_used, int(pow2["Plans"]), 8), cost)
    if len(best["Gears"]) == 1:
        notes.append(f"one gear ({best['Gears'][0]}) serves every input: no gears needed, compile with a static "
                     f"input_shape giving {best['Gears'][0]} at the {dim} dim (the converter takes 2 to {MAX_GEARS} "
                     "gears)")
    summary = {"lengths": source, "dim": dim, "k": int(k), "k_used": int(k_used), "cost": cost,
               "samples": hist.total, "distinct": m, "min": int(hist.values[0]), "max": int(hist.values[-1]),
               "optimal": best, "power_of_two": pow2, "input_shape": input_shape,
               "config_snippet": config_snippet(best["Gears"], dim, input_shape), "notes": notes}
    return {"summary": summary, "table": table, "curve": curve,
            "histogram": {"values": hist.values.tolist(), "counts": hist.counts.tolist()}}


def _config_line(s: dict) -> str:
    """The terminal line with the config to use."""
    snip = s["config_snippet"]
    if not snip:
        return (f"config: no gears needed: a static input_shape with {s['optimal']['Gears'][0]} at the {s['dim']} "
                "dim (pass --input-shape with -1 at that dim to get it written out)")
    text = ", ".join(f'{key} = "{val}"' for key, val in snip.items())
    if "input_shape" not in snip:
        text += f" (plus input_shape with -1 at the {s['dim']} dim; pass --input-shape to get it filled in)"
    return f"config: {text}"


def gears_command(lengths: str, k: int, *, column: str | None = None, dim: str = "seq", cost: str = "linear",
                  out: str | None = None, html: bool = True, input_shape: str | None = None,
                  progress=_noop) -> dict:
    """`npuscope gears`: read lengths, choose K gears, compare with power-of-two gears, write the folder.
    ``input_shape``: a template with -1 at the padded dim; the config snippet then includes it (and is checked).
    ``dim``: the padded dim's name (:func:`check_dim`, checked before the file is read)."""
    check_out(out)  # a taken --out is refused before the lengths are read
    check_dim(dim)
    arr = read_lengths(lengths, column)
    progress(f"{arr.size} lengths, choosing {k} gear(s)")
    res = recommend(arr, k, cost, dim, source=str(lengths), input_shape=input_shape)
    s = res["summary"]
    with output_dir(out, REPORTS_DIR, f"gears-{dim}") as folder:
        files = {"table": "gears.csv", "json": "gears.json"}
        if html:
            files["report"] = "gears.html"
        res["artifacts"] = dict(files)
        atomic_write_text(folder / "gears.csv", to_csv_safe(res["table"], index=False))
        write_json(folder / "gears.json", json_safe({**s, "strategies": res["table"], "curve": res["curve"],
                                                     "histogram": res["histogram"], "files": files}))
        if html:
            render_gears_report(res, folder)
    o, p = s["optimal"], s["power_of_two"]
    lines = [f"{s['samples']} inputs, {s['distinct']} distinct {dim} lengths in [{s['min']}, {s['max']}]; cost {cost}",
             f"optimal {o['Plans']} gear(s): {o['Gears']}  waste {o['WasteShare']:.1%}, "
             f"expected padded work {o['ExpectedPaddedWork']:.4g} per input",
             f"power of two ({p['Plans']} plans): {p['Gears']}  waste {p['WasteShare']:.1%}, "
             f"expected padded work {p['ExpectedPaddedWork']:.4g} per input"]
    same = res["table"][res["table"]["Strategy"] == f"optimal_at_{p['Plans']}"]
    if len(same):
        r = same.iloc[0]
        why = (f" (as many as the {s['distinct']} distinct lengths; power of two uses {p['Plans']})"
               if r["Plans"] < p["Plans"] else "")
        lines.append(f"optimal with {r['Plans']} plans{why}: {r['Gears']}  waste {r['WasteShare']:.1%}")
    lines += [f"note: {n}" for n in s["notes"]]
    lines.append(_config_line(s))
    lines.append(f"report: {(folder / ('gears.html' if html else 'gears.json')).resolve()}")
    return {"summary": lines, "out": folder, "files": files, "result": res}


# ------------------------------------------------------------------------------------------- compile / run
def compile_gears_command(model: str | None, config, out: str | None = None, progress=_noop) -> dict:
    """Compile one plan per gear into ``gear_<label>/`` folders plus gears.json (module docstring)."""
    check_out(out)  # before the model is read
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    gs = GearSession(m, config)
    spec = gs.spec
    lines = [f"gears: {spec.describe()} over {', '.join(f'{n}[{a}]' for n, a in spec.slots)}"]
    entries, compiled = [], {}
    with output_dir(out, REPORTS_DIR, f"{src.name}-compile") as folder:
        for gear in gs.order:
            progress(f"compiling gear {label(gear)}")
            cfg = gs.gear_config(gear)
            res = compile_model(m, cfg, model_path=str(src.path))
            sub = folder / f"gear_{label(gear)}"
            sub.mkdir()
            write_compile_artifacts(res, sub)
            compiled[gear] = res
            entries.append({"gear": list(gear), "label": label(gear), "input_shape": cfg.input_shape,
                            "folder": sub.name, "kernels": len(res.plan.kernels), "arena_bytes": res.plan.arena_bytes,
                            "compile_ms": res.compile_ms, "findings": len(res.findings)})
            lines.append(f"gear {label(gear)}: {len(res.plan.kernels)} kernels, arena {human_bytes(res.plan.arena_bytes)}, "
                         f"compiled in {res.compile_ms:.0f} ms -> {sub.name}/")
        write_json(folder / "gears.json", json_safe({
            "model": str(src.path), "kind": spec.kind, "gears_option": spec.describe(),
            "input_shape": config.input_shape, "pad_values": spec.pad_values, "gears": entries,
            "output_rules": {k: [list(r) for r in v] for k, v in output_rules(m, spec).items()}}))
    lines.append(f"{len(entries)} plans in {folder}")
    return {"summary": lines, "out": folder, "files": {"gears": folder / "gears.json"}, "compiled": compiled}


def _gear_feed(m, src, spec, inputs, seed, val_range):
    largest = max(spec.gears, key=spec.elements)
    shapes = {} if inputs or (src.kind in ("sample", "zoo") and not val_range) else spec.shapes(largest)
    return prepare_inputs(m, src, inputs, seed, val_range, shapes)


def run_gears_command(model: str | None, config, *, inputs: str | None = None, seed: int = 0,
                      val_range: str | None = None, dump_dir: str | None = None, output: str | None = None,
                      out: str | None = None, plan: str | None = None, progress=_noop) -> dict:
    """Run once through the smallest fitting gear (module docstring). Generated random data takes the largest
    gear's shape. Raises UsageError with ``plan`` (one plan.json cannot serve several gears), or a taken
    ``--out`` / ``--dump`` / ``--save-outputs`` (before the model is read)."""
    check_out(out)  # --out, --dump and --save-outputs are refused before the model is read
    check_dump_dir(dump_dir, out)
    check_output_paths(output, dump_dir, out)
    if plan:
        raise UsageError("--plan runs one plan.json, but the config has gears (one plan each); drop --plan or "
                         "the gear options")
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    gs = GearSession(m, config, progress=progress)
    feed = _gear_feed(m, src, gs.spec, inputs, seed, val_range)
    progress(f"inputs: {feed.origin}")
    run = gs.run(feed.arrays, dump=bool(dump_dir))
    sess = gs.session(run.gear)
    report = None
    if run.padded:
        progress("padding sensitivity: padded vs exact reference run")
        report = padding_sensitivity(m, feed.arrays, gs.spec.shapes(run.gear), gs.spec.pad_values)
    with output_dir(out, REPORTS_DIR, f"{src.name}-run") as folder:
        files = write_compile_artifacts(sess.compiled, folder)
        files["outputs"] = write_npz(Path(output) if output else folder / "outputs.npz", run.outputs)
        files["gear"] = write_json(folder / "gear.json", json_safe({
            "gear": list(run.gear), "label": label(run.gear), "gears_option": gs.spec.describe(),
            "input_shapes": run.shapes, "gear_shapes": gs.spec.shapes(run.gear), "padded": run.padded,
            "pad_values": gs.spec.pad_values}))
        if report is not None:
            atomic_write_text(folder / "padding.csv", to_csv_safe(report.table, index=False))
            files["padding"] = write_json(folder / "padding.json", json_safe(
                {**report.summary, "findings": [f.to_dict() for f in report.findings]}))
        if dump_dir:
            check_dump_dir(dump_dir, out)  # again: the folder may have been filled during the run
            files["dump"] = write_dumps(run.run.dumps, sess.plan, Path(dump_dir))
    lines = [f"gear {label(run.gear)} ({gs.spec.input_shape(run.gear)}) for input "
             + ", ".join(f"{k}{list(v)}" for k, v in run.shapes.items())
             + (" (padded)" if run.padded else " (exact fit)")]
    lines += compile_summary(sess.compiled)
    lines.append(f"ran {len(sess.plan.kernels)} kernels in {run.run.total_ms:.1f} ms host time")
    if report is not None:
        first = report.summary["first_leak"]
        lines.append("padding sensitivity: " + (f"padding leaks into the valid region first at '{first['tensor']}' "
                                                f"({first['op_type']}); outputs affected: "
                                                f"{report.summary['outputs_leak'] or 'none'}" if first else
                                                "no tensor's valid region changes (padding is safe for this input)"))
        for f in sorted(report.findings, key=lambda f: f.severity != "error")[:5]:
            lines.append(f"{f.severity.upper():7} padding_leak: {f.subject}: {f.recommendation}")
    wrong = list(report.summary["outputs_leak"]) if report is not None else []
    for name, arr in run.outputs.items():
        lines.append(f"output {name}: {arr.dtype}{list(arr.shape)}" + (" (WRONG: padding leaks into it)"
                                                                        if name in wrong else ""))
    lines.append(f"wrote {files['outputs']}" + (f" and dumps in {files['dump']}" if dump_dir else "")
                 + (" and padding.json" if report is not None else ""))
    if wrong:
        lines.append(f"FAILED: padding to gear {label(run.gear)} changes output(s) {', '.join(wrong)} (they differ "
                     "from an exact-shape run); mask the padded positions, change pad_value, or add a gear that "
                     "fits this input exactly (exit code 1)")
    return {"summary": lines, "out": folder, "files": files, "result": run.run, "gear_run": run,
            "padding": report, "outputs_wrong": wrong, "exit_code": 1 if wrong else 0}
