"""``npuscope compile`` in a subprocess: config files (BOM, fusion switch, keep_dtype / op_placement /
disable_reuse names checked against the model, precision options that match nothing or are ignored),
dynamic inputs bound to their shapes, model path kinds, unwritable or misplaced model and compile caches,
the compile summary and compile.log, and report folders."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import TensorProto as TP
from onnx import helper as h

from tests.graphs import N, make_model
from toolkit.core.artifacts import new_run_dir
from toolkit.cache.store import LAYOUT
from toolkit.config.schema import Config
from toolkit.logs import plog
from tests.cli.helpers import FP32_UNFUSED, REPO, X_16_64, _cli_argv, _one_error_line, tiny_compiled, ENV_WITH_WARNINGS, quiet_cli_with_warnings, one_line_error_without_warning, save_model, cli_with_env, plan_of, X_2_8, _cli_cached, _tiny_model, tiny
from tests.cli.helpers import error_line, tiny_model


def test_bad_mode_variable_is_attributed_to_the_variable(tmp_path):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE_MODE="bogus")
    res = subprocess.run([sys.executable, "-m", "toolkit", "compile", "resnet_small", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 2
    assert "NPUSCOPE_COMPILE_CACHE_MODE='bogus'" in res.stderr and "command line" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


BOM = b"\xef\xbb\xbf"


def run_cli(*args, env=None, cwd=None, timeout=240):
    full = dict(os.environ)
    full.pop("NPUSCOPE_THREADS", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)


def _write(path, text, bom=True):
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_cli_compiles_with_a_bom_config(tmp_path, tiny_model):
    _write(tmp_path / "keep.txt", "mm\n")
    cfg = _write(tmp_path / "c.toml", 'keep_dtype = "keep.txt"\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert plan["config"]["keep_dtype"] == ["mm"]


def test_model_cache_that_is_a_file_is_a_config_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    for value in (f, f / "sub"):
        proc = run_cli("compile", "ppocr_cls", "--out", str(tmp_path / "o"), env={"NPUSCOPE_MODEL_CACHE": str(value)})
        assert proc.returncode == 2, proc.stderr
        line = error_line(proc)
        assert "NPUSCOPE_MODEL_CACHE" in line and str(value) in line and "not a folder" in line


def test_gear_errors_name_the_config_file(tmp_path):
    cfg = tmp_path / "g.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,32;32,16"}))
    proc = run_cli("compile", "transformer_seq", "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert f"config '{cfg}'" in error_line(proc)


def test_disable_reuse_names_are_checked_against_the_model(tmp_path, tiny_model):
    bad = tmp_path / "bad.toml"
    bad.write_text('disable_reuse = ["rleu"]\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(bad), "--out", str(tmp_path / "o1"))
    assert proc.returncode == 2
    line = error_line(proc)
    assert "'rleu'" in line and "did you mean 'relu'" in line and str(bad) in line
    good = tmp_path / "good.toml"
    good.write_text('disable_reuse = ["relu", "t"]\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(good), "--out", str(tmp_path / "o2"))
    assert proc.returncode == 0, proc.stderr


def _unwritable_dir(tmp_path) -> Path:
    """A folder that exists and cannot be written: chmod 0o500 for a normal user; root ignores permissions,
    so a folder under /proc (a virtual file system refusing new files)."""
    if os.geteuid() == 0:
        return Path("/proc/1")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    return d


def test_unwritable_model_cache_is_config_error_before_download(tmp_path):
    ro = _unwritable_dir(tmp_path)
    # PIP_NO_INDEX makes a download fail at once (exit 1): exit 2 shows the cache was checked first
    env = {"NPUSCOPE_MODEL_CACHE": str(ro), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    proc = _cli_argv(["-q", "compile", "ppocr_cls", "--out", str(tmp_path / "o")], env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert str(ro) in line and "not writable" in line and "NPUSCOPE_MODEL_CACHE" in line
    assert not (tmp_path / "o").exists()


def test_compile_with_unwritable_compile_cache_still_works(tiny_compiled, tmp_path):
    env = {"NPUSCOPE_COMPILE_CACHE": str(_unwritable_dir(tmp_path)), "NPUSCOPE_COMPILE_CACHE_MODE": "enable"}
    proc = _cli_argv(["-q", "compile", str(tiny_compiled / "m.onnx"), "--out", str(tmp_path / "o")], env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "o" / "plan.json").is_file()


ENV = dict(os.environ, PYTHONWARNINGS="ignore")


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=600)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    """The error line of a run that must fail with ``code`` and a one-line message (no traceback)."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_fusion_switch_list_level_exit_2(tmp_path):
    (tmp_path / "fs_type.json").write_text('{"Switch": {"GraphFusion": ["ALL"]}}')
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs_type.json"\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': fusion_switch_file must be {\"Switch\"" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_keep_dtype_file_unknown_node_names_both_files(tmp_path):
    (tmp_path / "kd.txt").write_text("stem_cnv\n")
    (tmp_path / "c.toml").write_text('keep_dtype = "kd.txt"\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': keep_dtype file 'kd.txt' names node 'stem_cnv'" in line
    assert "did you mean 'stem_conv'" in line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_keep_dtype_list_unknown_node_names_config(tmp_path):
    (tmp_path / "c.toml").write_text('keep_dtype = ["nodeX"]\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': keep_dtype names node 'nodeX'" in line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cli_op_placement_unknown_names_config(tmp_path):
    (tmp_path / "c.toml").write_text('[op_placement]\nstem_cnv = "CPU"\n')
    line = one_line_error(cli("compile", "resnet_small", "--config", "c.toml", "--out", "o", cwd=tmp_path), 2)
    assert "config 'c.toml': op_placement names 'stem_cnv'" in line and "'stem_conv'" in line


def test_compile_binds_a_dynamic_sample_to_its_generator_shapes(tmp_path):
    from toolkit import samples

    want = samples.sample("transformer_seq").make_inputs(0)["x"].shape
    assert want[1] > 1  # the sample's seq dim is dynamic and the generator picks a real length
    res = quiet_cli_with_warnings("compile", "transformer_seq", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    x = next(t for t in plan["tensors"] if t["name"] == "x")
    assert tuple(x["shape"]) == tuple(want)
    # --input-shape still wins
    res = quiet_cli_with_warnings("compile", "transformer_seq", "--input-shape", "x:1,5,64", "--out", tmp_path / "o2")
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "o2" / "plan.json").read_text())
    assert next(t for t in plan["tensors"] if t["name"] == "x")["shape"] == [1, 5, 64]


@pytest.mark.slow
def test_compile_zoo_model_uses_its_registered_input_shape(tmp_path):
    res = quiet_cli_with_warnings("compile", "ppocr_cls", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    x = next(t for t in plan["tensors"] if t["name"] == "x")
    assert x["shape"] == [1, 3, 48, 192]  # PaddleOCR's cls input: 3 x 48 x 192
    assert "(1, 3, 48, 192)" in res.stdout


def _model_path_cases(tmp_path: Path) -> list[tuple[str, str]]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "withmodels").mkdir()
    save_model(tmp_path / "withmodels" / "a.onnx", TensorProto.FLOAT)
    os.mkfifo(tmp_path / "fifo.onnx")
    os.symlink("loop_b", tmp_path / "loop_a")
    os.symlink("loop_a", tmp_path / "loop_b")
    os.symlink(tmp_path / "nowhere.onnx", tmp_path / "dangling.onnx")
    return [(str(tmp_path / "folder"), "is a directory (it holds no .onnx file)"),
            (str(tmp_path / "withmodels"), "is a directory (it holds a.onnx)"),
            (str(tmp_path / "fifo.onnx"), "is not a regular file but a FIFO"),
            (str(tmp_path / "loop_a"), "is a symlink loop"),
            (str(tmp_path / "dangling.onnx"), "which does not exist"),
            ("/dev/null", "is not a regular file but a character device"),
            ("/proc/self/mem", "cannot be read"),
            ("/proc/self/status", "is not an ONNX model")]


def test_cli_model_path_kinds(tmp_path):
    for arg, text in _model_path_cases(tmp_path):
        line = one_line_error_without_warning(quiet_cli_with_warnings("compile", arg, "--out", tmp_path / "o"), 2)
        assert text in line, (arg, line)
        assert "neither a zoo name" not in line
    # an empty regular file is still reported as empty
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert "is empty" in one_line_error_without_warning(quiet_cli_with_warnings("compile", tmp_path / "empty.onnx", "--out", tmp_path / "o"), 2)


TB = "transformer_block"


def compile_cli(tmp_path, model, cfg_text: str, name="c", suffix=".toml", env=None):
    """Compile ``model`` with config text; (CompletedProcess, out folder)."""
    cfg = tmp_path / f"{name}{suffix}"
    cfg.write_text(cfg_text)
    out = tmp_path / f"{name}-out"
    return cli_with_env("compile", str(model), "--config", str(cfg), "--out", str(out), env=env), out


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


@pytest.mark.parametrize("cfg_text,subject,option", [
    ('keep_dtype = ["OpType::Conv"]\n', "OpType::Conv", "keep_dtype"),
    ('modify_mixlist = {"black-list" = {"to-add" = ["Conv"]}}\n', "black-list to-add Conv", "modify_mixlist"),
    ('modify_mixlist = {"black-list" = {"to-remove" = ["MatMul"]}}\n', "black-list to-remove MatMul",
     "modify_mixlist"),
    # adding an op to the list it is on by default changes nothing either (Add is on neither the white
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


def _sample(name):
    from toolkit.source import resolve_model

    return resolve_model(name).path


V = h.make_tensor_value_info
IR = {21: 10, 25: 12}


def cli_with_warnings(*args, cwd=None, warn="default"):
    env = dict(os.environ, PYTHONWARNINGS=warn)
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600, check=False)


def write_model(tmp: Path, name: str, nodes, ins, outs, opset=21, inits=()) -> Path:
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, list(inits)), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    p = tmp / name
    onnx.save(m, p)
    return p


def test_default_report_folder_keeps_unicode_model_name(tmp_path):
    assert new_run_dir(tmp_path, "模型 #1").name.startswith("模型_1-")
    p = write_model(tmp_path, "模型.onnx", [h.make_node("Relu", ["x"], ["y"], name="r")], [V("x", T.FLOAT, [2])],
             [V("y", T.FLOAT, [2])])
    r = cli_with_warnings("compile", str(p), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    made = [d.name for d in (tmp_path / "reports").iterdir()]
    assert len(made) == 1 and made[0].startswith("模型-"), made


CLI = [sys.executable, "-m", "toolkit", "run", "resnet_small"]  # compiles and builds kernels: every namespace


def _cli_with_cache(cache, *args, out):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache), NPUSCOPE_COMPILE_CACHE_MODE="enable",
               NPUSCOPE_LOG_LEVEL="2")  # warnings on stderr (docs/compile-cache.md)
    return subprocess.run([*CLI, *args, "--out", str(out)], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "link_to_entry"])
