"""The device profilers' output folders, found and read once.

Layouts (CANN profiling docs; torch_npu's Ascend PyTorch Profiler):

- msprof: ``PROF_<...>/`` holding ``mindstudio_profiler_output/`` (op_summary_*.csv, op_statistic_*.csv,
  task_time_*.csv, api_statistic_*.csv, msprof_*.json, ...) next to raw ``device_<n>/`` and ``host/`` data;
- torch_npu: ``<worker>_ascend_pt/`` holding ``ASCEND_PROFILER_OUTPUT/`` (kernel_details.csv, trace_view.json,
  op_statistic.csv, api_statistic.csv, ...) and also a ``PROF_<...>/`` of the same run (its
  mindstudio_profiler_output repeats the same tasks).

:func:`output_folder` turns a given folder into the one folder of exported files to read (so a run is read
once, never from both its ASCEND_PROFILER_OUTPUT and its PROF_ copy). :func:`timeline_twins` names the files to
skip because another file of the same folder holds their device tasks:

- the per-task tables of one output folder are the same tasks in other columns: op_summary_*.csv (the richest:
  shapes, types, block dims) is read and kernel_details.csv / task_time_*.csv next to it skipped; without an
  op_summary, kernel_details.csv is read and task_time_*.csv skipped (:data:`TASK_TABLES`, in that order);
- msprof_*.json / trace_view.json hold the same device tasks as the per-task table next to them, which is read
  instead.
"""

from __future__ import annotations

from pathlib import Path

MSPROF_OUTPUT = "mindstudio_profiler_output"
TORCH_OUTPUT = "ASCEND_PROFILER_OUTPUT"
_TIMELINES = ("msprof", "trace_view")
#: The per-task tables of a profiler output folder, the preferred first: a folder's tables of a later kind hold the
#: same device tasks as its tables of the first kind present, and are skipped.
TASK_TABLES = ("op_summary", "kernel_details", "task_time")


def output_folder(folder: Path) -> Path:
    """The exported-files folder of a profiler folder given by the user (``folder`` itself when it is one, or is
    no profiler folder): ``X/ASCEND_PROFILER_OUTPUT`` first, then ``X/mindstudio_profiler_output``, then the
    output of the only ``PROF_*`` subfolder."""
    for name in (TORCH_OUTPUT, MSPROF_OUTPUT):
        if (folder / name).is_dir():
            return folder / name
    profs = sorted(p for p in folder.glob("PROF_*") if p.is_dir() and (p / MSPROF_OUTPUT).is_dir())
    if len(profs) == 1 and not any(c.is_file() for c in folder.iterdir()):
        return profs[0] / MSPROF_OUTPUT
    return folder


def timeline_twins(paths: list[Path]) -> dict[Path, str]:
    """{file: why it is skipped} for the files of ``paths`` whose device tasks another file of the same folder
    holds (module docstring): the per-task tables of a less preferred kind than the folder's first
    (:data:`TASK_TABLES`), and the timeline JSONs next to a per-task table. Files of different folders are never
    compared."""
    by_dir: dict[Path, list[Path]] = {}
    for p in paths:
        by_dir.setdefault(p.resolve().parent, []).append(p)
    out = {}
    for files in by_dir.values():
        tables = {kind: [p for p in files if p.suffix == ".csv" and p.name.startswith(kind)] for kind in TASK_TABLES}
        kept = next((kind for kind in TASK_TABLES if tables[kind]), None)
        if kept is None:
            continue
        read = tables[kept][0].name
        for kind in TASK_TABLES[TASK_TABLES.index(kept) + 1:]:
            for p in tables[kind]:
                out[p] = (f"same device tasks as {read} in this profiler output folder ({kind} holds the tasks of "
                          f"{kept}, in fewer columns); {read} was read instead, so nothing is counted twice (give "
                          f"the {kind} file alone to read it)")
        for p in files:
            if p.suffix == ".json" and p.name.startswith(_TIMELINES):
                out[p] = (f"same device tasks as {read} in this profiler output folder; {read} "
                          "was read instead, so nothing is counted twice (give the JSON alone for its host spans)")
    return out
