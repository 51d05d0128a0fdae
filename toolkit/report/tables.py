"""A diagnosis as machine-readable files (toolkit.core.csvjson writes them safely): result.csv, summary.json
(with ``compile_cache``: the compile cache folder, mode and size limit used), findings.json and kernel_times.csv."""

from __future__ import annotations

from pathlib import Path

from toolkit.cache.settings import compile_cache
from toolkit.compare.diagnosis import Diagnosis
from toolkit.core.csvjson import _csv_text, _dumps, atomic_write_text, json_safe

FILES = {"result": "result.csv", "summary": "summary.json", "findings": "findings.json",
         "kernel_times": "kernel_times.csv"}


def summary_data(diag: Diagnosis) -> dict:
    """The content of summary.json (see module docstring), already JSON-safe."""
    data = dict(diag.summary)
    data.update(findings=[f.to_dict() if hasattr(f, "to_dict") else f for f in diag.findings], tasks=diag.tasks,
                triage=diag.triage, environment=diag.environment, memory=diag.memory)
    if "compile_cache" not in data:
        cache = compile_cache(data.get("config"))  # the folder used, next to the config's "" (= the default)
        if cache is not None:
            data["compile_cache"] = cache
    return json_safe(data)


def write_tables(diag: Diagnosis, out_dir: Path) -> dict[str, str]:
    """Write result.csv, summary.json, findings.json and kernel_times.csv into ``out_dir`` (created if
    missing). Each file not yet in ``diag.artifacts`` is added to it (so a report's artifacts table lists every
    file written). Returns {label: file name relative to out_dir}, ready to merge into ``Diagnosis.artifacts``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / FILES["result"], _csv_text(diag.table))
    atomic_write_text(out_dir / FILES["summary"], _dumps(summary_data(diag)))
    atomic_write_text(out_dir / FILES["findings"], _dumps([f.to_dict() if hasattr(f, "to_dict") else f
                                                       for f in diag.findings]))
    atomic_write_text(out_dir / FILES["kernel_times"], _csv_text(diag.kernel_times))
    listed = set((diag.artifacts or {}).values())
    diag.artifacts = {**(diag.artifacts or {}), **{k: v for k, v in FILES.items() if v not in listed}}
    return dict(FILES)