@pytest.mark.parametrize("ns", ["compile", "bundle", "family"])
def test_a_non_regular_entry_is_a_warned_miss(tmp_path, kind, ns):
    cache = tmp_path / "cache"
    first = _cli_with_cache(cache, out=tmp_path / "o1")
    assert first.returncode == 0, first.stderr
    if ns == "family":  # read only when the exact compile entry misses
        for f in (cache / LAYOUT / "compile").iterdir():
            f.unlink()
    entries = sorted((cache / LAYOUT / ns).iterdir())
    target = entries[0]
    other = tmp_path / "elsewhere"
    os.replace(target, other)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev_zero":
        target.symlink_to("/dev/zero")
    else:
        target.symlink_to(other)  # even an intact entry is not read through a link
    proc = _cli_with_cache(cache, out=tmp_path / "o2")  # a hang fails by the timeout
    assert proc.returncode == 0, proc.stderr
    assert "not a regular file" in proc.stderr, proc.stderr
    assert (tmp_path / "o2" / "plan.json").read_text() == (tmp_path / "o1" / "plan.json").read_text()
    a, b = np.load(tmp_path / "o1" / "outputs.npz"), np.load(tmp_path / "o2" / "outputs.npz")
    assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_broken_symlink_as_the_cache_folder_is_named_so(tmp_path):
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "gone")
    proc = _cli_with_cache(link, out=tmp_path / "o")
    assert proc.returncode == 2, proc.stderr
    assert "broken symbolic link" in proc.stderr and "is a file" not in proc.stderr


