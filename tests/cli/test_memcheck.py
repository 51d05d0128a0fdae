"""``npuscope memcheck`` (and ``run --plan``) in a subprocess on plans edited by hand: clean and conflicting
plans, misaligned offsets, aliases to missing tensors, plans of another model, the model a plan records, and
plans larger than this machine."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import TensorProto as T
from onnx import helper as h

from tests.graphs import N, make_model
from toolkit import samples
from toolkit.runtime.host_memory import host_memory_bytes
from tests.cli.helpers import FP32_UNFUSED, M1_NODES, M1_INITS, m1_model, feeds

TIMEOUT_S = 600


def _cli_with_env(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def _one_error_line(r) -> str:
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    """plan.json of resnet_small as `npuscope compile` writes it (parsed dict, path)."""
    out = tmp_path_factory.mktemp("plan") / "c"
    r = _cli_with_env("compile", "resnet_small", "--out", out)
    assert r.returncode == 0, r.stderr
    path = out / "plan.json"
    return json.loads(path.read_text()), path


def _free_tensor(plan: dict):
    """An arena tensor with bytes, chosen independently of the checker, and the arena size before editing."""
    t = next(t for t in plan["tensors"] if t["storage"] == "arena" and t["nbytes"] > 0 and t["alias_of"] is None
             and not any(o.get("alias_of") == t["name"] for o in plan["tensors"]))
    return t, plan["arena_bytes"]


def _edited(plan: dict, tmp_path, name: str, offset_past_arena: int) -> tuple:
    """The plan with one tensor moved past the old arena end (overlapping nothing) by ``offset_past_arena``
    bytes, the arena grown to hold it; returns (path, tensor name, new offset, alignment)."""
    d = json.loads(json.dumps(plan))
    t, arena = _free_tensor(d)
    align = d["alignment"]
    assert arena % align == 0
    t["offset"] = arena + offset_past_arena
    d["arena_bytes"] = arena + offset_past_arena + t["nbytes"] + 2 * align
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p, t["name"], t["offset"], align


def test_misaligned_offset_is_a_finding_and_aligned_control_is_clean(plan_json, tmp_path):
    plan, _ = plan_json
    bad, name, offset, align = _edited(plan, tmp_path, "mis.json", 100)
    assert offset % align != 0
    r = _cli_with_env("memcheck", "resnet_small", "--plan", bad, "--no-html", "--out", tmp_path / "o1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "static conflicts: 1" in r.stdout and "misaligned" in r.stdout and name in r.stdout
    line = next(x for x in r.stdout.splitlines() if "CONFLICT misaligned" in x)
    assert str(offset) in line and str(align) in line  # the terminal says why, not "writes X over X"
    rows = list(csv.DictReader(open(tmp_path / "o1" / "conflicts.csv")))
    assert [(x["Kind"], x["Written"], int(x["OverlapStart"])) for x in rows] == [("misaligned", name, offset)]
    assert str(offset) in rows[0]["Detail"] and str(align) in rows[0]["Detail"]
    # control: the same move to an aligned offset is clean
    good, _, offset2, _ = _edited(plan, tmp_path, "ok.json", 2 * align)
    assert offset2 % align == 0
    r = _cli_with_env("memcheck", "resnet_small", "--plan", good, "--no-html", "--out", tmp_path / "o2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "static conflicts: 0" in r.stdout


def test_cli_memcheck_refuses_alias_to_missing_tensor(plan_json, tmp_path):
    plan, _ = plan_json
    d = json.loads(json.dumps(plan))
    d["tensors"][3]["alias_of"] = "nope"
    p = tmp_path / "alias.json"
    p.write_text(json.dumps(d))
    r = _cli_with_env("memcheck", "resnet_small", "--plan", p, "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert "'nope'" in _one_error_line(r) and not (tmp_path / "o").exists()


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


@pytest.mark.parametrize("kind", ["normal", "nan", "mixed"])
def test_memcheck_plan_with_conflict_prints_no_runtime_warning(tmp_path, kind):
    """The tester's case: a plan whose 't' overwrites 'x__cast_fp16' still read by 'exp' (memcheck --plan)."""
    model = m1_model(tmp_path)
    r = cli_with_warnings("compile", str(model), "--precision-mode", "force_fp16", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "c" / "plan.json").read_text())
    tensors = {t["name"]: t for t in plan["tensors"]}
    tensors["t"]["offset"] = tensors["x__cast_fp16"]["offset"]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    np.savez(tmp_path / "in.npz", x=feeds(kind))
    r = cli_with_warnings("memcheck", str(model), "--plan", str(tmp_path / "plan.json"), "--inputs", str(tmp_path / "in.npz"),
            "--out", str(tmp_path / "o"))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "Warning" not in r.stderr, r.stderr
    assert "CONFLICT" in r.stdout


ENV = dict(os.environ, PYTHONWARNINGS="ignore")


TB = str(samples.sample_path("transformer_block"))


def cli_no_warnings(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=TIMEOUT_S, cwd=cwd, check=False)


