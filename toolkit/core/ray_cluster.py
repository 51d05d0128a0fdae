"""Reaching a Ray cluster (``--ray ADDRESS``: dataset runs, toolkit.dataset.runner; split diagnoses,
toolkit.stream.distributed). Ray is optional (the ``ray`` extra) and imported only here, when asked for.

A host:port address is probed with a TCP connection first: given an address where nothing listens, ``ray.init``
retries for minutes (a fresh tester waited over 10 minutes) before it fails.
"""

from __future__ import annotations

import os
import socket

from toolkit.core.errors import UsageError

#: Seconds a TCP probe of a host:port address waits.
PROBE_TIMEOUT_S = 5.0


def ray_module():
    """The ``ray`` module. Raises UsageError naming the extra to install when it is missing."""
    try:
        import ray  # optional dependency (the 'ray' extra)
    except ImportError:
        raise UsageError("--ray needs the 'ray' package; install it with: pip install 'npuscope[ray]'") from None
    return ray


def probe(address: str) -> None:
    """A host:port ``address`` must accept a TCP connection within :data:`PROBE_TIMEOUT_S` ('auto', 'local' and
    ray:// addresses are left to Ray). Raises UsageError: a port that is no number, or nothing listening."""
    if address in ("auto", "local") or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise UsageError(f"--ray '{address}': the port is not a number; give host:port, 'auto' or 'local'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise UsageError(f"--ray '{address}': cannot connect ({exc.strerror or exc}); start the cluster (ray start "
                         "--head) or give a running cluster's address, 'auto', or 'local'") from None


def check_address(address: str) -> None:
    """Fail fast, before anything compiles: ray is importable and a host:port ``address`` accepts connections
    (nothing checked when Ray is already initialised in this process). Raises UsageError."""
    ray = ray_module()
    if not ray.is_initialized():
        probe(address)


def connect(address: str):
    """(the ray module, whether this call started Ray): ``ray.init(address=...)`` after :func:`probe`, unless Ray
    is already initialised in this process (then reused as it is). Raises UsageError: ray is not installed, or
    the address cannot be reached."""
    ray = ray_module()
    if ray.is_initialized():
        return ray, False
    probe(address)
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UsageError(f"--ray '{address}': cannot connect ({' '.join(str(exc).split())[:200]}); give a "
                         "running cluster's address, 'auto', or 'local'") from None
    return ray, True


def blas_threads() -> str:
    """This process' BLAS thread count as OpenBLAS chooses it (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS,
    OMP_NUM_THREADS, else the CPU count). Ray workers get it as OPENBLAS_NUM_THREADS: the metric sums use BLAS
    dot products, whose float64 result depends on how many threads split the sum (Ray sets OMP_NUM_THREADS=1)."""
    for var in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var, "").strip().isdigit() and int(os.environ[var]) > 0:
            return os.environ[var].strip()
    return str(os.cpu_count() or 1)
