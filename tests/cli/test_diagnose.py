"""``npuscope diagnose`` in a subprocess: the bundled sample end to end, the one-line error contract, the
reproducer of an FP16-storage origin, accumulation overflow advice, findings the console does not list, the
report's environment section, and a compile error while the reference runs on its thread."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.faultkinds import builders as fk
from tests.graphs import N, layered_model, make_model
from toolkit.compare.subset import layer_of
from toolkit.config.schema import Config
from toolkit.engine import Session, compile_model, shapes_of
from toolkit.tuning.allowance import rounding_depths
from tests.cli.helpers import cli_with_env_extra, _elt_model, _artifact_rows, _size_text, check_artifacts_agree_with_disk
from tests.cli.helpers import PROGRESS, error_lines, assert_one_line_error, has_module, METRIC_COLUMNS, check_result_csv, needs_tables
from tests.cli.helpers import TIMEOUT_S, npuscope, _cli, ws, FP16_MAX, _model
from tests.diagnose.helpers import rows


def test_diagnose_bad_input_same_contract(ws):
    np.savez(ws / "bad.npz", x=np.zeros((1, 3), np.float32))
    proc = npuscope("diagnose", "model.onnx", "--inputs", "bad.npz", "--out", "rep", cwd=ws)
    assert_one_line_error(proc, 2, "bad.npz", "'x'", out=ws / "rep")
    proc = npuscope("diagnose", "nothere.onnx", "--out", "rep", cwd=ws)
    assert_one_line_error(proc, 2, "nothere.onnx", out=ws / "rep")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@needs_tables
def test_diagnose_bundled_sample_end_to_end(tmp_path):
    if not has_module("toolkit.report.html"):
        pytest.skip("toolkit.report.html not written yet: `diagnose` renders HTML")
    proc = npuscope("diagnose", "--out", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = tmp_path / "rep"
    summary = json.loads((rep / "summary.json").read_text())
    assert summary["verdict"] in ("PASS", "WARN")
    assert summary["model_name"] and Path(summary["model"]).is_file()
    df = check_result_csv(rep / "result.csv")
    assert (df["CompareFailReason"].fillna("") == "").sum() >= 2  # something was really compared
    json.loads((rep / "findings.json").read_text())
    html = rep / "index.html"
    assert html.is_file() and html.stat().st_size > 0
    text = html.read_text(encoding="utf-8")
    assert "<html" in text.lower() and summary["verdict"] in text
    assert 'src="http' not in text and "src='http" not in text  # opens offline: no CDN scripts
    assert f"report: {html.resolve()}" in proc.stdout
    assert proc.stdout.splitlines()[0] == f"verdict: {summary['verdict']}"


def softmax_offset(rows=4, dim=64, offset=20000.0, seed=0):
    """x[rows,dim] -> MatMul 'proj' (W ~ N(0,1)*0.5) -> Add 'offset' (+offset) -> Softmax 'sm' -> p."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.5).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="proj"),
                helper.make_node("Add", ["logits", "off"], ["l2"], name="offset"),
                helper.make_node("Softmax", ["l2"], ["p"], name="sm", axis=-1)],
               [("x", [rows, dim])], [("p", [rows, dim])], {"W": w, "off": np.array(offset, np.float32)})
    x = fk.fp16_exact(rng.random((rows, dim), dtype=np.float32))
    return m, {"x": x}


