"""The signoff command (toolkit/commands/signoff.py), in process: a policy that passes, one that fails on each
criterion kind (the failure names the criterion and its evidence), the JUnit XML read back with junitparser,
latency criteria, '*' and named output limits, and signoff over a folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.dataset.helpers import FP16, tiny_model, write_inputs
from toolkit.config.schema import Config
from toolkit.signoff.criteria import arena_conflicts, check_memory
from toolkit.signoff.policy import policy_from_dict
from tests.signoff.helpers import STRICT, LENIENT, save_checked, conv_relu, npz, write_utf8, signoff_fp16, policy_text, conv_runs, C08
from tests.signoff.helpers import case, PASSING, write, signoff, SEQ


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.slow
def test_signoff_over_a_folder_matches_the_in_memory_signoff(case, tmp_path):
    from toolkit import api
    from toolkit.signoff.policy import load_policy
    from toolkit.signoff.run import run_signoff

    pol = tmp_path / "p.toml"
    pol.write_text('[policy]\nname = "tiny"\n[outputs."*"]\nCosineSimilarity = 0.9999\n[layers]\nmax_abnormal = 0\n'
                   'min_cosine = 0.999\n[fp16_overflow]\n[memory]\nmax_arena_bytes = 10_000_000\n', encoding="utf-8")
    cfg = Config.from_dict(FP16)
    streamed = api.signoff_command(str(case["model"]), str(pol), cfg, inputs=str(case["inputs"]),
                                   out=str(tmp_path / "so"), html=False, percentiles="50")
    held = run_signoff(str(case["model"]), load_policy(str(pol)), cfg, inputs=str(case["inputs"]))
    assert [(r.name, r.passed, r.message) for r in streamed["run"].results] == \
           [(r.name, r.passed, r.message) for r in held.results]
    assert streamed["run"].summary["counts"]["input_sets"] == len(case["xs"])
    assert {"dataset.csv", "inputs.csv", "junit.xml", "summary.json", "result.csv"} <= \
           {p.name for p in (tmp_path / "so").iterdir()}


def mixed(path: Path) -> Path:
    """x [2,16] -> MatMul -> y float32 [2,8] -> ArgMax -> idx int64 [2]: one float and one integer output."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
                           helper.make_node("ArgMax", ["y"], ["idx"], name="am", axis=-1, keepdims=0)], "mix",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
                           helper.make_tensor_value_info("idx", TensorProto.INT64, [2])], [w])
    return save_checked(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("star,named", [(0.99, LENIENT), (LENIENT, STRICT)])
def test_signoff_star_and_named_make_one_criterion(conv_runs, tmp_path, star, named):
    pol = write_utf8(tmp_path / "both.toml", f'[outputs."*"]\nCosineSimilarity = {star!r}\n'
                                        f'[outputs.y]\nCosineSimilarity = {named!r}\n')
    res = signoff_fp16(conv_runs["model"], pol, conv_runs["inputs"], tmp_path / "out")
    crit = json.loads((tmp_path / "out" / "summary.json").read_text())["criteria"]
    assert [c["name"] for c in crit] == ["outputs.y.CosineSimilarity"]
    assert crit[0]["evidence"]["limit"] == named
    worst = crit[0]["evidence"]["worst"]
    assert crit[0]["status"] == ("PASS" if worst >= named else "FAIL")
    assert res["summary"]  # the command completed


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_star_applies_each_metric_to_outputs_of_its_kind(tmp_path):
    model = mixed(tmp_path / "mix.onnx")
    x = np.random.default_rng(4).standard_normal((2, 16)).astype(np.float32)
    inputs = npz(tmp_path / "in.npz", x=x)
    pol = write_utf8(tmp_path / "p.toml", '[outputs."*"]\nCosineSimilarity = 0.9\nExactMatchRate = 0.0\n')
    signoff_fp16(model, pol, inputs, tmp_path / "out", cfg={"precision_mode": "force_fp32"})
    crit = {c["name"]: c for c in json.loads((tmp_path / "out" / "summary.json").read_text())["criteria"]}
    assert set(crit) == {"outputs.y.CosineSimilarity", "outputs.idx.ExactMatchRate"}
    # force_fp32 runs the graph in FP32; the top two logits of every row are far apart (checked with numpy), so
    # no FP32 summation order can flip the argmax: every index matches
    top2 = np.sort(x.astype(np.float64) @ numpy_helper.to_array(onnx.load(model).graph.initializer[0]), axis=-1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0] > 1e-3).all()
    assert crit["outputs.idx.ExactMatchRate"]["evidence"]["worst"] == 1.0
    assert all(c["status"] == "PASS" for c in crit.values())