@pytest.mark.parametrize("part", [LAYOUT, f"{LAYOUT}/compile", f"{LAYOUT}/bundle"])
def test_a_file_in_place_of_a_cache_folder(tmp_path, part):
    cache = tmp_path / "cache"
    (cache / part).parent.mkdir(parents=True, exist_ok=True)
    (cache / part).write_text("not a folder")
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache))
    info = subprocess.run([sys.executable, "-m", "toolkit", "cache", "info"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert info.returncode == 0 and "WARNING" in info.stdout and "is not a folder" in info.stdout, info.stdout
    clear = subprocess.run([sys.executable, "-m", "toolkit", "cache", "clear"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert clear.returncode == 2 and "is not a folder" in clear.stderr, clear.stderr
    proc = _cli_with_cache(cache, out=tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert "compiling without storing entries" in proc.stderr
    def keys(ns):
        folder = cache / LAYOUT / ns
        return {p.name for p in folder.iterdir()} if folder.is_dir() else set()

    assert keys("bundle") <= keys("compile")  # no bundle that no compile entry reaches
    if part.endswith("compile"):  # the first entry failed: nothing after it stored
        assert not keys("bundle") | keys("kernel") | keys("family")
    assert (cache / part).read_text() == "not a folder"  # the user's file is left alone


F16, F32 = "float16", "float32"


def make(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def issue_model():
    """The issue's model: x[4,64] f16 -> MatMul 'mm' (W f16) -> Softmax 'sm' -> ReduceSum 'rs' -> y[4,1] f16."""
    w = (np.random.default_rng(0).standard_normal((64, 64)) * 0.3).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Softmax", ["m"], ["s"], name="sm", axis=-1),
             helper.make_node("ReduceSum", ["s", "axes"], ["y"], name="rs", keepdims=1)]
    return make(nodes, [("x", TP.FLOAT16, [4, 64])], [("y", TP.FLOAT16, [4, 1])],
                {"W": w, "axes": np.array([1], np.int64)}), w


@pytest.mark.parametrize("mode,line", [
    ("force_fp32", "0 FP16, 3 FP32 kernels, 1 Casts"),
    ("must_keep_origin_dtype", "3 FP16, 0 FP32 kernels, 0 Casts"),
])
def test_cli_compile_summary_of_an_fp16_origin_model(tmp_path, mode, line):
    path = tmp_path / "m.onnx"
    onnx.save(issue_model()[0], path)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compile", str(path), "--precision-mode", mode,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"precision ({mode}): {line}" in proc.stdout
    plan = json.loads((out / "plan.json").read_text())
    tensors = {t["name"]: t["dtype"] for t in plan["tensors"]}
    assert tensors["m"] == (F32 if mode == "force_fp32" else F16)


@pytest.fixture(autouse=True)
def _restore_logger():
    logger = logging.getLogger("npuscope")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    for h in list(logger.handlers):
        if getattr(h, "_npuscope", False):
            logger.removeHandler(h)
            h.close()
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def test_compile_progress_reaches_the_log_at_info_and_details_at_debug(tmp_path):
    """NPUSCOPE_LOG_LEVEL=1 shows one plog line per compiler pass with its op counts; level 0 adds each pass's
    detail lines (fusion matches, placement decisions); level 3 (default) shows none of them."""
    import subprocess
    import sys

    def lines(level):
        env = {**__import__("os").environ, "NPUSCOPE_LOG_LEVEL": str(level), "NPUSCOPE_LOG_TO_STDOUT": "0"}
        out = subprocess.run([sys.executable, "-m", "toolkit", "compile", "resnet_small", "--out",
                              str(tmp_path / f"c{level}")], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return [plog.LINE_RE.match(ln) for ln in out.stderr.splitlines() if "COMPILER(" in ln]

    info = lines(1)
    assert info and all(m is not None for m in info)
    passes = [m["message"].split("]")[0].lstrip("[") for m in info if m["level"] == "INFO"]
    from toolkit.compiler.stages import PASS_ORDER
    assert passes == list(PASS_ORDER)
    assert any("buffer_fusion" in m["message"] and "ops " in m["message"] for m in info)
    debug = lines(0)
    assert any(m["level"] == "DEBUG" and m["message"].startswith("[buffer_fusion]") for m in debug)
    assert lines(3) == []


def test_compile_into_an_existing_empty_out_still_works(tiny):
    (tiny / "empty").mkdir()
    proc = _cli_cached(["compile", "m.onnx", "--out", "empty"], tiny, tiny / "cache")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tiny / "empty" / "plan.json").read_text())
    assert plan["kernels"], plan
