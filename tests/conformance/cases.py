"""ONNX backend conformance cases run through NpuRuntime (force_fp32): enumerate, classify, run, compare.

Sources of the cases (all shipped with the ``onnx`` package, nothing is downloaded):

- node cases: ``onnx.backend.test.case.node.collect_testcases()`` builds ~1,900 one-node (or function-expanded)
  models in memory, each with one input/output data set and its own ``rtol``/``atol``;
- the "light" model zoo: ``onnx/backend/test/data/light/light_<name>.onnx`` plus ``light_<name>_output_0.pb``;
  the inputs are what onnx's backend runner generates (``Runner.generate_dummy_data(x, seed=0, random=False)``
  for every graph input that is not an initializer), tolerances from
  ``onnx.backend.test.case.model.collect_testcases()``.

Comparison is the runner's own: :meth:`onnx.backend.test.runner.Runner.assert_similar_outputs` with the case's
``rtol``/``atol`` (same number of outputs, shapes, dtypes, then ``np.testing.assert_allclose``).

A case is a *float case* when at least one graph output is (or holds, for sequences/optionals) a float16,
float32, float64 or bfloat16 tensor. A case is *excluded* (not counted in the pass rate) only for a reason that
holds independently of our engine, computed here, never listed by hand:

- ``ort_load``: plain onnxruntime (a whole-model ``InferenceSession`` with default options) cannot load it;
- ``ort_run``: plain onnxruntime loads it but fails to run it;
- ``ort_mismatch``: plain onnxruntime runs it but its outputs do not match the expected outputs.

Our kernels are onnxruntime sessions over subgraphs of the same model, so none of these can pass through the
engine either.
"""

from __future__ import annotations

import csv
import functools
import glob
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

FLOAT_ELEM_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                              onnx.TensorProto.BFLOAT16})
REPO = Path(__file__).resolve().parents[2]
REPORT_DIR = REPO / "reports" / "conformance"
LIGHT_DIR = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"
#: the acceptance bar: pass rate over non-excluded float node cases
MIN_PASS_RATE = 0.95


@dataclass
class Case:
    """One conformance case: model, positional inputs/expected outputs (runner's form), its tolerances."""

    name: str
    model: onnx.ModelProto
    inputs: list
    outputs: list
    rtol: float
    atol: float


@dataclass
class Result:
    """status: ``pass`` | ``fail`` | ``excluded``; kind: short failure/exclusion class; reason: one line."""

    case: str
    float_case: bool
    status: str
    kind: str = ""
    reason: str = ""
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------ enumeration
def _normalize(value):
    """The runner's ``_normalize_tensor``, applied through sequences: TensorProto -> ndarray."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


@functools.lru_cache(maxsize=1)
def node_cases() -> tuple[Case, ...]:
    """Every node case of the installed onnx, sorted by name (deterministic)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = collect_testcases()
    cases = []
    for tc in raw:
        (inputs, outputs), = tc.data_sets
        cases.append(Case(tc.name, tc.model, [_normalize(x) for x in inputs], [_normalize(y) for y in outputs],
                          tc.rtol, tc.atol))
    return tuple(sorted(cases, key=lambda c: c.name))


def _holds_float(tp: onnx.TypeProto) -> bool:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return tp.tensor_type.elem_type in FLOAT_ELEM_TYPES
    if kind == "sequence_type":
        return _holds_float(tp.sequence_type.elem_type)
    if kind == "optional_type":
        return _holds_float(tp.optional_type.elem_type)
    return False


def is_float_case(case: Case) -> bool:
    """At least one graph output is (or holds) a float16/float32/float64/bfloat16 tensor."""
    return any(_holds_float(o.type) for o in case.model.graph.output)


def feeds_of(case: Case) -> dict:
    """{graph input name: value}: positional inputs bound to the non-initializer graph inputs in order."""
    inits = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    return {n: (np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v)
            for n, v in zip(names, case.inputs)}


