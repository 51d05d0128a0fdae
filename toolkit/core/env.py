"""The environment baseline: package versions, CPU, thread settings and the environment variables that change
results (recorded in every summary so a run can be reproduced and compared).

Variables the CLI sets itself when the user did not (one BLAS thread: toolkit.cli) are recorded by
:func:`set_default` in ``NPUSCOPE_DEFAULTED`` (``VAR=value`` pairs, comma-separated; child processes inherit
it) and reported apart from the user's: ``environment()["env"]`` holds what the user set,
``environment()["set_by_npuscope"]`` what npuscope set. A variable whose value was changed after npuscope set
it counts as the user's."""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
from pathlib import Path

PACKAGES = ("npuscope", "numpy", "onnx", "onnxruntime", "onnx-ir", "onnxscript", "ml_dtypes", "pandas", "plotly",
            "jinja2")
#: Environment variables that change what npuscope does: numerics and threading (BLAS / OpenMP / onnxruntime
#: thread counts, toolkit.ort.ort_env, toolkit.core.ray_cluster.blas_threads), where files go and whether
#: they are reused (the compile cache, toolkit.cache.settings; the model zoo cache, toolkit.zoo; their
#: ``XDG_CACHE_HOME`` / ``LOCALAPPDATA`` bases) and what is logged where (toolkit.logs.plog). Every variable the
#: package reads is listed here or in :data:`BOOKKEEPING_ENV` (tests/test_fixes_round7_report.py checks the source).
RELEVANT_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "ORT_NUM_THREADS",
                "NPUSCOPE_THREADS", "NPUSCOPE_GLOBAL_POOL",
                "NPUSCOPE_COMPILE_CACHE", "NPUSCOPE_COMPILE_CACHE_MODE", "NPUSCOPE_COMPILE_CACHE_MAX_BYTES",
                "NPUSCOPE_MODEL_CACHE", "NPUSCOPE_ZOO_WHEEL", "XDG_CACHE_HOME", "LOCALAPPDATA",
                "NPUSCOPE_LOG_LEVEL", "NPUSCOPE_LOG_TO_STDOUT", "NPUSCOPE_LOG_FILE",
                "ASCEND_GLOBAL_LOG_LEVEL", "ASCEND_SLOG_PRINT_TO_STDOUT")


#: Where :func:`set_default` records the variables npuscope set itself ("VAR=value,VAR2=value2").
DEFAULTED_ENV = "NPUSCOPE_DEFAULTED"
#: Variables npuscope reads that change nothing by themselves (bookkeeping), so not in :data:`RELEVANT_ENV`.
BOOKKEEPING_ENV = (DEFAULTED_ENV,)


def defaulted(environ=None) -> dict[str, str]:
    """{variable: value} npuscope set itself (``NPUSCOPE_DEFAULTED``) and that still have that value."""
    environ = os.environ if environ is None else environ
    out = {}
    for pair in environ.get(DEFAULTED_ENV, "").split(","):
        var, sep, val = pair.partition("=")
        if sep and var and environ.get(var) == val:
            out[var] = val
    return out


def set_default(var: str, value: str, environ=None) -> bool:
    """Set ``var`` to ``value`` unless it is set already (the user's choice wins), and record it in
    ``NPUSCOPE_DEFAULTED``; returns whether it was set. ``environ`` defaults to ``os.environ``."""
    environ = os.environ if environ is None else environ
    if var in environ:
        return False
    environ[var] = value
    record = {**defaulted(environ), var: value}
    environ[DEFAULTED_ENV] = ",".join(f"{k}={v}" for k, v in sorted(record.items()))
    return True


def _normalise(name: str) -> str:
    """A distribution name as packaging normalises it (PEP 503), with "_" as the separator."""
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.cache
def _dist_infos() -> dict[str, Path]:
    """{normalised distribution name: its ``*.dist-info`` folder} over the folders of ``sys.path`` (the first
    one found wins, as for imports); folder names are ``<name>-<version>.dist-info`` (the wheel spec)."""
    found: dict[str, Path] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info") and "-" in n:
                found.setdefault(_normalise(n[: -len(".dist-info")].split("-", 1)[0]), Path(entry or ".", n))
    return found


def dist_version(name: str) -> str | None:
    """Installed version of distribution ``name`` (e.g. "onnx-ir", "npuscope"), or None when it is not
    installed; nothing is imported. Read from the ``Version:`` line of its ``METADATA`` (one listing of each
    ``sys.path`` folder per process, ~1 ms), else from importlib.metadata, whose import and scan of every
    distribution cost ~15-30 ms in a new process."""
    info = _dist_infos().get(_normalise(name))
    if info is not None:
        try:
            with open(info / "METADATA", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break
        except OSError:
            pass
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    """{"packages": {...}, "python", "platform", "cpu", "cpu_count", "env": {variable: value the user set},
    "set_by_npuscope": {variable: value npuscope set itself (see the module docstring)}} over
    :data:`RELEVANT_ENV`."""
    mine = defaulted()
    return {
        "packages": {p: dist_version(p) for p in PACKAGES},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "env": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ and k not in mine},
        "set_by_npuscope": {k: mine[k] for k in RELEVANT_ENV if k in mine},
    }


