"""Run a model over every input set, gather the :class:`~toolkit.signoff.criteria.Evidence` a policy needs,
and evaluate the policy.

A folder of ``.npz`` inputs is a dataset run (toolkit.commands.dataset.signoff_dataset): streamed, parallel,
resumable, its Evidence built by :func:`dataset_evidence` / :func:`worst_case_table` from the stored per-input
records. :func:`run_signoff` below holds its (few) input sets in memory.

One NPU Session per distinct input shape (compiled once), one FP32 ReferenceRunner. Per input set: a timed NPU
run without dumps (latency, outputs, tasks), then — for the first set, and for every set when the policy has
``[layers]`` or ``[fp16_overflow]`` — a run with dumps compared tensor by tensor with the analysis of a
single-input compare (toolkit.diagnose.layer_analysis: the same abnormal tensors and origins).
The policy's names are checked against the model (toolkit.signoff.policy.check_policy_model) before any input
runs. ``[latency]`` is simulated on the compiled plan of every distinct input shape (:func:`conclude` compiles
the shapes a dataset run only recorded) and judged on the worst.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.cache.settings import compile_cache
from toolkit.compare.layerwise import SAME_BY_CONSTRUCTION
from toolkit.compare.metrics import compare_tensors
from toolkit.compare.metrics.applies import output_dtypes
from toolkit.compare.metrics.thresholds import check_tensors
from toolkit.compare.tasks import run_tasks
from toolkit.config.schema import Config
from toolkit.core.env import environment
from toolkit.diagnose import device_tensors, layer_analysis
from toolkit.engine import Session, compile_model, shapes_of
from toolkit.ir.load import file_sha256, load_model, loaded_sha256
from toolkit.ort.reference import ReferenceRunner
from toolkit.signoff.criteria import Evidence, Result, check_unique, evaluate, shape_key
from toolkit.signoff.policy import Policy, check_policy_model
from toolkit.source import _zoo_name_of, prepare_inputs, resolve_model, several_sets
from toolkit.source import input_sets as source_input_sets

AGG = {"CosineSimilarity": "min", "Abnormal": "max", "OverFlow": "max", "DeviceInf": "max", "DeviceNaN": "max",
       "GoldenAbsMax": "max"}


def _noop(msg: str) -> None:
    pass


@dataclass
class SignoffRun:
    """The outcome: results per criterion plus what a report needs."""

    results: list[Result]
    evidence: Evidence
    first_table: pd.DataFrame
    compiled: object
    summary: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)


def input_sets(model, src, inputs: str | None, input_shapes: dict | None = None, seed: int = 0,
               val_range: str | None = None) -> list[tuple[str, dict]]:
    """[(label, feeds)]: every .npz of a folder (sorted) or every set of a loader (toolkit.source.input_sets), one
    .npz file, or the model's default input (seeded by ``seed``, bounded by ``val_range``, shaped by
    ``input_shapes``, the config's input_shape, where its dims are dynamic)."""
    if several_sets(inputs):
        return source_input_sets(model, src, inputs, seed, val_range, input_shapes)
    feed = prepare_inputs(model, src, inputs, seed, val_range, input_shapes=input_shapes)
    return [(feed.origin, feed.arrays)]


def config_sha256(config: Config, config_path: str | None) -> dict:
    """{"resolved": sha256 of the canonical JSON of the resolved config, "file": sha256 of the file or ""}."""
    canon = json.dumps(config.to_dict(), sort_keys=True, default=str).encode()
    file_sha = hashlib.sha256(Path(config_path).read_bytes()).hexdigest() if config_path else ""
    return {"resolved": hashlib.sha256(canon).hexdigest(), "file": file_sha}


def _first_reason(reasons: pd.Series) -> str:
    return next((r for r in reasons if isinstance(r, str) and r.strip()), "")