def refusal_line(proc) -> str:
    """The single stderr line of a refused command."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """plan.json of transformer_block as compile writes it (model recorded) and as compare writes it (model '')."""
    tmp = tmp_path_factory.mktemp("plans")
    r = cli_no_warnings("compile", "transformer_block", "--out", tmp / "c")
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp / "c" / "plan.json").read_text())
    out = {"tmp": tmp, "with_model": tmp / "c" / "plan.json", "first_kernel": d["kernels"][0]["name"]}
    for name, model in (("no_model", ""), ("missing_model", str(tmp / "gone.onnx"))):
        out[name] = tmp / f"{name}.json"
        out[name].write_text(json.dumps({**d, "model": model}))
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("command", ["memcheck", "run"])
def test_plan_without_model_argument_or_record_is_usage_error(plans, command):
    for key in ("no_model", "missing_model"):
        r = cli_no_warnings(command, "--plan", plans[key], "--out", plans["tmp"] / f"{command}-{key}")
        assert r.returncode == 2, r.stdout + r.stderr
        line = refusal_line(r)
        assert f"plan file '{plans[key]}'" in line and "MODEL" in line
        assert not (plans["tmp"] / f"{command}-{key}").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("command", ["memcheck", "run"])
def test_plan_of_another_model_names_the_file_not_the_repr(plans, command):
    r = cli_no_warnings(command, "resnet_small", "--plan", plans["no_model"], "--out", plans["tmp"] / f"{command}-other")
    assert r.returncode == 2, r.stdout + r.stderr
    line = refusal_line(r)
    assert f"plan file '{plans['no_model']}'" in line
    assert f"kernel #0 is '{plans['first_kernel']}'" in line
    assert "Plan(" not in line and "KernelSpec" not in line and len(line) < 600


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_memcheck_without_model_uses_the_model_the_plan_records(plans):
    out = plans["tmp"] / "mc-recorded"
    r = cli_no_warnings("memcheck", "--plan", plans["with_model"], "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "memcheck.json").read_text())
    assert Path(rep["model"]).resolve() == Path(TB).resolve()
    checked = json.loads((out / "plan.json").read_text())
    assert [k["name"] for k in checked["kernels"]] == \
        [k["name"] for k in json.loads(plans["with_model"].read_text())["kernels"]]


def huge_model(elems: int) -> onnx.ModelProto:
    """y = x + ReduceSum(ConstantOfShape([elems])): the constant's size is only known at compile time."""
    shape = numpy_helper.from_array(np.array([elems], np.int64), "shp")
    nodes = [helper.make_node("ConstantOfShape", ["shp"], ["big"], name="cos"),
             helper.make_node("ReduceSum", ["big"], ["s"], name="rs", keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture()
def too_big() -> int:
    total = host_memory_bytes()
    if not total:
        pytest.skip("this machine does not report its memory size")
    return total // 4 + 1  # float32 elements: the constant alone is the machine's whole memory


def test_memcheck_with_a_plan_file_gives_a_one_line_error(tmp_path, too_big):
    onnx.save(huge_model(too_big), tmp_path / "m.onnx")
    out = subprocess.run([sys.executable, "-m", "toolkit", "compile", str(tmp_path / "m.onnx"), "--out",
                          str(tmp_path / "c")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    res = subprocess.run([sys.executable, "-m", "toolkit", "memcheck", str(tmp_path / "m.onnx"), "--plan",
                          str(tmp_path / "c" / "plan.json"), "--out", str(tmp_path / "mc")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "arena needs" in res.stderr and not (tmp_path / "mc").exists()


REPO = Path(__file__).resolve().parents[2]


def _call(argv) -> int:
    """Exit code of ``npuscope ARGV`` in a subprocess (the CLI sets up onnxruntime's global thread pool, which
    must not leak into the test process)."""
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=300).returncode


_exit = _call


@pytest.fixture()
def model_and_plan(tmp_path):
    model = make_model([N("Mul", ["x", "two"], ["a"], "mul_a"), N("Mul", ["x", "three"], ["b"], "mul_b"),
                        N("Add", ["a", "b"], ["y"], "add")], [("x", [16, 64])], ["y"],
                       {"two": np.float32(2.0), "three": np.float32(3.0)})
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 16  # the loader's checker wants a shape
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 64
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(FP32_UNFUSED))
    assert _call(["-q", "compile", str(path), "--config", str(cfg), "--out", str(tmp_path / "c")]) == 0
    return path, tmp_path / "c" / "plan.json"


def test_clean_plan_exits_0(model_and_plan, tmp_path):
    path, plan = model_and_plan
    assert _call(["-q", "memcheck", str(path), "--plan", str(plan), "--out", str(tmp_path / "ok")]) == 0
    data = json.loads((tmp_path / "ok" / "memcheck.json").read_text())
    assert data["clean"] and data["conflicts"] == []
    assert (tmp_path / "ok" / "memory.html").is_file()


def test_hand_edited_plan_exits_1_with_writer_victim_reader(model_and_plan, tmp_path):
    path, plan = model_and_plan
    d = json.loads(plan.read_text())
    t = {x["name"]: x for x in d["tensors"]}
    t["b"]["offset"] = t["a"]["offset"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    assert _exit(["-q", "memcheck", str(path), "--plan", str(bad), "--out", str(tmp_path / "mc")]) == 1
    rows = list(csv.DictReader(open(tmp_path / "mc" / "conflicts.csv")))
    assert [(r["Writer"], r["Victim"], r["Reader"], r["SeenDynamically"]) for r in rows] == [("mul_b", "a", "add", "True")]
    # the CSV holds the text as written (a cell starting with ' gets a second one from the formula
    # guard, so messages start with a word)
    assert all(not v.startswith("'") for r in rows for v in r.values()), rows
    data = json.loads((tmp_path / "mc" / "memcheck.json").read_text())
    assert data["fix"]["disable_reuse"] == ["a"] and data["fix"]["verified"] is True
    html = (tmp_path / "mc" / "memory.html").read_text()
    assert "mul_b" in html and "CONFLICTS FOUND" in html
    # the fixed plan is clean and runs
    fixed = tmp_path / "mc" / "plan_fixed.json"
    assert _call(["-q", "memcheck", str(path), "--plan", str(fixed), "--out", str(tmp_path / "mc2")]) == 0
    assert _call(["-q", "run", str(path), "--config", str(tmp_path / "cfg.json"), "--plan", str(fixed),
                  "--out", str(tmp_path / "run")]) == 0


def test_plan_for_another_model_is_refused(model_and_plan, tmp_path):
    path, plan = model_and_plan
    d = json.loads(plan.read_text())
    d["kernels"][0]["name"] = "other"
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps(d))
    assert _exit(["-q", "memcheck", str(path), "--plan", str(bad), "--out", str(tmp_path / "x")]) == 2  # bad input, not a finding


def cli(*args):
    return subprocess.run([sys.executable, "-m", "toolkit", "-q", *map(str, args)], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("writer", ["compare", "compile"])
def test_plan_records_the_model_and_memcheck_needs_no_model_argument(tmp_path, writer):
    r = cli(writer, "transformer_block", "--out", tmp_path / "w")
    assert r.returncode in (0, 1), r.stderr  # compare's exit code is its verdict
    plan = json.loads((tmp_path / "w" / "plan.json").read_text())
    assert plan["model"] == str(samples.sample_path("transformer_block"))
    r = cli("memcheck", "--plan", tmp_path / "w" / "plan.json", "--out", tmp_path / "mc")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "mc" / "memory.html").exists()


@pytest.fixture(scope="module")
def fp16_plan(tmp_path_factory):
    """A plan compiled in force_fp16 (its config differs from the defaults: Cast kernels come first)."""
    tmp = tmp_path_factory.mktemp("fp16plan")
    model = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"], name="n0")], "g",
                                      [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                                      [h.make_tensor_value_info("y", T.FLOAT, [1, 4])]),
                         opset_imports=[h.make_opsetid("", 17)])
    onnx.save(model, tmp / "m.onnx")
    r = _cli_with_env("compile", tmp / "m.onnx", "--precision-mode", "force_fp16", "--out", tmp / "c")
    assert r.returncode == 0, r.stderr
    return tmp / "m.onnx", tmp / "c" / "plan.json"


@pytest.mark.parametrize("cmd, options", [("run", ["--input-shape", "x:1,4"]), ("run", ["--precision-mode", "force_fp16"]),
                                           ("memcheck", ["--input-shape", "x:1,4"]), ("run", []), ("memcheck", [])])
def test_options_with_plan_apply_on_top_of_the_plans_own_config(fp16_plan, tmp_path, cmd, options):
    """An option given with --plan changes only itself: the rest of the config stays the plan's own (here
    force_fp16), so the plan still matches its model and the command runs."""
    model, plan = fp16_plan
    r = _cli_with_env(cmd, model, "--plan", plan, *options, "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr


def test_an_option_that_changes_the_kernels_names_the_config_in_use(fp16_plan, tmp_path):
    model, plan = fp16_plan
    r = _cli_with_env("run", model, "--plan", plan, "--precision-mode", "force_fp32", "--out", tmp_path / "o")
    err = _one_error_line(r)
    assert r.returncode == 2 and "the config in use (the plan's own, or --config, with the options given)" in err
    assert "plan's config" not in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("reuse", ["off", "conservative", "aggressive"])
def test_memory_reuse_with_plan_is_refused_as_it_cannot_change_the_plan(fp16_plan, tmp_path, reuse):
    model, plan = fp16_plan
    r = _cli_with_env("memcheck", model, "--plan", plan, "--memory-reuse", reuse, "--out", tmp_path / "o")
    err = _one_error_line(r)
    assert r.returncode == 2 and f"--memory-reuse {reuse} with --plan" in err and not (tmp_path / "o").exists()
    r = _cli_with_env("memcheck", model, "--memory-reuse", reuse, "--no-html", "--out", tmp_path / "p")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "p" / "memcheck.json").read_text())["policy"] == reuse