# ------------------------------------------------------------------ comparison
def compare(expected: list, actual: list, rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected`` as onnx's backend runner judges it, else the first line why.

    Uses ``Runner.assert_similar_outputs`` itself for every tensor; an empty optional (None) matches only None;
    a sequence matches a sequence of the same length whose tensors match one by one.
    """
    from onnx.backend.test.runner import Runner

    if len(expected) != len(actual):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (ref, out) in enumerate(zip(expected, actual)):
        if ref is None or out is None:
            if ref is not None or out is not None:
                return f"output {i}: {'None' if out is None else type(out).__name__}, expected " \
                       f"{'None' if ref is None else type(ref).__name__}"
            continue
        if isinstance(ref, list):
            # sequences element by element, each as a one-output comparison: the runner's own recursion hands
            # a bare array where it expects a list, and raises on a 0-d tensor inside a sequence
            if not isinstance(out, list):
                return f"output {i}: {type(out).__name__}, expected a sequence"
            if len(out) != len(ref):
                return f"output {i}: sequence of {len(out)}, expected {len(ref)}"
            for j, (r, o) in enumerate(zip(ref, out)):
                why = compare([r], [o], rtol, atol)
                if why is not None:
                    return f"output {i}[{j}]: {why}"
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                Runner.assert_similar_outputs([ref], [out], rtol=rtol, atol=atol)
        except (AssertionError, TypeError, ValueError, AttributeError) as exc:
            return f"output {i}: " + _first_line(exc)
    return None


def _first_line(exc: BaseException, limit: int = 240) -> str:
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__)[:limit]


# ------------------------------------------------------------------ exclusion: plain onnxruntime
def _plain_session_options():
    """Default SessionOptions; when our engine enabled onnxruntime's global thread pool in this process,
    onnxruntime refuses per-session pools, so that one flag follows (it does not change results)."""
    import onnxruntime as ort

    from toolkit.ort import ort_env

    so = ort.SessionOptions()
    if ort_env._STATE.get("global"):
        so.use_per_session_threads = False
    so.log_severity_level = 4
    return so


def run_plain_ort(case: Case) -> tuple[list | None, str, str]:
    """(outputs, kind, reason) from a whole-model onnxruntime session with default options.

    kind is ``""`` when it ran, else ``ort_load`` / ``ort_run``.
    """
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), _plain_session_options(),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - any refusal is a reason
        return None, "ort_load", "onnxruntime cannot load the model: " + _first_line(exc)
    try:
        outs = sess.run(None, feeds_of(case))
    except Exception as exc:  # noqa: BLE001
        return None, "ort_run", "onnxruntime cannot run the model: " + _first_line(exc)
    return list(outs), "", ""


def exclusion(case: Case) -> tuple[str, str]:
    """(kind, reason) if plain onnxruntime cannot load/run the case or does not match its expected outputs,
    else ("", "")."""
    outs, kind, reason = run_plain_ort(case)
    if outs is None:
        return kind, reason
    why = compare(case.outputs, outs, case.rtol, case.atol)
    if why is not None:
        return "ort_mismatch", "plain onnxruntime does not match the expected outputs: " + why
    return "", ""


# ------------------------------------------------------------------ running through the engine
def run_engine(model: onnx.ModelProto, feeds: dict) -> list:
    """Outputs (graph output order) of the model compiled and run by NpuRuntime in force_fp32 mode."""
    from toolkit.config.schema import Config
    from toolkit.engine import simulate

    res = simulate(model, feeds, Config(precision_mode="force_fp32"))
    return [res.outputs[o.name] for o in model.graph.output]


def _engine_failure_kind(exc: BaseException) -> str:
    """Short class of an engine failure: where it failed (compile/build/run) and the exception type."""
    import traceback

    frames = [(f.filename, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    where = "compile"
    if any(fn.endswith("runtime/kernels.py") for fn, _ in frames):
        where = "build"
    if any(fn.endswith("runtime/npu.py") and name == "run" for fn, name in frames):
        where = "run"
    return f"{where}:{type(exc).__name__}"


def evaluate(case: Case, check_exclusion: bool = True) -> Result:
    """Exclusion check, then the engine run and the comparison with the case's own rtol/atol."""
    t0 = time.perf_counter()
    flt = is_float_case(case)
    if check_exclusion:
        kind, reason = exclusion(case)
        if kind:
            return Result(case.name, flt, "excluded", kind, reason, time.perf_counter() - t0)
    try:
        outs = run_engine(case.model, feeds_of(case))
    except Exception as exc:  # noqa: BLE001 - a case's failure is data
        return Result(case.name, flt, "fail", _engine_failure_kind(exc), _first_line(exc),
                      time.perf_counter() - t0)
    why = compare(case.outputs, outs, case.rtol, case.atol)
    if why is not None:
        return Result(case.name, flt, "fail", "mismatch", why, time.perf_counter() - t0)
    return Result(case.name, flt, "pass", "", "", time.perf_counter() - t0)


# ------------------------------------------------------------------ summaries and CSV
def pass_rate(results: list[Result]) -> tuple[float, int, int]:
    """(rate, passed, counted) over non-excluded float cases."""
    counted = [r for r in results if r.float_case and r.status != "excluded"]
    passed = sum(r.status == "pass" for r in counted)
    return (passed / len(counted) if counted else 1.0), passed, len(counted)


def summary(results: list[Result]) -> str:
    """Counts for humans: total, float, excluded by kind, failing by kind, the rate."""
    from collections import Counter

    rate, passed, counted = pass_rate(results)
    exc = Counter(r.kind for r in results if r.status == "excluded")
    fail = Counter(r.kind for r in results if r.status == "fail" and r.float_case)
    lines = [f"cases {len(results)}; float {sum(r.float_case for r in results)}; "
             f"excluded {sum(exc.values())} {dict(exc)}",
             f"float pass rate {rate:.4f} ({passed}/{counted}); float failures by kind {dict(fail)}",
             f"non-float: {sum(r.status == 'pass' for r in results if not r.float_case)} pass, "
             f"{sum(r.status == 'fail' for r in results if not r.float_case)} fail"]
    return "\n".join(lines)


def write_csvs(results: list[Result], out_dir: Path = REPORT_DIR, prefix: str = "") -> tuple[Path, Path]:
    """results.csv (case, float, status, kind, reason) and excluded.csv (case, float, kind, reason)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    res_p, exc_p = out_dir / f"{prefix}results.csv", out_dir / f"{prefix}excluded.csv"
    with open(res_p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["case", "float", "status", "kind", "reason"])
        for r in results:
            w.writerow([r.case, int(r.float_case), r.status, r.kind, r.reason])
    with open(exc_p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["case", "float", "kind", "reason"])
        for r in results:
            if r.status == "excluded":
                w.writerow([r.case, int(r.float_case), r.kind, r.reason])
    return res_p, exc_p


# ------------------------------------------------------------------ light model zoo
@dataclass
class LightModel:
    name: str
    path: Path
    expected: list[Path]
    rtol: float
    atol: float


def light_models() -> dict[str, LightModel]:
    """The light zoo with the runner's tolerances (onnx.backend.test.case.model.collect_testcases)."""
    from onnx.backend.test.case.model import collect_testcases

    out = {}
    for tc in collect_testcases():
        if tc.kind != "real" or not tc.url or "/light/" not in tc.url:
            continue
        path = LIGHT_DIR / Path(tc.url).name
        prefix = os.path.splitext(str(path))[0]
        expected = sorted(Path(p) for p in glob.glob(prefix + "_output_*.pb"))
        out[tc.model_name] = LightModel(tc.model_name, path, expected, tc.rtol, tc.atol)
    return out


def light_case(lm: LightModel) -> Case:
    """Inputs as onnx's runner makes them (generate_dummy_data(seed=0, random=False) per non-initializer
    input), expected outputs read from the stored ``_output_<i>.pb`` files as the runner reads them."""
    from onnx.backend.test.runner import Runner

    model = onnx.load(str(lm.path))
    inits = {i.name for i in model.graph.initializer}
    inputs = [Runner.generate_dummy_data(x, seed=0, name=lm.name, random=False)
              for x in model.graph.input if x.name not in inits]
    outputs = []
    for i, p in enumerate(lm.expected):
        t = onnx.TensorProto()
        t.ParseFromString(p.read_bytes())
        assert model.graph.output[i].type.HasField("tensor_type")
        outputs.append(numpy_helper.to_array(t))
    return Case(lm.name, model, inputs, outputs, lm.rtol, lm.atol)