def _worst_case(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Worst case per tensor over the input sets' layer tables (Evidence.layers): CosineSimilarity the minimum,
    NaN when it was not computable on any input set (so a set where the tensor could not be compared is not
    hidden by the others); CompareFailReason the first non-empty one; flags set on any set; GoldenAbsMax max."""
    df = pd.concat(tables, ignore_index=True)
    for col in ("DeviceInf", "DeviceNaN"):
        df[col] = pd.to_numeric(df.get(col, pd.Series(0, index=df.index)), errors="coerce").fillna(0) > 0
    for col in ("CosineSimilarity", "GoldenAbsMax"):
        df[col] = pd.to_numeric(df.get(col, np.nan), errors="coerce")
    df["CompareFailReason"] = df.get("CompareFailReason", pd.Series("", index=df.index)).fillna("").astype(str)
    agg = {c: AGG.get(c, "first") for c in df.columns if c != "TensorName"}
    agg["CompareFailReason"] = _first_reason
    g = df.groupby("TensorName", sort=False)
    out = g.agg(agg).reset_index()
    nan_somewhere = g["CosineSimilarity"].apply(lambda s: bool(s.isna().any())).to_numpy()
    out.loc[nan_somewhere, "CosineSimilarity"] = np.nan
    for col in ("Abnormal", "OverFlow", "DeviceInf", "DeviceNaN"):
        out[col] = out[col].astype(bool)
    return out


def _session(cache: dict, model, config: Config, feeds: dict) -> Session:
    key = tuple(sorted(shapes_of(feeds).items()))
    if key not in cache:
        cache[key] = Session(model, config, input_shapes=dict(key))
    return cache[key]


def run_signoff(model_arg: str | None, policy: Policy, config: Config, *, inputs: str | None = None,
                config_path: str | None = None, thresholds=None, seed: int = 0, val_range: str | None = None,
                progress=_noop) -> SignoffRun:
    """Run ``model_arg`` over the input sets and evaluate ``policy``. Raises UserError for bad input."""
    src = resolve_model(model_arg)
    progress(f"loading {src.path}")
    model = load_model(src.path)
    sets = input_sets(model, src, inputs, config.input_shapes(), seed, val_range)
    check_policy_model(policy, model)
    check_tensors(thresholds, [i.name for i in model.graph.input] + [t for n in model.graph.node for t in n.output])

    zname = src.name if src.kind == "zoo" else _zoo_name_of(src.path)
    task_specs = list((policy.section("tasks") or {}).get("metrics", []))
    all_layers = policy.section("layers") is not None or policy.section("fp16_overflow") is not None
    outputs = [o.name for o in model.graph.output]
    ref, sessions = ReferenceRunner(model), {}
    tables, rows, tasks, run_ms, shapes = [], {o: [] for o in outputs}, [], [], []
    for i, (label, feeds) in enumerate(sets):
        progress(f"input set {i + 1}/{len(sets)}: {label}")
        sess = _session(sessions, model, config, feeds)
        shapes.append(shapes_of(feeds))
        res = sess.run(feeds)
        run_ms.append(res.total_ms)
        golden = ref.run(feeds)
        golden.update(feeds)
        for o in outputs:
            rows[o].append(compare_tensors(res.outputs[o], golden[o]) if o in golden and o in res.outputs else {})
        tasks.append(run_tasks(zname, task_specs, {o: golden[o] for o in outputs if o in golden}, res.outputs, model))
        if i == 0 or all_layers:
            dumped = sess.run(feeds, dump=True)
            tables.append(layer_analysis(model, sess.runtime, golden, device_tensors(dumped, feeds), thresholds))
    first = next(iter(sessions.values()))
    ev = Evidence(outputs=outputs, output_rows=rows, layers=_worst_case(tables), tasks=tasks, plan=first.plan,
                  run_ms=run_ms, inputs=[s[0] for s in sets], shapes=shapes,
                  compiled_by_shape={shape_key(dict(k)): sess.compiled for k, sess in sessions.items()})
    return conclude(src, policy, config, config_path, ev, first.compiled, tables[0], model=model)


def conclude(src, policy: Policy, config: Config, config_path: str | None, ev: Evidence, compiled,
             first_table: pd.DataFrame, extra_results: list[Result] = (), model=None) -> SignoffRun:
    """Evaluate ``policy`` on ``ev`` (plus ``extra_results``, e.g. inputs that could not be evaluated) and
    build the SignoffRun with its summary (summary.json content). ``model`` (the loaded ModelProto; read from
    ``src.path`` when needed and not given) is used to check the policy's names (a no-op when the run already
    did) and to compile the input shapes of ``ev.shapes`` that have no plan yet, for [latency].

    Raises:
        ConfigError: a policy name the model does not have (toolkit.signoff.policy.check_policy_model).
    """
    if ev.compiled is None:
        ev.compiled = compiled  # the plan of the first input set's shapes
    model = model if model is not None else load_model(src.path)
    check_policy_model(policy, model)
    _compile_shapes(policy, config, ev, compiled, model, src.path)
    ev.output_classes = ev.output_classes or {o: c for o, (_, c) in output_dtypes(model).items()}
    results = check_unique(evaluate(policy, ev) + list(extra_results))

    sha = loaded_sha256(src.path) or file_sha256(src.path)  # the bytes evaluated, even if the file changed since
    n_fail = sum(not r.passed for r in results)
    summary = {
        "verdict": "FAIL" if n_fail else "PASS", "reasons": [r.message for r in results if not r.passed],
        "model": str(src.path), "model_name": src.name, "model_sha256": sha,
        "config": config.to_dict(), "compile_cache": compile_cache(config.to_dict()), "config_path": config_path or "",
        "config_sha256": config_sha256(config, config_path),
        "policy": policy.data, "policy_path": policy.path, "policy_sha256": policy.sha256,
        "inputs": ev.inputs, "counts": {"criteria": len(results), "passed": len(results) - n_fail, "failed": n_fail,
                                        "input_sets": len(ev.inputs), "kernels": len(ev.plan.kernels)},
        "criteria": [r.to_dict() for r in results],
        "memory": {"arena_bytes": ev.plan.arena_bytes, "lower_bound_bytes": ev.plan.lower_bound_bytes},
        "latency_ms": ev.run_ms, "environment": environment(),
    }
    return SignoffRun(results, ev, first_table, compiled, summary)


def _compile_shapes(policy: Policy, config: Config, ev: Evidence, compiled, model, model_path) -> None:
    """Fill ``ev.compiled_by_shape`` for every distinct shape of ``ev.shapes`` when the policy simulates
    [latency] or bounds [memory] (``compiled`` is the plan of the first input set; other shapes are compiled
    here, through the compile cache): both are checked on every shape, whatever the file order."""
    lat = policy.section("latency")
    simulated = lat is not None and lat.get("source", "schedule") != "host"
    if not (simulated or policy.section("memory") is not None) or not ev.shapes:
        return
    if compiled is not None:
        ev.compiled_by_shape.setdefault(shape_key(ev.shapes[0]), compiled)
    for shapes in ev.shapes:
        key = shape_key(shapes)
        if key not in ev.compiled_by_shape:
            ev.compiled_by_shape[key] = compile_model(model, config, input_shapes={k: list(v) for k, v in key},
                                                      model_path=str(model_path))


def dataset_evidence(outputs: list[str], metas, layers: pd.DataFrame, plan) -> Evidence:
    """Evidence of a dataset run (toolkit.dataset): ``metas`` are the stored per-input records' meta dicts of
    the inputs that were evaluated (output rows, task results, host run time, input shapes; a few scalars per
    input), and ``layers`` is the worst case per tensor over all inputs (:func:`worst_case_table`). A tensor
    compared on fewer inputs than were evaluated (``Inputs`` column) gets a NaN CosineSimilarity and a
    CompareFailReason naming how many inputs it could not be compared on, unless it is the same by
    construction (toolkit.compare.layerwise.SAME_BY_CONSTRUCTION)."""
    rows, tasks, run_ms, names, shapes = {o: [] for o in outputs}, [], [], [], []
    for m in metas:
        names.append(m["input"])
        for o in outputs:
            rows[o].append(m["outputs"].get(o, {}))
        tasks.append(m["tasks"])
        run_ms.append(float(m["run_ms"]))
        shapes.append(dict(m.get("shapes") or {}))
    if not all(shapes):
        shapes = []
    return Evidence(outputs=outputs, output_rows=rows, layers=_partly_compared(layers, len(names)), tasks=tasks,
                    plan=plan, run_ms=run_ms, inputs=names, shapes=shapes)


def _partly_compared(layers: pd.DataFrame, n_inputs: int) -> pd.DataFrame:
    """Mark tensors whose metrics exist on fewer than ``n_inputs`` inputs (see :func:`dataset_evidence`)."""
    if "Inputs" not in layers.columns or not n_inputs:
        return layers
    out = layers.copy()
    why = out["CompareFailReason"].fillna("").astype(str) if "CompareFailReason" in out.columns else \
        pd.Series("", index=out.index)
    compared = pd.to_numeric(out["Inputs"], errors="coerce").fillna(0)
    cos_any = pd.to_numeric(out["CosineSimilarity"], errors="coerce").notna()
    partial = (compared < n_inputs) & ~why.str.startswith(SAME_BY_CONSTRUCTION) & (cos_any | (why != ""))
    missing = (n_inputs - compared[partial]).astype(int).astype(str)
    out.loc[partial, "CosineSimilarity"] = np.nan
    out.loc[partial, "CompareFailReason"] = [
        (w + "; " if w else "") + f"not compared on {m} of {n_inputs} input(s)" for w, m in zip(why[partial], missing)]
    return out


def worst_case_table(info: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """The Evidence.layers table of a dataset run: the info columns of one input's layer table (``info``:
    NodeName, TensorName, OpType, Kernel, Precision, DataType, CompareFailReason) joined by TensorName with the
    dataset aggregate (toolkit.dataset.aggregate): CosineSimilarity = worst, Inputs = inputs where the tensor was
    compared, Abnormal / OverFlow / DeviceInf / DeviceNaN = set on any input, GoldenAbsMax = max."""
    keep = [c for c in ("Index", "NodeName", "TensorName", "OpType", "Kernel", "Precision", "NPUDump", "DataType", "GroundTruthDataType",
                        "CompareFailReason") if c in info.columns]
    a = agg.set_index("TensorName")
    out = info[keep].copy()
    t = out["TensorName"]
    out["CosineSimilarity"] = t.map(a["CosineSimilarity_worst"]).astype(float)
    out["Inputs"] = t.map(a["Inputs"]).fillna(0).astype(int) if "Inputs" in a.columns else 0
    out["GoldenAbsMax"] = t.map(a["GoldenAbsMax"]).astype(float)
    for col, src in (("Abnormal", "AbnormalInputs"), ("OverFlow", "OverFlowInputs"), ("DeviceInf", "DeviceInfInputs"),
                     ("DeviceNaN", "DeviceNaNInputs")):
        out[col] = t.map(a[src]).fillna(0).astype(float) > 0
    return out.reset_index(drop=True)
