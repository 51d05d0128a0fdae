"""Backends that evaluate the pending inputs of a dataset run and hand each Record to the store.

- serial (``--jobs 1``, the default): one :class:`~toolkit.dataset.worker.Worker` in this process; inputs are
  read one at a time, in sorted order.
- process pool (``--jobs N``): N processes of the ``spawn`` start method (no state inherited from this
  process); each builds its Worker once in the pool initializer (compile once per process) and reads the
  input files itself, so only names and small records cross the pipe. At most 2·N inputs are in flight.
  Workers end when this process dies, even by SIGKILL (toolkit.dataset.lifeline).
- Ray (``--ray ADDRESS``): ``ray.init(address=ADDRESS)`` (e.g. ``auto`` for a running cluster, ``local`` for a
  new local instance; an already initialised Ray in this process is reused), then one actor per worker
  (``num_cpus=1``; N = ``--jobs`` when > 1, else the cluster's CPU count) running the same Worker. The driver
  reads each input file and ships its bytes (at most 2 per actor in flight), and ships the model bytes once,
  so the workers need npuscope installed but not the files.

Threads: every worker process or actor enables onnxruntime's global thread pool (as the CLI does) with
NPUSCOPE_THREADS intra-op threads: when that variable is not set, cpu_count // N for the pool and 1 for Ray
actors, so N workers do not oversubscribe the cores. The serial backend keeps this process' setting.
Identical results: onnxruntime's CPU kernels give the same values for any intra-op thread count here (checked
by tests/test_dataset.py), but the float64 metric sums use BLAS dot products whose rounding depends on the
BLAS thread count; pool processes inherit this process' environment, and Ray actors get this process' count
as OPENBLAS_NUM_THREADS (toolkit.core.ray_cluster.blas_threads). Workers on a machine whose CPU selects another BLAS kernel can
still differ in the last bits.

Records are written by this process, as they arrive (:meth:`toolkit.dataset.store.Store.write`); the
aggregation later reads them in sorted input order, so the result does not depend on the backend or on
completion order.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

from toolkit.core.errors import UsageError, UserError
from toolkit.core.ray_cluster import blas_threads, connect
from toolkit.dataset.lifeline import exit_with_parent
from toolkit.dataset.source import InputRef, read_bytes
from toolkit.dataset.worker import JobSpec, Record, Worker, error_record


def _noop(msg: str) -> None:
    pass


def serial(spec: JobSpec, todo: list[InputRef], worker: Worker | None = None) -> Iterator[Record]:
    """Evaluate ``todo`` in this process, lazily (one input loaded at a time), with ``worker`` (an in-process
    Worker of ``spec`` already built, e.g. by the workflow's checks before the run) or a new one."""
    if not todo:
        return
    worker = worker or Worker(spec, in_process=True)
    for ref in todo:
        yield worker.evaluate_ref(ref)


# ------------------------------------------------------------------------------------------- process pool
_POOL: dict = {}


def _pool_init(spec: JobSpec, parent_pid: int) -> None:
    exit_with_parent(parent_pid)  # a SIGKILLed CLI leaves no worker behind
    try:
        _POOL["worker"] = Worker(spec)
    except BaseException as exc:  # noqa: BLE001 (re-raised by every task, so the parent sees the real error)
        _POOL["error"] = exc


def _pool_eval(ref: InputRef) -> Record:
    if "error" in _POOL:
        raise _POOL["error"]
    return _POOL["worker"].evaluate_ref(ref)


def pool(spec: JobSpec, todo: list[InputRef], jobs: int) -> Iterator[Record]:
    """Evaluate ``todo`` in ``jobs`` spawned processes; records in completion order."""
    if not todo:
        return
    threads = spec.threads or max(1, (os.cpu_count() or 1) // jobs)
    spec = dataclasses.replace(spec, global_pool=True, threads=threads)
    ex = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                initializer=_pool_init, initargs=(spec, os.getpid()))
    pending = iter(todo)
    inflight: set = set()
    try:
        while True:
            while len(inflight) < 2 * jobs and (ref := next(pending, None)) is not None:
                inflight.add(ex.submit(_pool_eval, ref))
            if not inflight:
                break
            done, inflight = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                yield fut.result()
    except BaseException:  # interrupted (a signal, --timeout, the consumer gone): a worker may never finish
        _stop_workers(ex)
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def _stop_workers(ex: cf.ProcessPoolExecutor) -> None:
    """SIGTERM every worker process of ``ex`` (their default action: end at once, even inside onnxruntime,
    e.g. a model whose Loop never ends), so that the pool's shutdown does not wait for them.
    concurrent.futures has no public way before Python 3.14 (``terminate_workers``): its ``_processes``."""
    stop = getattr(ex, "terminate_workers", None)
    if stop is not None:
        stop()
        return
    for proc in list((getattr(ex, "_processes", None) or {}).values()):
        try:
            proc.terminate()
        except (OSError, ValueError):  # already gone
            pass


# ---------------------------------------------------------------------------------------------------- Ray
def ray_backend(spec: JobSpec, todo: list[InputRef], address: str, jobs: int = 1) -> Iterator[Record]:
    """Evaluate ``todo`` on a Ray cluster (module docstring); records in completion order."""
    if not todo:
        return
    ray, started = connect(address)
    actor_cls = ray.remote(num_cpus=1)(Worker)
    actors: list = []
    try:
        n = jobs if jobs > 1 else max(1, int(ray.cluster_resources().get("CPU", 1)))
        spec = dataclasses.replace(spec, model_bytes=Path(spec.model_path).read_bytes(), global_pool=True,
                                   threads=spec.threads or 1)
        spec_ref = ray.put(spec)
        env = {"env_vars": {"OPENBLAS_NUM_THREADS": blas_threads()}}
        actors.extend(actor_cls.options(runtime_env=env).remote(spec_ref) for _ in range(n))
        yield from _ray_loop(ray, actors, todo)
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()


def _ray_loop(ray, actors, todo: list[InputRef]) -> Iterator[Record]:
    load = {i: 0 for i in range(len(actors))}
    inflight: dict = {}
    pending = iter(todo)
    while True:
        for i in sorted(load, key=load.get):
            while load[i] < 2 and (ref := next(pending, None)) is not None:
                try:
                    data = read_bytes(ref)
                except UserError as exc:
                    yield error_record(ref.name, "", str(exc))
                    continue
                inflight[actors[i].evaluate.remote(ref.name, data)] = i
                load[i] += 1
        if not inflight:
            return
        done, _ = ray.wait(list(inflight), num_returns=1)
        for obj in done:
            load[inflight.pop(obj)] -= 1
            yield ray.get(obj)


# ---------------------------------------------------------------------------------------------------- run
def run_inputs(spec: JobSpec, todo: list[InputRef], store, *, jobs: int = 1, ray_address: str | None = None,
               total: int | None = None, progress=_noop, worker: Worker | None = None) -> int:
    """Evaluate ``todo`` with the chosen backend, writing each record to ``store`` as it arrives; ``worker``:
    an in-process Worker to reuse for the serial backend. Returns the number of records written.
    Raises UsageError for a bad ``jobs`` / Ray address."""
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: give a number of processes >= 1")
    if ray_address:
        records = ray_backend(spec, todo, ray_address, jobs)
    elif jobs > 1:
        records = pool(spec, todo, jobs)
    else:
        records = serial(spec, todo, worker)
    total = total or len(todo)
    done_before = total - len(todo)
    n = 0
    for rec in records:
        store.write(rec)
        n += 1
        m = rec.meta
        progress(f"input {done_before + n}/{total}: {m['input']} {m['verdict']}"
                 + (f" ({m['error']})" if m.get("error") else ""))
    return n
