"""Evaluate one input of a dataset run: NPU plan vs FP32 reference, reduced to a small per-layer record.

A :class:`Worker` loads the model, builds the FP32 reference once and compiles the NPU plan once per distinct
input shape; :meth:`Worker.evaluate` then runs one input and returns a :class:`Record`: a few scalars (verdict,
output metrics, task checks, host run time) and, per compared tensor, the values of :data:`COLUMNS`. The
same worker runs in-process (serial), in each ``--jobs`` process and in each Ray actor, so every backend
computes the same numbers.

Per input: a timed NPU run without dumps (``run_ms``, outputs, tasks, as signoff measures latency), a run with
dumps, the reference run, and the same per-tensor analysis as a single-input diagnose / compare
(:func:`toolkit.diagnose.layer_analysis`: layer table, single-kernel isolation of the origins, FP16 storage
origins), so an input's abnormal count, roles and first divergence are those a single-input compare reports.
No force_fp32 triage and no advisor: the workflow runs the full diagnosis once, on the worst input.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.compare.advisor import first_divergence
from toolkit.compare.counts import layer_counts
from toolkit.compare.metrics import METRICS, compare_tensors
from toolkit.compare.tasks import run_tasks
from toolkit.config.schema import Config
from toolkit.core.errors import InputError, ModelError, UserError
from toolkit.dataset.source import (
    InputRef,
    load_feed,
    read_bytes,
    sha256_bytes,
    sha256_file,
)
from toolkit.diagnose import _verdict, device_tensors, layer_analysis
from toolkit.engine import Session, shapes_of
from toolkit.inputs import check_feed, input_specs
from toolkit.ir.load import load_model
from toolkit.ort.ort_env import enable_global_thread_pool
from toolkit.ort.reference import ReferenceRunner

#: Per-tensor values kept for every input, in this column order (floats; flags as 0/1, NaN = not computed).
COLUMNS: tuple[str, ...] = tuple(METRICS) + ("GoldenAbsMax", "Abnormal", "OverFlow", "DeviceNaN", "DeviceInf")
#: Scalar keys of an output's compare row kept in a record.
OUTPUT_KEYS: tuple[str, ...] = tuple(METRICS) + ("OverFlow", "Abnormal", "CompareFailReason")


@dataclass
class JobSpec:
    """What every worker needs (picklable; sent once per worker process or actor).

    Attributes:
        model_path: the model file; model_sha256: its sha256 (checked by remote workers).
        model_bytes: the model file's bytes, for workers on machines without ``model_path`` (Ray), else None.
        config: the resolved Config; thresholds: abnormal lines (dict) or None for the defaults.
        task_metrics: extra task checks (``module:function``); zoo_name: the zoo model (built-in task check).
        tensors: the canonical tensor order of the layer table (:func:`tensor_order`).
        global_pool, threads: in a worker process, enable onnxruntime's global thread pool with this many
            intra-op threads (NPUSCOPE_THREADS; 0 = onnxruntime's default) before any session is built.
    """

    model_path: str
    model_sha256: str
    config: Config
    thresholds: dict | None
    tensors: tuple[str, ...]
    task_metrics: tuple[str, ...] = ()
    zoo_name: str | None = None
    model_bytes: bytes | None = None
    global_pool: bool = False
    threads: int = 0


@dataclass
class Record:
    """One input's result.

    Attributes:
        meta: JSON-able scalars: input, sha256 (of the file), status ("ok" | "error"), error (one line),
            verdict (PASS | WARN | FAIL | ERROR), reasons, first_divergence ({node, tensor, kind} or None),
            shapes ({input: dims}), run_ms (host ms of the timed NPU run), outputs ({output: {metric: value}}),
            tasks ([{name, passed, value, detail}]), counts ({tensors, compared, abnormal, overflow, origins,
            propagated}: toolkit.compare.counts.layer_counts).
        rows: int32 (n,) indices into ``JobSpec.tensors`` of the tensors that have values.
        values: float64 (n, len(COLUMNS)).
    """

    meta: dict
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    values: np.ndarray = field(default_factory=lambda: np.zeros((0, len(COLUMNS))))


def tensor_order(model) -> tuple[str, ...]:
    """Row order of :func:`toolkit.compare.layerwise.layer_table`: graph inputs that are not initializers,
    then every node output in node order."""
    inits = {i.name for i in model.graph.initializer}
    head = [i.name for i in model.graph.input if i.name not in inits]
    return tuple(head + [t for n in model.graph.node for t in n.output if t])


def error_record(name: str, sha: str, message: str) -> Record:
    """The record of an input that could not be evaluated (a reported row, not a crash)."""
    return Record({"input": name, "sha256": sha, "status": "error", "error": " ".join(str(message).split()),
                   "verdict": "ERROR", "reasons": [str(message)], "first_divergence": None, "shapes": {},
                   "run_ms": None, "outputs": {}, "tasks": [], "counts": {}})


def _setup_process(spec: JobSpec) -> None:
    if spec.global_pool:
        if spec.threads and "NPUSCOPE_THREADS" not in os.environ:
            os.environ["NPUSCOPE_THREADS"] = str(spec.threads)
        enable_global_thread_pool()


def _load_model(spec: JobSpec):
    """The model from ``model_path`` when this machine has it (same sha256), else from ``model_bytes``."""
    path = Path(spec.model_path)
    if path.is_file() and sha256_file(path) == spec.model_sha256:
        return load_model(path)
    if spec.model_bytes is None:
        raise ModelError(f"model '{path}' is not on this worker (or differs, sha256 mismatch); install the same "
                         "file at the same path on every worker")
    tmp = Path(tempfile.mkdtemp(prefix="npuscope-model-")) / path.name
    tmp.write_bytes(spec.model_bytes)
    return load_model(tmp)


class Worker:
    """Compile-once evaluator of dataset inputs (see module docstring).

    Args:
        spec: the job. ``in_process=True`` (the serial backend) leaves the process' onnxruntime settings alone.

    Raises:
        ModelError: the model cannot be loaded here.
    """

    def __init__(self, spec: JobSpec, in_process: bool = False):
        if not in_process:
            _setup_process(spec)
        self.spec = spec
        self.model = _load_model(spec)
        self.specs = input_specs(self.model)
        self.outputs = [o.name for o in self.model.graph.output]
        self.reference = ReferenceRunner(self.model)
        self.sessions: dict = {}
        self.position = {t: i for i, t in enumerate(spec.tensors)}

    def evaluate_ref(self, ref: InputRef) -> Record:
        """Read the file of ``ref`` here and evaluate it (process-pool backend: only names travel)."""
        try:
            data = read_bytes(ref)
        except UserError as exc:
            return error_record(ref.name, "", str(exc))
        return self.evaluate(ref.name, data)

    def evaluate(self, name: str, data: bytes) -> Record:
        """Evaluate the ``.npz`` bytes of input ``name``. User errors (bad file, shape that does not compile)
        become an error record (a task check that cannot judge this input's reference too); anything else is a
        bug and raises."""
        sha = sha256_bytes(data)
        try:
            feeds = load_feed(name, data, self.specs)
            self._check_shapes(name, feeds)
            return self._evaluate(name, sha, feeds)
        except UserError as exc:
            return error_record(name, sha, str(exc))

    def compile_for(self, name: str, feed: dict) -> bool:
        """Compile (and keep) the plan for the shapes of ``feed`` (arrays or :func:`header_feed` stand-ins of
        input ``name``), as :meth:`evaluate` will. False, compiling nothing, when the feed itself does not fit
        the model (that input's evaluation reports it).

        Raises:
            ModelError, ConfigError: the plan cannot be compiled for a feed that fits the model: a model or
                config problem, not one of this input (the dataset workflow checks it before the run).
        """
        try:
            check_feed(feed, self.specs, f"input '{name}'")
            self._check_shapes(name, feed)
        except InputError:
            return False
        self._session({spec.name: feed[spec.name] for spec in self.specs})
        return True

    def _check_shapes(self, name: str, feeds: dict) -> None:
        for key, want in self.spec.config.input_shapes().items():
            if key in feeds and tuple(np.shape(feeds[key])) != tuple(want):
                raise InputError(f"input '{key}' of '{name}' has shape {tuple(np.shape(feeds[key]))} but "
                                 f"input_shape says {tuple(want)}; make them agree")

    def _session(self, feeds: dict):
        key = tuple(sorted(shapes_of(feeds).items()))
        if key not in self.sessions:
            self.sessions[key] = Session(self.model, self.spec.config, input_shapes=dict(key))
            self.sessions[key].path = self.spec.model_path
        return self.sessions[key]

    def _evaluate(self, name: str, sha: str, feeds: dict) -> Record:
        sess = self._session(feeds)
        timed = sess.run(feeds)
        dumped = sess.run(feeds, dump=True)
        golden = self.reference.run(feeds)
        golden.update(feeds)
        df = layer_analysis(self.model, sess.runtime, golden, device_tensors(dumped, feeds), self.spec.thresholds)
        tasks = run_tasks(self.spec.zoo_name, list(self.spec.task_metrics),
                          {o: golden[o] for o in self.outputs if o in golden}, timed.outputs, self.model)
        verdict, reasons = _verdict(df, self.outputs, tasks, "none", sess.compiled.findings,
                                    kernels=len(sess.compiled.plan.kernels))
        first = first_divergence(df)
        outputs = {o: _output_row(timed.outputs[o], golden[o], self.spec.thresholds, o)
                   for o in self.outputs if o in golden and o in timed.outputs}
        rows, values = self._values(df)
        meta = {"input": name, "sha256": sha, "status": "ok", "error": "", "verdict": verdict, "reasons": reasons,
                "first_divergence": ({k: first[k] for k in ("node", "tensor", "kind")} if first else None),
                "shapes": {k: list(v) for k, v in shapes_of(feeds).items()}, "run_ms": float(timed.total_ms),
                "outputs": outputs, "tasks": tasks,
                "counts": layer_counts(df)}
        return Record(meta, rows, values)

    def _values(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(row indices, float64 values of COLUMNS) of the tensors with a metric value or a flag set."""
        cols = []
        for c in COLUMNS:
            col = df[c] if c in df.columns else pd.Series(np.nan, index=df.index)
            cols.append(pd.to_numeric(col.astype(object).where(col.notna(), np.nan), errors="coerce")
                        .astype(np.float64).to_numpy())
        values = np.stack(cols, axis=1) if cols else np.zeros((len(df), 0))
        metric_cols = values[:, :len(METRICS)]
        keep = ~np.isnan(metric_cols).all(axis=1) | (np.nan_to_num(values[:, COLUMNS.index("OverFlow")]) > 0) \
            | (np.nan_to_num(values[:, COLUMNS.index("Abnormal")]) > 0)
        pos = np.array([self.position.get(t, -1) for t in df["TensorName"]], dtype=np.int64)
        keep &= pos >= 0
        return pos[keep].astype(np.int32), np.ascontiguousarray(values[keep])


def _output_row(device, golden, thresholds, name: str | None = None) -> dict:
    row = compare_tensors(device, golden, thresholds=thresholds, tensor=name)
    out = {}
    for k in OUTPUT_KEYS:
        v = row.get(k)
        if isinstance(v, (bool, np.bool_)):
            out[k] = bool(v)
        elif isinstance(v, (int, float, np.integer, np.floating)):
            f = float(v)
            out[k] = f if np.isfinite(f) else None
        else:
            out[k] = v
    return out