junitparser = pytest.importorskip("junitparser")

KEEP = {"precision_mode": "force_fp16", "keep_dtype": ["exp", "add_one", "log"]}
NO_KEEP = {"precision_mode": "force_fp16"}


def always_fails(golden, npu, model):
    """A task check (module:function) that never passes."""
    return {"name": "always_fails", "passed": False, "value": 0, "detail": "planted failing task"}


def always_passes(golden, npu, model):
    return {"name": "always_passes", "passed": True, "value": 1, "detail": "ok"}


def junit_cases(path: Path) -> dict:
    xml = junitparser.JUnitXml.fromfile(str(path))
    cases = {}
    for suite in xml:
        for case in suite:
            cases[case.name] = case
    return cases


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_passing_policy_writes_summary_and_junit(tmp_path):
    from toolkit import api

    pol = write(tmp_path, "p.toml", PASSING)
    res = api.signoff_command(str(C08 / "model.onnx"), str(pol), Config.from_dict(KEEP), inputs=str(C08),
                              out=str(tmp_path / "o"))
    assert res["verdict"] == "PASS", res["summary"]
    out = tmp_path / "o"
    for f in ("signoff.html", "summary.json", "junit.xml", "result.csv", "plan.json", "fusion_result.json"):
        assert (out / f).is_file(), f
    s = json.loads((out / "summary.json").read_text())
    assert s["policy"]["layers"]["max_abnormal"] == 0 and len(s["policy_sha256"]) == 64
    assert len(s["model_sha256"]) == 64 and len(s["config_sha256"]["resolved"]) == 64
    assert s["environment"]["packages"]["onnxruntime"] and s["counts"]["failed"] == 0
    cases = junit_cases(out / "junit.xml")
    assert set(cases) == {c["name"] for c in s["criteria"]}
    assert all(c.is_passed for c in cases.values())
    assert "latency.device_ms" in cases and "simulated device time" in (cases["latency.device_ms"].system_out or "")
    assert "latency.throughput" in cases
    assert "<script" in (out / "signoff.html").read_text()[:10_000_000]