def scale_chain(rows=4, dim=64, factor=30000.0, seed=0, relu=True):
    """x -> MatMul 'mm' -> Mul 'scale' (x factor) -> Div 'unscale' (/ factor) -> [Relu 'relu'] -> MatMul 'mm2' -> y."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((dim, dim)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Mul", ["mm", "big"], ["scaled"], name="scale"),
             helper.make_node("Div", ["scaled", "big2"], ["unscaled"], name="unscale")]
    last = "unscaled"
    if relu:
        nodes.append(helper.make_node("Relu", ["unscaled"], ["r"], name="relu"))
        last = "r"
    nodes.append(helper.make_node("MatMul", [last, "W2"], ["y"], name="mm2"))
    m = _model(nodes, [("x", [rows, dim])], [("y", [rows, dim])],
               {"W": w, "big": np.array(factor, np.float32), "big2": np.array(factor, np.float32), "W2": w.T.copy()})
    x = fk.fp16_exact(rng.standard_normal((rows, dim)).astype(np.float32))
    return m, {"x": x}


def _cli_diag(folder: Path, model, feeds, *args):
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    np.savez(folder / "in.npz", **feeds)
    proc = npuscope("diagnose", "model.onnx", "--inputs", "in.npz", "--out", "r", *args, cwd=folder)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return folder / "r", json.loads((folder / "r" / "summary.json").read_text())


def _run_repro(report: Path):
    repro = report / "repro"
    proc = npuscope("diagnose", "model.onnx", "--inputs", "inputs.npz", "--config", "config.json", "--out",
                    report / "rr", cwd=repro)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads((report / "rr" / "summary.json").read_text())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("factor, args, cast", [
    (30000.0, ["--fusion-level", "0"], True),  # gray Mul follows its input: FP16 only if 'mm' enters as FP16
    (40000.0, ["--fusion-level", "0", "--precision-mode", "force_fp16"], False),  # FP16 anyway: no Cast needed
])
def test_repro_keeps_fp16_storage_of_the_origin_inputs(tmp_path, factor, args, cast):
    model, feeds = scale_chain(factor=factor)
    ref = fk.reference(model, feeds)
    assert np.abs(ref["scaled"]).max() > 65504 > np.abs(ref["mm"]).max()  # precondition: 'scale' overflows FP16
    report, summary = _cli_diag(tmp_path, model, feeds, *args)
    assert summary["verdict"] == "FAIL" and summary["first_divergence"]["node"] == "scale"
    ins = np.load(report / "repro" / "inputs.npz")
    (name,) = ins.files
    sub = onnx.load(report / "repro" / "model.onnx")
    if cast:  # 'mm' enters as FP16, as the full plan stores it
        assert ins[name].dtype == np.float16
        np.testing.assert_array_equal(ins[name], ref["mm"].astype(np.float16))
        assert [n.op_type for n in sub.graph.node] == ["Cast", "Mul"] and sub.graph.node[0].output[0] == "mm"
    else:
        assert name == "mm" and ins[name].dtype == np.float32
        np.testing.assert_array_equal(ins[name], ref["mm"])
        assert [n.op_type for n in sub.graph.node] == ["Mul"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL"
    assert again["first_divergence"]["node"] == "scale" and again["first_divergence"]["kind"] == "fp16_overflow"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_repro_of_a_storage_origin_keeps_the_consumer(tmp_path):
    model, feeds = softmax_offset()
    report, summary = _cli_diag(tmp_path, model, feeds)
    assert summary["first_divergence"]["node"] == "offset"
    sub = onnx.load(report / "repro" / "model.onnx")
    assert [n.name for n in sub.graph.node] == ["proj", "offset", "sm"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL" and again["first_divergence"]["node"] == "offset"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_repro_of_an_origin_reading_the_graph_input(tmp_path):
    """The plain case: the origin reads a graph input (FP32 as declared): no Cast is added."""
    rng = np.random.default_rng(3)
    model = _model([helper.make_node("Mul", ["x", "big"], ["scaled"], name="scale"),
                    helper.make_node("Relu", ["scaled"], ["y"], name="relu")],
                   [("x", [4, 16])], [("y", [4, 16])], {"big": np.array(5e4, np.float32)})
    feeds = {"x": fk.fp16_exact(rng.uniform(0.5, 3.0, (4, 16)).astype(np.float32))}
    assert np.abs(fk.reference(model, feeds)["scaled"]).max() > 65504
    report, summary = _cli_diag(tmp_path, model, feeds, "--precision-mode", "force_fp16")
    assert summary["first_divergence"]["node"] == "scale"
    ins = np.load(report / "repro" / "inputs.npz")
    assert ins.files == ["x"] and ins["x"].dtype == np.float32
    np.testing.assert_array_equal(ins["x"], feeds["x"])
    assert [n.op_type for n in onnx.load(report / "repro" / "model.onnx").graph.node] == ["Mul"]
    again = _run_repro(report)
    assert again["verdict"] == "FAIL" and again["first_divergence"]["node"] == "scale"


ROWS, COLS = 4, 4096


def _reducemean(tmp_path: Path):
    x = np.random.default_rng(0).uniform(0, 100, (ROWS, COLS)).astype(np.float32)
    m = _model([helper.make_node("ReduceMean", ["x"], ["y"], name="rm", axes=[1], keepdims=1)],
               [("x", [ROWS, COLS])], [("y", [ROWS, 1])])
    onnx.save(m, tmp_path / "rm.onnx")
    np.savez(tmp_path / "rm.npz", x=x)
    return x


def test_diagnose_names_the_accumulation_and_recommends_high_precision(tmp_path):
    x = _reducemean(tmp_path)
    r = _cli("diagnose", str(tmp_path / "rm.onnx"), "--inputs", str(tmp_path / "rm.npz"),
             "--precision-mode", "force_fp16", "--out", str(tmp_path / "d"))
    assert r.returncode == 1, r.stderr
    assert "RuntimeWarning" not in r.stderr and "Warning" not in r.stderr, r.stderr
    x64 = x.astype(np.float64)
    assert np.abs(x64.mean(1)).max() < FP16_MAX < x64.sum(1).max()  # the mean fits, the sum does not
    f = next(f for f in json.loads((tmp_path / "d" / "findings.json").read_text()) if f["kind"] == "fp16_overflow")
    acc = f["evidence"]["accumulation"]
    assert acc["op_type"] == "ReduceMean" and acc["implmode"] == "high_performance"
    assert acc["partial_sum_absmax"] == pytest.approx(x64.sum(1).max(), rel=1e-9)
    rec = f["recommendation"]
    assert "accumulation" in rec and 'op_select_implmode="high_precision"' in rec
    assert 'optypelist_for_implmode=["ReduceMean"]' in rec
    assert rec.index("high_precision") < rec.index("keep_dtype")
    assert "FP16 accumulation overflows" in r.stdout
    # the advice works: high_precision keeps the kernel FP16 (FP32 accumulation, output rounded to FP16)
    cfg = tmp_path / "hp.json"
    cfg.write_text(json.dumps({"precision_mode": "force_fp16", "op_select_implmode": "high_precision",
                               "optypelist_for_implmode": ["ReduceMean"]}))
    r = _cli("run", str(tmp_path / "rm.onnx"), "--inputs", str(tmp_path / "rm.npz"), "--config", str(cfg),
             "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npz")["y"].ravel()
    want = x.astype(np.float16).astype(np.float64).mean(1)  # FP16 inputs, exact sum, one rounding
    np.testing.assert_allclose(y, want.astype(np.float16).astype(np.float64), rtol=0, atol=0)


def test_overflow_of_the_value_itself_keeps_the_keep_dtype_advice(tmp_path):
    """A Mul whose product passes 65504 is not an accumulation overflow: no implmode advice."""
    x = np.random.default_rng(4).uniform(1, 2, (2, 8)).astype(np.float32)
    assert (x.astype(np.float64) * 5e4).max() > FP16_MAX
    m = _model([helper.make_node("Mul", ["x", "s"], ["y"], name="mul")], [("x", [2, 8])], [("y", [2, 8])], {"s": 5e4})
    onnx.save(m, tmp_path / "mul.onnx")
    np.savez(tmp_path / "mul.npz", x=x)
    r = _cli("diagnose", str(tmp_path / "mul.onnx"), "--inputs", str(tmp_path / "mul.npz"), "--precision-mode",
             "force_fp16", "--out", str(tmp_path / "d"))
    assert r.returncode == 1 and "RuntimeWarning" not in r.stderr, r.stderr
    f = next(f for f in json.loads((tmp_path / "d" / "findings.json").read_text()) if f["kind"] == "fp16_overflow")
    assert "accumulation" not in f["evidence"] and "high_precision" not in f["recommendation"]
    assert "keep 'mul' in FP32 (keep_dtype)" in f["recommendation"]


def _f16(v) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(v, np.float32).astype(np.float16).astype(np.float64)


def test_console_says_how_many_findings_it_did_not_list(tmp_path):
    nodes, inits, prev = [], {}, "x"
    for i in range(7):  # seven constants that overflow FP16: seven error findings
        nodes.append(helper.make_node("Mul", [prev, f"c{i}"], [f"t{i}"], name=f"mul{i}"))
        nodes.append(helper.make_node("Mul", [f"t{i}", f"r{i}"], [f"u{i}"], name=f"back{i}"))
        inits[f"c{i}"], inits[f"r{i}"], prev = 1e5, 1e-5, f"u{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    onnx.save(_model(nodes, [("x", [2, 8])], [("y", [2, 8])], inits), tmp_path / "c.onnx")
    r = _cli("diagnose", str(tmp_path / "c.onnx"), "--precision-mode", "force_fp16", "--out", str(tmp_path / "d"))
    n = len(json.loads((tmp_path / "d" / "findings.json").read_text()))
    assert n > 5
    assert f"({n - 5} more findings in findings.json)" in r.stdout, r.stdout


@pytest.mark.slow
def test_ppocr_rec_verdict_has_no_constants_reason_for_a_few_denormals(tmp_path):
    from toolkit.zoo import fetch

    path = fetch("ppocr_rec")
    m = onnx.load(str(path))
    flushed = []
    tensors = list(m.graph.initializer) + [a.t for n in m.graph.node if n.op_type == "Constant"
                                           for a in n.attribute if a.name == "value"]  # weights are Constants
    for t in tensors:
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and a.size > 16:
            part = int(((a != 0) & (_f16(a) == 0)).sum())
            if 0 < part < np.count_nonzero(a):
                flushed.append((t.name, part, a.size))
    assert any(part <= 2 and size > 10000 for _, part, size in flushed)  # e.g. 1 of 57600 values
    assert flushed  # the premise: some weights hold a few values FP16 flushes to zero
    r = _cli("diagnose", "ppocr_rec", "--out", str(tmp_path / "d"))
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert not any("constants" in reason for reason in summary["reasons"]), summary["reasons"]
    kinds = [f["kind"] for f in json.loads((tmp_path / "d" / "findings.json").read_text())]
    assert "fp16_constant" not in kinds
    assert r.returncode in (0, 1)


def _text(path: Path) -> str:
    s = re.sub(r"<script.*?</script>", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", s)))


@pytest.mark.slow
def test_diagnose_report_environment_cache_and_artifacts(tmp_path):
    model, inputs = _elt_model(tmp_path)
    cache = tmp_path / "cache"
    env = {"NPUSCOPE_COMPILE_CACHE": str(cache), "NPUSCOPE_COMPILE_CACHE_MAX_BYTES": "100000000",
           "NPUSCOPE_COMPILE_CACHE_MODE": "enable"}
    p = cli_with_env_extra("diagnose", str(model), "--inputs", str(inputs), "--precision-mode", "force_fp16", "--out", "d",
            cwd=tmp_path, env_extra=env)
    assert p.returncode == 1 and "verdict: FAIL" in p.stdout, p.stderr[-2000:]  # FP16 storage ruins 's
    folder = tmp_path / "d"
    check_artifacts_agree_with_disk(folder)
    text = _text(folder / "index.html")
    envsec = text[text.index("Environment variables"):text.index("Configuration")]
    assert f"NPUSCOPE_COMPILE_CACHE {cache}" in envsec and "NPUSCOPE_COMPILE_CACHE_MAX_BYTES 100000000" in envsec
    assert "none of the relevant variables set" not in text
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["config"]["op_compiler_cache_dir"] == ""  # the config as given ...
    assert summary["compile_cache"]["dir"] == str(cache)  # ... and the folder used, next to it
    assert summary["compile_cache"]["max_bytes"] == 100000000
    assert summary["environment"]["env"]["NPUSCOPE_COMPILE_CACHE"] == str(cache)
    assert cache.is_dir() and any(cache.rglob("*"))  # the folder named is the one that was written
    assert f"Compile cache used mode enable dir {cache}" in text


SCRIPT = textwrap.dedent("""
    import sys, time
    import toolkit.diagnose as D
    from toolkit.core.errors import ModelError
    from toolkit.ort import reference

    slow_run = reference.ReferenceRunner.run
    def run(self, feeds):
        time.sleep(1.0)  # still running when the compile fails
        return slow_run(self, feeds)
    reference.ReferenceRunner.run = run

    def failing_compile(*a, **k):
        raise ModelError("planted compile failure for the test; nothing to fix")
    D.Session = lambda *a, **k: failing_compile()
    from toolkit.cli import main
    sys.argv = ["npuscope", "diagnose", sys.argv[1], "--out", sys.argv[2]]
    main()
