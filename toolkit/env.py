"""The environment baseline: package versions, CPU, thread settings and the environment variables that change
results (recorded in every summary so a run can be reproduced and compared)."""

from __future__ import annotations

import os
import platform
from importlib import metadata

PACKAGES = ("npuscope", "numpy", "onnx", "onnxruntime", "onnx-ir", "onnxscript", "ml_dtypes", "pandas", "plotly",
            "jinja2")
#: Environment variables that change numerics, threading or where files go.
RELEVANT_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ORT_NUM_THREADS",
                "NPUSCOPE_THREADS", "NPUSCOPE_GLOBAL_POOL", "NPUSCOPE_MODEL_CACHE", "ASCEND_GLOBAL_LOG_LEVEL",
                "ASCEND_SLOG_PRINT_TO_STDOUT")


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
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
    """{"packages": {...}, "python", "platform", "cpu", "cpu_count", "env": {...}}."""
    return {
        "packages": {p: _version(p) for p in PACKAGES},
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "env": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ},
    }