FAILING = {
    "outputs": ('[outputs.y]\nRelativeEuclideanDistance = 1e-9\n', NO_KEEP, "outputs.y.RelativeEuclideanDistance",
                "with FP16 overflow"),
    "layers_abnormal": ("[layers]\nmax_abnormal = 0\n", NO_KEEP, "layers.max_abnormal", "e, e1, y"),
    "layers_cosine": ("[layers]\nmin_cosine = 1.0\nignore = ['exp']\n", NO_KEEP, "layers.min_cosine", "lowest CosineSimilarity"),
    "tasks": ("[tasks]\nrequired_pass_rate = 1.0\nmetrics = ['tests.commands.test_signoff:always_fails']\n", KEEP,
              "tasks.pass_rate", "0/1 input set(s) pass"),
    "fp16_overflow": ("[fp16_overflow]\nallow = ['y']\n", NO_KEEP, "fp16_overflow", "e, e1"),
    "memory_budget": ("[memory]\nmax_arena_bytes = 16\n", KEEP, "memory.peak_arena_bytes", "(budget 16)"),
    "latency": ("[latency]\nmax_ms = 1e-9\n", KEEP, "latency.device_ms", "budget 1e-09 ms"),
    "throughput": ("[latency]\nmin_throughput = 1e12\ndevice = 'ascend910'\n", KEEP, "latency.throughput",
                   "at least 1e+12; ascend910"),
    "latency_host": ("[latency]\nmax_ms = 1e-9\nsource = 'host'\nstatistic = 'max'\n", KEEP, "latency",
                     "host-measured"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("kind", sorted(FAILING))
def test_failing_policy_names_criterion_and_evidence(tmp_path, kind):
    text, cfg, crit, evidence = FAILING[kind]
    res = signoff(tmp_path, text, cfg)
    assert res["verdict"] == "FAIL"
    cases = junit_cases(res["out"] / "junit.xml")
    failed = {n: c for n, c in cases.items() if not c.is_passed}
    assert crit in failed, (crit, list(cases))
    msg = failed[crit].result[0].message
    assert crit in msg and evidence in msg, msg
    s = json.loads((res["out"] / "summary.json").read_text())
    assert any(crit in r for r in s["reasons"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_task_pass_rate_passes_with_passing_check(tmp_path):
    res = signoff(tmp_path, "[tasks]\nrequired_pass_rate = 1.0\nmetrics = ['tests.commands.test_signoff:always_passes']\n", KEEP)
    assert res["verdict"] == "PASS", res["summary"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_placement_pass_and_fail(tmp_path):
    ok = signoff(tmp_path, "[placement]\nallowed_cpu_ops = ['NonMaxSuppression']\n", {}, model="detector_head", out="a")
    assert ok["verdict"] == "PASS", ok["summary"]
    bad = signoff(tmp_path, "[placement]\nallowed_cpu_ops = ['Loop']\n", {}, model="detector_head", out="b")
    assert bad["verdict"] == "FAIL"
    r = next(r for r in bad["run"].results if r.name == "placement.cpu_ops")
    assert "nms (NonMaxSuppression)" in r.message and r.evidence["not_allowed"] == ["nms"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_memory_conflict_is_detected(tmp_path):
    res = signoff(tmp_path, "[memory]\nallow_conflicts = false\n", {"precision_mode": "force_fp32", "memory_reuse": "off"})
    assert res["verdict"] == "PASS", res["summary"]
    ev = res["run"].evidence
    arena = [t for t in ev.plan.tensors.values() if t.storage == "arena"]
    assert not arena_conflicts(ev.plan)
    arena[1].offset = arena[0].offset  # plant: two tensors live at once at the same bytes
    arena[1].first, arena[1].last = min(arena[0].first, arena[1].first), max(arena[0].last, arena[1].last)
    arena[1].alias_of = None
    (r,) = check_memory({"allow_conflicts": False}, ev)
    assert not r.passed and r.name == "memory.no_conflicts" and arena[0].name in r.message
    assert [arena[0].name, arena[1].name] in r.evidence["conflicts"] or [arena[1].name, arena[0].name] in r.evidence["conflicts"]


# ------------------------------------------------------------------ the worked example (docs/signoff-example.md)
DOC = Path(__file__).resolve().parents[2] / "docs" / "signoff-example.md"


def doc_policy(index: int) -> str:
    import re

    return re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[index]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.slow
def test_ppocr_rec_signoff_over_20_rendered_lines(tmp_path):
    """The worked-example policy passes on PP-OCRv4 rec over 20 rendered lines, and fails naming `latency`
    (only) when the policy asks for a latency the run cannot meet."""
    import numpy as np

    from toolkit.inputs import realistic_inputs

    inputs = tmp_path / "rec"
    inputs.mkdir()
    for i in range(20):
        np.savez(inputs / f"{i:02d}.npz", **realistic_inputs("ppocr_rec", text=f"invoice {i:03d} total {17 * i + 3}.50"))
    ok = signoff(tmp_path, doc_policy(0), {}, model="ppocr_rec", inputs=str(inputs), out="ok")
    assert ok["verdict"] == "PASS", ok["summary"]
    assert ok["run"].summary["counts"]["input_sets"] == 20
    tight = doc_policy(0).replace("max_ms = 5.0", "max_ms = 0.001")
    bad = signoff(tmp_path, tight, {}, model="ppocr_rec", inputs=str(inputs), out="bad")
    failed = [r.name for r in bad["run"].results if not r.passed]
    assert failed == ["latency.device_ms"], bad["summary"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_latency_criterion_reports_the_profile_schedule(tmp_path):
    """The [latency] numbers are those of `npuscope profile` for the same plan and device: one request's
    simulated makespan, and the pipelined rate, which cannot exceed 1 / (latency of the NPU stream's work)."""
    from toolkit.engine import compile_model
    from toolkit.ir.load import load_model
    from toolkit.profile.cost import kernel_costs
    from toolkit.profile.device import load_device

    res = signoff(tmp_path, "[latency]\nmax_ms = 1000\nmin_throughput = 1\ndevice = 'ascend910'\n", KEEP)
    by = {r.name: r for r in res["run"].results}
    lat, thr = by["latency.device_ms"].evidence, by["latency.throughput"].evidence
    compiled = compile_model(load_model(C08 / "model.onnx"), Config.from_dict(KEEP),
                             input_shapes={k: v.shape for k, v in np.load(C08 / "inputs.npz").items()})
    costs = kernel_costs(compiled.plan, compiled.model, load_device("ascend910"))
    npu_us = costs.loc[costs["Stream"] == "npu", "DurationUs"].sum()
    assert lat["latency_ms"] * 1e3 >= npu_us * (1 - 1e-9)  # the NPU stream's work is serial within one request
    assert thr["throughput_rps"] <= 1e6 / npu_us * (1 + 1e-9)
    assert lat["device"] == "ascend910" and lat["time_kind"] == "simulated"


def _seq_inputs(folder: Path, names: dict[str, int]) -> dict[str, np.ndarray]:
    """One .npz per name with x of shape (1, seq, 64); returns {name: x}."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    out = {}
    for name, seq in names.items():
        out[name] = rng.standard_normal((1, seq, 64)).astype(np.float32)
        np.savez(folder / name, x=out[name])
    return out


def _shape_timing(seq: int) -> dict:
    """The schedule of transformer_seq compiled for x (1, seq, 64) alone, on the default device."""
    from toolkit.engine import compile_model
    from toolkit.ir.load import load_model
    from toolkit.profile.budget import device_timing
    from toolkit.source import resolve_model

    compiled = compile_model(load_model(resolve_model(SEQ).path), Config(), input_shapes={"x": [1, seq, 64]})
    return device_timing(compiled)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("names", [{"a_short.npz": 1, "b_long.npz": 1024}, {"a_long.npz": 1024, "b_short.npz": 1}],
                         ids=["short-first", "long-first"])
@pytest.mark.parametrize("path", ["dataset", "in-memory"])
def test_latency_is_judged_on_the_worst_input_shape_whatever_the_file_order(tmp_path, names, path):
    """The defect: only the first input set's plan was simulated, so the verdict depended on file names."""
    from toolkit.signoff.run import run_signoff

    _seq_inputs(tmp_path / "in", names)
    short, long_ = _shape_timing(1), _shape_timing(1024)
    assert long_["latency_ms"] > short["latency_ms"] and long_["throughput_rps"] < short["throughput_rps"]
    mid_ms = (short["latency_ms"] + long_["latency_ms"]) / 2
    mid_rps = (short["throughput_rps"] + long_["throughput_rps"]) / 2
    text = f"[latency]\nmax_ms = {mid_ms!r}\nmin_throughput = {mid_rps!r}\n"
    if path == "dataset":
        res = signoff(tmp_path, text, {}, model=SEQ, inputs=str(tmp_path / "in"))["run"]
    else:
        res = run_signoff(SEQ, policy_from_dict(tomllib_loads(text)), Config(), inputs=str(tmp_path / "in"))
    by = {r.name: r for r in res.results}
    long_name = next(n for n, seq in names.items() if seq == 1024)
    for name, key, want in (("latency.device_ms", "value_ms", long_["latency_ms"]),
                            ("latency.throughput", "value_rps", long_["throughput_rps"])):
        r = by[name]
        assert not r.passed, r.message
        assert r.evidence[key] == pytest.approx(want, rel=1e-9)
        assert r.evidence["shape"] == "x 1x1024x64" and r.evidence["input"] == long_name
        assert "x 1x1024x64" in r.message and long_name in r.message and "worst of 2 input shapes" in r.message
        per = {x["shape"]: x for x in r.evidence["per_shape"]}
        assert per["x 1x1x64"]["latency_ms"] == pytest.approx(short["latency_ms"], rel=1e-9)
        assert per["x 1x1x64"]["inputs"] == [n for n, seq in names.items() if seq == 1]


def tomllib_loads(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("names", [{"a_short.npz": 1, "b_long.npz": 512}, {"a_long.npz": 512, "b_short.npz": 1}],
                         ids=["short-first", "long-first"])
@pytest.mark.parametrize("path", ["dataset", "in-memory"])
def test_memory_budget_is_judged_on_the_largest_arena_whatever_the_file_order(tmp_path, names, path):
    """[memory] max_arena_bytes between the arenas of the two input shapes: it fails on the longer one, named,
    whichever file comes first (only the first input set's plan had been checked)."""
    from toolkit.engine import compile_model
    from toolkit.ir.load import load_model
    from toolkit.signoff.run import run_signoff
    from toolkit.source import resolve_model

    _seq_inputs(tmp_path / "in", names)
    model = load_model(resolve_model(SEQ).path)
    short, long_ = (compile_model(model, Config(), input_shapes={"x": [1, n, 64]}).plan.arena_bytes for n in (1, 512))
    assert long_ > short
    text = f"[memory]\nmax_arena_bytes = {(short + long_) // 2}\n"
    if path == "dataset":
        res = signoff(tmp_path, text, {}, model=SEQ, inputs=str(tmp_path / "in"))["run"]
    else:
        res = run_signoff(SEQ, policy_from_dict(tomllib_loads(text)), Config(), inputs=str(tmp_path / "in"))
    r = next(r for r in res.results if r.name == "memory.peak_arena_bytes")
    long_name = next(n for n, seq in names.items() if seq == 512)
    assert not r.passed and r.evidence["arena_bytes"] == long_
    assert f"arena {long_} bytes at x 1x512x64 (input set '{long_name}'; worst of 2 input shapes)" in r.message
    assert sorted(x["arena_bytes"] for x in r.evidence["per_shape"]) == [short, long_]


def test_latency_with_one_shape_passes_between_the_two_budgets(tmp_path):
    _seq_inputs(tmp_path / "in", {"a.npz": 1, "b.npz": 1})
    short = _shape_timing(1)
    res = signoff(tmp_path, f"[latency]\nmax_ms = {short['latency_ms'] * 1.01!r}\n", {}, model=SEQ,
                  inputs=str(tmp_path / "in"))
    (r,) = res["run"].results
    assert r.passed and r.evidence["value_ms"] == pytest.approx(short["latency_ms"], rel=1e-9)
    assert [x["input_sets"] for x in r.evidence["per_shape"]] == [2] and "worst of" not in r.message


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_resnet_inputs_that_overflow_fp16_fail_min_cosine(tmp_path):
    """The tester's case: x * 1e6 makes every FP16 tensor non-finite; only the graph input compares (cosine 1)."""
    from toolkit.inputs import input_specs
    from toolkit.ir.load import load_model
    from toolkit.source import resolve_model

    spec = input_specs(load_model(resolve_model("resnet_small").path))[0]
    x = np.random.default_rng(0).standard_normal(spec.shape).astype(np.float32)
    np.savez(tmp_path / "big.npz", **{spec.name: x * 1e6})
    np.savez(tmp_path / "normal.npz", **{spec.name: x})
    bad = signoff(tmp_path, "[layers]\nmin_cosine = 0.99\n", {}, model="resnet_small", inputs=str(tmp_path / "big.npz"),
                  out="big")
    (r,) = bad["run"].results
    assert not r.passed and r.evidence["not_comparable"], r.message
    assert "logits" in [x["tensor"] for x in r.evidence["not_comparable"]]
    ok = signoff(tmp_path, "[layers]\nmin_cosine = 0.99\n", {}, model="resnet_small",
                 inputs=str(tmp_path / "normal.npz"), out="ok")
    assert ok["verdict"] == "PASS", ok["summary"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_policy_names_are_checked_before_a_dataset_runs(tmp_path):
    """A policy naming an output the model lacks is refused (exit 2) before any input of a folder runs: no
    results folder is left behind."""
    from toolkit.core.errors import ConfigError

    folder = tmp_path / "sets"
    folder.mkdir()
    for i in range(2):
        np.savez(folder / f"{i}.npz", **dict(np.load(C08 / "inputs.npz")))
    with pytest.raises(ConfigError, match="nosuchout"):
        signoff(tmp_path, "[outputs.nosuchout]\nCosineSimilarity = 0.99\n", KEEP, model=str(C08 / "model.onnx"),
                inputs=str(folder), out="o")
    assert not (tmp_path / "o").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("first_html,second_html", [(True, False), (False, True)])
def test_a_resumed_dataset_signoff_leaves_no_report_file_of_the_earlier_run(tmp_path, first_html, second_html):
    """Kind: a dataset signoff re-run into the same --out (resumed) with a report of other files (--no-html after
    HTML, or HTML after none): the folder holds the second report's files only, next to the store and what the
    user put there (untouched)."""
    from toolkit import api

    model = tiny_model(tmp_path / "m.onnx")
    write_inputs(tmp_path / "in", 2)
    pol = tmp_path / "p.toml"
    pol.write_text('[policy]\nname = "tiny"\n[outputs."*"]\nCosineSimilarity = 0.5\n', encoding="utf-8")
    out = tmp_path / "so"

    def run(html):
        return api.signoff_command(str(model), str(pol), Config.from_dict(FP16), inputs=str(tmp_path / "in"),
                                   out=str(out), html=html)

    run(first_html)
    assert (out / "signoff.html").exists() == first_html
    (out / "mine.txt").write_text("mine")
    res = run(second_html)
    assert res["run"].summary["dataset"]["resumed"]
    assert (out / "signoff.html").exists() == second_html
    written = set(json.loads((out / "summary.json").read_text())["artifacts"].values())
    assert ("signoff.html" in written) == second_html
    store = {"manifest.json", "results", "log.jsonl"}
    beside_the_page = {"plotly.min.js"} if second_html else set()
    assert {p.name for p in out.iterdir()} == \
        written | store | beside_the_page | {"mine.txt", ".npuscope-report.json"}
    assert (out / "mine.txt").read_text() == "mine"