""")


@pytest.mark.parametrize("model", ["resnet_small", "transformer_block"])
def test_compile_error_while_the_reference_runs_exits_cleanly(tmp_path, model):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, model, str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-800:])
    assert "planted compile failure" in proc.stderr
    assert "terminate called" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # no partial report left behind


@pytest.mark.parametrize("eps", [1e-12, 1e-9])
def test_diagnose_writes_its_verified_fix_and_compile_and_diagnose_accept_it(tmp_path, eps):
    b = fk.normalize_eps(eps=eps)
    mp, ip = b.save(tmp_path)
    p = npuscope("diagnose", str(mp), "--inputs", str(ip), "--precision-mode", "force_fp16", "--out", "d",
                 cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "verified fix: keeping" in p.stdout
    keep = (tmp_path / "d" / "keep_dtype.txt").read_text().split()
    assert sorted(keep) == ["add_eps", "normalize"]
    cfg = json.loads((tmp_path / "d" / "fixed_config.json").read_text())
    assert cfg["precision_mode"] == "force_fp16" and sorted(cfg["keep_dtype"]) == sorted(keep)
    assert npuscope("compile", str(mp), "--config", str(tmp_path / "d" / "fixed_config.json"), "--out", "c",
                    cwd=tmp_path).returncode == 0
    again = npuscope("diagnose", str(mp), "--inputs", str(ip), "--config", str(tmp_path / "d" / "fixed_config.json"),
                     "--out", "d2", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no fix needed" in again.stdout and not (tmp_path / "d2" / "keep_dtype.txt").exists()


# ------------------------------------------------------------------------- --device-dumps / --device-profile
def test_device_dumps_with_a_planted_tensor_name_its_kernel(tmp_path):
    from tests.dumps.device_runs import device_folder

    spoil = {"block2_a_relu": lambda a: (a.astype(np.float32) * 1.5 + 0.3).astype(a.dtype)}
    model, folder, npz = device_folder(tmp_path, spoil=spoil)
    out = tmp_path / "rep"
    p = _cli("diagnose", model, "--device-dumps", folder, "--inputs", npz, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "first divergence: node 'block2_a_relu' (Relu, kernel block2_a_conv" in p.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["first_divergence"]["kernel"] == "block2_a_conv"
    assert summary["device_dumps"]["precision_mismatches"] == 0
    assert pd.read_csv(out / "precision_audit.csv").empty and (out / "index.html").exists()
    table = pd.read_csv(out / "result.csv")
    assert table.set_index("TensorName").loc["block2_a_relu", "Role"] == "origin"


def test_device_profile_alone_audits_its_data_types(tmp_path):
    from tests.dumps.test_audit import _op_summary
    from toolkit import samples

    prof = _op_summary(tmp_path / "op_summary_0_1.csv", [("stem_conv", "Conv2D", "FLOAT16", "FLOAT"),
                                                          ("block1_a_conv", "Conv2D", "FLOAT16", "FLOAT16")])
    out = tmp_path / "rep"
    p = _cli("diagnose", samples.sample_path("resnet_small"), "--device-profile", prof, "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "verdict: WARN (data types only)" in p.stdout and "precision audit: 1 op(s)" in p.stdout
    audit = pd.read_csv(out / "precision_audit.csv")
    assert audit["OpName"].tolist() == ["stem_conv"] and audit["DataType"].tolist() == ["float32"]
    # a clean profile PASSes the audit, and says that accuracy was not compared
    (tmp_path / "clean").mkdir()
    clean = _op_summary(tmp_path / "clean" / "op_summary_0_1.csv", [("block1_a_conv", "Conv2D", "FLOAT16", "FLOAT16")])
    q = _cli("diagnose", samples.sample_path("resnet_small"), "--device-profile", clean, "--out", tmp_path / "rep2")
    assert q.returncode == 0, q.stderr[-2000:]
    assert "verdict: PASS (data types only)" in q.stdout and "accuracy was not compared" in q.stdout
    assert "accuracy was not compared" in json.loads((tmp_path / "rep2" / "summary.json").read_text())["scope"]


@pytest.mark.parametrize("rows,said", [
    ([("TransData_17", "TransData", "FLOAT16", "FLOAT16"), ("other_model_conv", "Conv2D", "FLOAT16", "FLOAT")],
     "none of its rows names an op of this model"),  # another model's profile
    ([("stem_conv", "Conv2D", "", ""), ("block2_a_conv", "Conv2D", "", "")],
     "no row has an Input Data Types / Output Data Types value"),  # exported without the data types
])
def test_a_device_profile_that_audits_nothing_is_refused_not_passed(tmp_path, rows, said):
    """The audit alone (--device-profile without dumps) over a profile none of whose rows it could audit had been
    a PASS with '0 profile row(s) matched': a one-line input error saying why, and no report folder."""
    from tests.dumps.test_audit import _op_summary
    from toolkit import samples

    prof = _op_summary(tmp_path / "op_summary_0_1.csv", rows)
    p = _cli("diagnose", samples.sample_path("resnet_small"), "--device-profile", prof, "--out", tmp_path / "rep")
    assert_one_line_error(p, 2, said, out=tmp_path / "rep")


@pytest.mark.parametrize("args,code,said", [
    (["--device-dumps", "{tmp}/empty", "--inputs", "{tmp}/in.npz"], 2, "is an empty folder"),  # exit 2
    (["--device-dumps", "{tmp}/nope", "--inputs", "{tmp}/in.npz"], 2, "does not exist"),
    (["--mapping", "{tmp}/m.json"], 2, "--mapping names the fused ops of --device-dumps"),
    (["--device-profile", "{tmp}/nope.csv"], 2, "device profile"),
    (["--device-dumps", "{tmp}/dumps"], 2, "give the .npz it ran on with --inputs"),  # the reference needs them
])
def test_device_inputs_that_cannot_be_read_are_one_line_errors(tmp_path, args, code, said):
    from toolkit import samples

    (tmp_path / "empty").mkdir()
    (tmp_path / "dumps").mkdir()
    np.save(tmp_path / "dumps" / "stem_conv.npy", np.zeros((1, 8, 16, 16), np.float16))
    model = onnx.load(str(samples.sample_path("resnet_small")))
    np.savez(tmp_path / "in.npz", **{i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
                                     for i in model.graph.input})
    p = _cli("diagnose", samples.sample_path("resnet_small"), *[a.format(tmp=tmp_path) for a in args],
             "--out", tmp_path / "rep")
    assert_one_line_error(p, code, said, out=tmp_path / "rep")


# ---------------------------------------------------------------- subsets (toolkit.compare.subset)
@pytest.mark.parametrize("args,layers", [(["--layers", "1-2"], {1, 2}), (["--nodes", "/layers.0/*"], {0}),
                                         (["--until", "/layers.1/Relu"], {0, 1}), (["--outputs-only"], set())])
def test_subset_options_limit_the_compared_tensors_and_say_what_was_left_out(tmp_path, args, layers):
    model = layered_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32))
    res = npuscope("compare", path, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "o", *args, cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    kept = {o for n in model.graph.node if layer_of(n.name) in layers for o in n.output} | {"x", "out"}
    got = set(pd.read_csv(tmp_path / "o" / "result.csv")["TensorName"])
    assert got == kept
    sub = json.loads((tmp_path / "o" / "summary.json").read_text())["subset"]
    every = {o for n in model.graph.node for o in n.output}
    assert sub["left_out_tensors"] == len(every - kept)
    assert f"{sub['left_out_tensors']} tensor(s) left out" in res.stdout


def test_a_subset_matching_nothing_is_a_one_line_error(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(layered_model(), str(path))
    res = npuscope("compare", path, "--nodes", "/layers.1/Ad", "--out", tmp_path / "o", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "did you mean '/layers.1/Add'" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ a dataset's fix holds on every input
def _branches(folder: Path, n: int) -> list[dict]:
    """``n`` independent branches x_i @ (1.5·I) → square → y_i, and ``n`` input sets: set i drives only branch i
    past FP16 max (|t| ~ 250..330 → t² ~ 1.4e5..2.5e5), the others stay small. Each set needs its own branch's
    nodes in FP32; only a fix checked on every set keeps them all."""
    nodes, inits = [], [numpy_helper.from_array(np.eye(8, dtype=np.float32) * 1.5, "I")]
    for i in range(n):
        nodes += [helper.make_node("MatMul", [f"x{i}", "I"], [f"t{i}"], name=f"mm{i}"),
                  helper.make_node("Mul", [f"t{i}", f"t{i}"], [f"y{i}"], name=f"sq{i}")]
    g = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 8])
                                              for i in range(n)],
                          [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 8]) for i in range(n)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "m.onnx")
    rng = np.random.default_rng(n)
    (folder / "data").mkdir()
    sets = []
    for s in range(n):
        feed = {f"x{i}": (rng.uniform(170 + 10 * s, 220, (1, 8)) if i == s else rng.uniform(0.05, 0.1, (1, 8)))
                .astype(np.float32) for i in range(n)}
        np.savez(folder / "data" / f"set_{s}.npz", **feed)
        sets.append(feed)
    return sets


@pytest.mark.parametrize("n", [2, 3])
def test_a_dataset_fix_is_verified_on_every_input_not_only_the_worst(tmp_path, n):
    sets = _branches(tmp_path, n)
    model = onnx.load(tmp_path / "m.onnx")
    for s, feed in enumerate(sets):  # independently: in FP16 set s overflows branch s only
        t = {i: feed[f"x{i}"].astype(np.float64) * 1.5 for i in range(n)}
        assert [bool((t[i] ** 2 > 65504).any()) for i in range(n)] == [i == s for i in range(n)]
    r = npuscope("diagnose", "m.onnx", "--inputs", "data", "--precision-mode", "force_fp16",
                 "--out", "o", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    keep = (tmp_path / "o" / "keep_dtype.txt").read_text().split()
    assert f"on all {n} inputs" in r.stdout
    cfg = Config(precision_mode="force_fp16", keep_dtype=keep, op_compiler_cache_mode="disable")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    # the default target's depth: FP16 roundings on the given config's plan (tested in tests/tuning/test_allowance.py)
    depth = rounding_depths(compile_model(model, Config(precision_mode="force_fp16"),
                                          input_shapes=shapes_of(sets[0])).plan)
    for feed in sets:  # the written fix, applied: every output of every set finite and within the default
        # target's FP16 allowance, max(1e-2, 2^-10·sqrt(depth)·max(|y|, rms(y))) per element
        out = Session(model, cfg, input_shapes=shapes_of(feed)).run(feed).outputs
        for name, ref in zip([o.name for o in sess.get_outputs()], sess.run(None, feed)):
            got, ref = out[name].astype(np.float64), ref.astype(np.float64)
            allow = np.maximum(1e-2, 2.0 ** -10 * np.sqrt(depth[name]) *
                               np.maximum(np.abs(ref), np.sqrt(np.mean(ref ** 2))))
            assert np.isfinite(got).all() and (np.abs(got - ref) <= allow).all(), name
