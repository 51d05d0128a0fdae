"""Round 5 fixes: the converter's precision and fusion options.

1. optypelist_for_implmode: op_select_implmode applies to the listed op types only; the others keep the default
   high_performance (FP16 accumulation in reductions) — list and comma-string forms.
2. keep_dtype / modify_mixlist / optypelist_for_implmode entries that match nothing are warning findings and
   compile.log lines (a node folded at compile time says so); a mixlist under a precision mode that ignores it is
   a warning; compile.log lists the kernels an option moved, with the entry that moved them.
3. keep_dtype accepts the converter's ``OpName::`` prefix as well as ``OpType::``.
4. fusion switch: a UBFusion pass under GraphFusion says where it belongs; a real converter pass npuscope does
   not simulate is accepted with a warning; other names stay errors, suggested only when close.
5. doctor / environment(): variables the CLI set itself are reported as set by npuscope, not as the user's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from tests.graphs import N, make_model
from onnx import TensorProto, helper

from toolkit.compiler.pipeline import compile_model
from toolkit.config import Config
from toolkit.errors import ConfigError

F16 = np.float16
TB = "transformer_block"


def cli(*args, env=None, cwd=None):
    e = dict(os.environ, PYTHONWARNINGS="ignore")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=e,
                          cwd=cwd, timeout=300)


def compile_cli(tmp_path, model, cfg_text: str, name="c", suffix=".toml", env=None):
    """Compile ``model`` with config text; (CompletedProcess, out folder)."""
    cfg = tmp_path / f"{name}{suffix}"
    cfg.write_text(cfg_text)
    out = tmp_path / f"{name}-out"
    return cli("compile", str(model), "--config", str(cfg), "--out", str(out), env=env), out


def plan_of(out):
    return {k["name"]: k for k in json.loads((out / "plan.json").read_text())["kernels"]}


def findings_of(out):
    return json.loads((out / "compile_findings.json").read_text())


def assign_log(out) -> list[str]:
    """The [assign_precision] lines of compile.log."""
    lines, inside = [], False
    for ln in (out / "compile.log").read_text().splitlines():
        if ln.startswith("["):
            inside = ln.startswith("[assign_precision]")
            continue
        if inside:
            lines.append(ln.strip())
    return lines


# ----------------------------------------------------------------------------- 1. optypelist_for_implmode
def rm_sm_model(path):
    """x[4,4096] -> ReduceMean 'rm' (axes [1], keepdims) -> m; Softmax 'sm' (axis 1) -> s -> ReduceSum 'rs' (axes
    input [1], keepdims) -> y2; opset 13; outputs m, s, y2."""
    m = make_model([N("ReduceMean", ["x"], ["m"], "rm", axes=[1], keepdims=1),
                    N("Softmax", ["x"], ["s"], "sm", axis=1),
                    N("ReduceSum", ["s", "ax"], ["y2"], "rs", keepdims=1)],
                   [("x", [4, 4096])], ["m", "s", "y2"], {"ax": np.array([1], np.int64)}, opset=13)
    del m.graph.output[:]
    m.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                           for n, shape in (("m", [4, 1]), ("s", [4, 4096]), ("y2", [4, 1]))])
    onnx.save(m, path)
    return path


def fp16_lane_sum(v: np.ndarray, lanes: int = 16) -> np.float16:
    """The contract's FP16 accumulation (GUIDE §3, toolkit.runtime.fp16_accum docstring), written out here:
    element j goes to lane j % 16, each lane adds sequentially in FP16, then the lanes add pairwise in FP16."""
    v = np.asarray(v, F16).ravel()
    v = np.concatenate([v, np.zeros((-len(v)) % lanes, F16)])
    acc = [F16(0)] * lanes
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, len(v), lanes):
            acc = [F16(a + b) for a, b in zip(acc, v[i:i + lanes])]
        while len(acc) > 1:
            acc = [F16(acc[i] + acc[i + 1]) for i in range(0, len(acc), 2)]
    return acc[0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("cfg_file,text", [
    ("i3.toml", 'precision_mode="force_fp16"\nop_select_implmode="high_precision"\noptypelist_for_implmode=["Softmax"]\n'),
    ("i3.json", json.dumps({"precision_mode": "force_fp16", "op_select_implmode": "high_precision",
                            "optypelist_for_implmode": "Softmax"})),
])
def test_implmode_list_numerics_cli(tmp_path, cfg_file, text):
    """Softmax listed in high_precision: rm keeps high_performance (FP16 accumulation of 4096 values in
    [0, 100) overflows: inf), sm is FP32-computed and rounded once, rs accumulates the FP16 s in FP16."""
    model = rm_sm_model(tmp_path / "rm_sm.onnx")
    x = np.random.default_rng(5).uniform(0, 100, (4, 4096)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    (tmp_path / cfg_file).write_text(text)
    r = cli("run", str(model), "--config", str(tmp_path / cfg_file), "--inputs", str(tmp_path / "in.npz"),
            "--output", str(tmp_path / "o.npz"), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    o = np.load(tmp_path / "o.npz")
    assert np.all(np.isposinf(o["m"].astype(np.float64)))  # sum 4096 * ~50 >> 65504 in FP16
    xs = x.astype(F16).astype(np.float64)
    e = np.exp(xs - xs.max(axis=1, keepdims=True))
    s_emu = (e / e.sum(axis=1, keepdims=True)).astype(F16)
    ulps = np.abs(o["s"].astype(F16).view(np.int16).astype(int) - s_emu.view(np.int16).astype(int))
    assert ulps.max() <= 1
    for row in range(4):
        assert o["y2"][row, 0] == fp16_lane_sum(o["s"][row])
    plan = plan_of(tmp_path / "run")
    assert (plan["rm"]["implmode"], plan["sm"]["implmode"], plan["rs"]["implmode"]) == \
        ("high_performance", "high_precision", "high_performance")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_implmode_without_list_is_high_precision_everywhere(tmp_path):
    """Without a list, high_precision reaches rm too: its mean (~50) is finite, FP32-computed, rounded once."""
    model = rm_sm_model(tmp_path / "rm_sm.onnx")
    x = np.random.default_rng(6).uniform(0, 100, (4, 4096)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    (tmp_path / "c.toml").write_text('precision_mode="force_fp16"\nop_select_implmode="high_precision"\n')
    r = cli("run", str(model), "--config", str(tmp_path / "c.toml"), "--inputs", str(tmp_path / "in.npz"),
            "--output", str(tmp_path / "o.npz"), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    m = np.load(tmp_path / "o.npz")["m"]
    want = x.astype(F16).astype(np.float64).mean(axis=1, keepdims=True).astype(F16)
    assert np.all(np.isfinite(m.astype(np.float64)))
    assert np.abs(m.astype(F16).view(np.int16).astype(int) - want.view(np.int16).astype(int)).max() <= 1


# ----------------------------------------------------------------------------- 2. entries that match nothing
@pytest.mark.parametrize("cfg_text,subject,option", [
    ('keep_dtype = ["OpType::Conv"]\n', "OpType::Conv", "keep_dtype"),
    ('modify_mixlist = {"black-list" = {"to-add" = ["Conv"]}}\n', "black-list to-add Conv", "modify_mixlist"),
    ('modify_mixlist = {"black-list" = {"to-remove" = ["MatMul"]}}\n', "black-list to-remove MatMul",
     "modify_mixlist"),
    # round 8: adding an op to the list it is on by default changes nothing either (Add is on neither the white
    # nor the black list: gray; MatMul is a cube op: white)
    ('modify_mixlist = {"gray-list" = {"to-add" = ["Add"]}}\n', "gray-list to-add Add", "modify_mixlist"),
    ('modify_mixlist = {"white-list" = {"to-add" = ["MatMul"]}}\n', "white-list to-add MatMul", "modify_mixlist"),
    ('precision_mode = "force_fp16"\nop_select_implmode = "high_precision"\noptypelist_for_implmode = ["Conv"]\n',
     "Conv", "optypelist_for_implmode"),
])
def test_unmatched_entry_is_a_warning_finding_and_log_line(tmp_path, cfg_text, subject, option):
    """transformer_block has no Conv node; MatMul is not on the default black list (nothing to remove), it is on
    the white list already; Add is gray already."""
    from toolkit.precision.contract import default_mixlists

    ops = {n.op_type for n in onnx.load(str(_sample(TB))).graph.node}
    assert "Conv" not in ops and "MatMul" in ops and "Add" in ops
    lists = default_mixlists()
    assert "MatMul" in lists["white-list"] and not {"Add"} & (lists["white-list"] | lists["black-list"])
    r, out = compile_cli(tmp_path, TB, cfg_text)
    assert r.returncode == 0, r.stderr
    hits = [f for f in findings_of(out) if f["kind"] == "option_unmatched" and f["subject"] == subject]
    assert len(hits) == 1 and hits[0]["severity"] == "warning" and hits[0]["evidence"]["option"] == option
    assert any(ln.startswith("WARNING") and option in ln for ln in assign_log(out))
    assert "WARNING: option_unmatched" in r.stdout


def test_mixlist_under_force_fp16_is_ignored_with_a_warning(tmp_path):
    r, out = compile_cli(tmp_path, TB, 'precision_mode = "force_fp16"\n'
                                       'modify_mixlist = {"black-list" = {"to-add" = ["MatMul"]}}\n')
    assert r.returncode == 0, r.stderr
    ign = [f for f in findings_of(out) if f["kind"] == "option_ignored"]
    assert [f["subject"] for f in ign] == ["modify_mixlist"] and ign[0]["evidence"]["precision_mode"] == "force_fp16"
    assert all(k["precision"] == "fp16" for k in plan_of(out).values() if k["fusion"] not in ("cast", "copy"))


def test_keep_dtype_unknown_name_is_still_an_error(tmp_path):
    r, out = compile_cli(tmp_path, TB, 'keep_dtype = ["attn_q_matmull"]\n')
    assert r.returncode == 2 and not out.exists()
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "not in the model" in line and "did you mean 'attn_q_matmul'" in line


@pytest.mark.slow
def test_keep_dtype_folded_node_of_ppocr_cls(tmp_path):
    """PP-OCR cls: 'Cast@1' reads a shape slice, so fold_constants computes it; the entry matches no kernel."""
    r, out = compile_cli(tmp_path, "ppocr_cls", 'keep_dtype = ["Cast@1"]\n')
    assert r.returncode == 0, r.stderr
    f = [f for f in findings_of(out) if f["kind"] == "option_unmatched"]
    assert [(x["subject"], x["evidence"]["reason"]) for x in f] == [("Cast@1", "folded")]
    assert "Cast@1" not in {n for k in plan_of(out).values() for n in k["nodes"]}


def _moved_in_log(lines, header):
    """{kernel: line} listed under the log line starting with ``header``."""
    out, inside = {}, False
    for ln in lines:
        if ln.startswith(header):
            inside = True
            continue
        if inside and "->" in ln and ln.split(" ", 1)[0]:
            out[ln.split(" ", 1)[0]] = ln
        elif inside:
            inside = False
    return out


@pytest.mark.parametrize("cfg_text,header,entry", [
    ('modify_mixlist = {"black-list" = {"to-add" = ["MatMul"]}}\n', "modify_mixlist moved",
     "by modify_mixlist black-list to-add 'MatMul'"),
    ('keep_dtype = ["attn_q_matmul", "OpType::Add"]\n', "keep_dtype moved", "by keep_dtype"),
])
def test_log_lists_every_kernel_an_option_moved(tmp_path, cfg_text, header, entry):
    """The kernels named in compile.log are exactly those whose plan.json precision differs from the default
    compile; those holding a node the entry names say which entry moved them, the others follow an input."""
    r0, base = compile_cli(tmp_path, TB, "", name="base")
    r1, out = compile_cli(tmp_path, TB, cfg_text, name="opt")
    assert r0.returncode == 0 and r1.returncode == 0, r1.stderr
    p0, p1 = plan_of(base), plan_of(out)
    changed = {k for k in p1 if k in p0 and p1[k]["precision"] != p0[k]["precision"]}
    assert changed
    logged = _moved_in_log(assign_log(out), header)
    assert set(logged) == changed
    op_of = {n.name: n.op_type for n in onnx.load(str(_sample(TB))).graph.node}
    for k, line in logged.items():
        ops = {op_of.get(n) for n in p1[k]["nodes"]}
        direct = "MatMul" in ops if "mixlist" in header else ("attn_q_matmul" in p1[k]["nodes"] or "Add" in ops)
        assert (entry in line) == direct and ("follows its input" in line) == (not direct)
        assert f"{p0[k]['precision'].upper()} -> {p1[k]['precision'].upper()}" in line


# ----------------------------------------------------------------------------- 3. OpName:: prefix
def test_opname_prefix_is_a_node_name(tmp_path):
    (tmp_path / "keep.txt").write_text("OpName::attn_q_matmul\nOpType::Softmax\n")
    (tmp_path / "c.toml").write_text('keep_dtype = "keep.txt"\n')
    cfg = Config.load(tmp_path / "c.toml")
    assert cfg.keep_dtype == ["attn_q_matmul", "OpType::Softmax"]
    r1, a = compile_cli(tmp_path, TB, 'keep_dtype = ["OpName::attn_q_matmul"]\n', name="a")
    r2, b = compile_cli(tmp_path, TB, 'keep_dtype = ["attn_q_matmul"]\n', name="b")
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr
    pa, pb = plan_of(a), plan_of(b)
    holder = [k for k in pa.values() if "attn_q_matmul" in k["nodes"]]
    assert holder and all(k["precision"] == "fp32" for k in holder)
    assert {k: v["precision"] for k, v in pa.items()} == {k: v["precision"] for k, v in pb.items()}


def test_opname_prefix_unknown_node_cli_error(tmp_path):
    r, _ = compile_cli(tmp_path, TB, 'keep_dtype = ["OpName::no_such_node"]\n')
    assert r.returncode == 2 and "names node 'no_such_node', which is not in the model" in r.stderr
    assert "OpName::no_such_node" not in r.stderr


# ----------------------------------------------------------------------------- 4. fusion switch
def _switch(tmp_path, table, name="fs"):
    (tmp_path / f"{name}.json").write_text(json.dumps({"Switch": table}))
    return f'fusion_switch_file = "{name}.json"\n'


def test_ub_pass_under_graph_fusion_says_where_it_belongs(tmp_path):
    r, _ = compile_cli(tmp_path, TB, _switch(tmp_path, {"GraphFusion": {"TbeCubeElemwiseFusionPass": "off"}}))
    assert r.returncode == 2
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "is a UBFusion pass" in line and 'move it under "UBFusion"' in line
    assert "did you mean" not in line


def test_unsimulated_converter_pass_is_accepted_with_a_warning(tmp_path):
    sw = _switch(tmp_path, {"GraphFusion": {"V100NotRequireFusionPass": "off"}})
    r, out = compile_cli(tmp_path, TB, sw, name="fs9", env={"NPUSCOPE_LOG_LEVEL": "2"})
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("[WARNING]") and "V100NotRequireFusionPass" in ln]
    assert len(warn) == 1 and "not simulated; ignored" in warn[0]
    assert [f["subject"] for f in findings_of(out) if f["kind"] == "fusion_switch_ignored"] == \
        ["V100NotRequireFusionPass"]
    log = (out / "compile.log").read_text()
    assert "V100NotRequireFusionPass" in log and "not simulated; ignored" in log
    r0, base = compile_cli(tmp_path, TB, "", name="plain")
    assert plan_of(out) == plan_of(base)  # the entry changes nothing in the simulated compile


# ----------------------------------------------------------------------------- 5. environment set by npuscope
def _clean_env():
    from toolkit.env import RELEVANT_ENV

    e = {k: v for k, v in os.environ.items() if k not in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                           "NPUSCOPE_DEFAULTED", *RELEVANT_ENV)}
    e["PYTHONWARNINGS"] = "ignore"
    return e


def _run_clean(*args, **extra):
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True,
                          env={**_clean_env(), **extra}, timeout=300)


def test_doctor_does_not_report_cli_defaults_as_user_settings():
    r = _run_clean("doctor", "--json")
    assert r.returncode == 0, r.stderr
    env = json.loads(r.stdout)["environment"]
    assert "MKL_NUM_THREADS" not in env["env"] and "OPENBLAS_NUM_THREADS" not in env["env"]
    assert env["set_by_npuscope"] == {"MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    text = _run_clean("doctor").stdout
    assert "environment variables: (none set)" in text
    assert "set by npuscope (not by you): MKL_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1" in text


def test_doctor_reports_the_users_own_setting():
    r = _run_clean("doctor", "--json", OPENBLAS_NUM_THREADS="3")
    env = json.loads(r.stdout)["environment"]
    assert env["env"].get("OPENBLAS_NUM_THREADS") == "3" and "MKL_NUM_THREADS" not in env["env"]
    assert env["set_by_npuscope"] == {"MKL_NUM_THREADS": "1"}


def test_diagnose_summary_environment_separates_npuscope_defaults(tmp_path):
    out = tmp_path / "cmp"
    r = _run_clean("compare", str(rm_sm_model(tmp_path / "m.onnx")), "--out", str(out))
    assert r.returncode in (0, 1), r.stderr
    env = json.loads((out / "summary.json").read_text())["environment"]
    assert "MKL_NUM_THREADS" not in env["env"] and env["set_by_npuscope"]["MKL_NUM_THREADS"] == "1"


def _sample(name):
    from toolkit.source import resolve_model

    return resolve_model(name).path
