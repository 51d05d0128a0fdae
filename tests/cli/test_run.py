"""``npuscope run`` in a subprocess: the acceptance bar for bad input (one ``npuscope: error:`` line, exit 1 or
2 for usage errors, no traceback, no partial output folder), --output / --dump paths, --plan validated against
the plan's own config, --val-range against the input dtype, gears, implmode lists, string, big-endian and
folder inputs, outputs and dumps of every dtype, and the cache size limit.

The CLI prints progress lines (``[npuscope HH:MM:SS] ...``) to stderr; :func:`error_lines` sets them aside so
each case checks the error itself, and :func:`test_bad_input_prints_nothing_but_the_error_line` checks the
strict reading (stderr is exactly the one error line)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.dtype_models import CPU_MODELS, FEED, _reference_output, _run_cli, _save
from tests.faultkinds import builders as fk
from tests.graphs import N, make_model
from toolkit.commands.common import config_from_dict, load_config
from toolkit import samples
from toolkit.cache import store
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError
from toolkit.gears.session import GearSession
from tests.cli.helpers import FP32_UNFUSED, REPO, X_16_64, _cli_argv, _one_error_line, tiny_compiled, ENV_WITH_WARNINGS, quiet_cli_with_warnings, one_line_error_without_warning, save_model, cli_with_env, plan_of, X_2_8, _cli_cached, _tiny_model, tiny
from tests.cli.helpers import X_4_8, _m1, m1
from tests.cli.helpers import rm_sm_model, _string_model
from tests.cli.helpers import TIMEOUT_S, npuscope, _cli, ws, FP16_MAX, _model


PROGRESS = re.compile(r"^\[npuscope \d\d:\d\d:\d\d\] ")


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not PROGRESS.match(ln)]


def assert_one_line_error(proc, code: int, *mentions: str, out: Path | None = None) -> str:
    """Exit ``code``; exactly one non-progress stderr line, ``npuscope: error: ...`` naming every ``mentions``."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("npuscope: error: "), line
    for m in mentions:
        assert m in line, f"{m!r} not in {line!r}"
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), f"partial output left in {out}: {list(out.iterdir())}"
    return line


# ------------------------------------------------------------------ sanity: the good path works
def test_valid_run_succeeds(ws):
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--out", "out", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert (ws / "out" / "outputs.npz").is_file()


@pytest.mark.parametrize("case", ["existing_file", "non_empty_folder", "same_as_out"])
def test_unusable_dump_folder_is_refused_before_any_work(ws, case):
    """Kind: a --dump target the run cannot write. Refused with one line (exit 2) before compiling; the
    user's file or folder is left as it was and no report folder is created."""
    if case == "existing_file":
        (ws / "afile").write_text("mine")
        dump, out = "afile", "o"
    elif case == "non_empty_folder":
        (ws / "d").mkdir()
        (ws / "d" / "keep.txt").write_text("mine")
        dump, out = "d", "o"
    else:
        dump = out = "o6"
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--dump", dump, "--out", out, cwd=ws)
    assert_one_line_error(proc, 2, "--dump", out=ws / out)
    if case == "existing_file":
        assert (ws / "afile").read_text() == "mine"
    if case == "non_empty_folder":
        assert [p.name for p in (ws / "d").iterdir()] == ["keep.txt"]


# ------------------------------------------------------------------ model files
def test_missing_model_file(ws):
    proc = npuscope("run", "nothere.onnx", "--inputs", "model.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "nothere.onnx", out=ws / "out")


@pytest.mark.parametrize("content", [b"hello, this is not an ONNX model\n", b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
                                     b""], ids=["text", "binary", "empty"])
def test_not_onnx(ws, content):
    (ws / "bogus.onnx").write_bytes(content)
    proc = npuscope("run", "bogus.onnx", "--inputs", "model.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "bogus.onnx", out=ws / "out")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_truncated_protobuf(ws, fraction):
    data = (ws / "model.onnx").read_bytes()
    (ws / "cut.onnx").write_bytes(data[: int(len(data) * fraction)])
    proc = npuscope("run", "cut.onnx", "--inputs", "model.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "cut.onnx", out=ws / "out")


@pytest.mark.parametrize("version", [99, 3])
def test_unsupported_opset(ws, version):
    m = onnx.load(ws / "model.onnx")
    m.opset_import[0].version = version
    onnx.save(m, ws / "opset.onnx")
    proc = npuscope("run", "opset.onnx", "--inputs", "model.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "opset.onnx", f"opset {version}", out=ws / "out")


@pytest.mark.parametrize("domain", ["", "com.example.nothere"])
def test_unknown_op(ws, domain):
    m = onnx.load(ws / "model.onnx")
    m.graph.node[1].op_type = "FrobnicateAdd"
    m.graph.node[1].domain = domain
    if domain:
        m.opset_import.append(helper.make_opsetid(domain, 1))
    onnx.save(m, ws / "unknown.onnx")
    proc = npuscope("run", "unknown.onnx", "--inputs", "model.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "FrobnicateAdd", "add_one", out=ws / "out")


# ------------------------------------------------------------------ npz feeds
def test_missing_npz(ws):
    proc = npuscope("run", "model.onnx", "--inputs", "nothere.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "nothere.npz", out=ws / "out")


def test_npz_that_is_not_an_npz(ws):
    (ws / "junk.npz").write_text("not a zip archive")
    proc = npuscope("run", "model.onnx", "--inputs", "junk.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "junk.npz", out=ws / "out")


def test_npz_wrong_input_name(ws):
    np.savez(ws / "bad.npz", not_x=np.zeros((1, 16), np.float32))
    proc = npuscope("run", "model.onnx", "--inputs", "bad.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "bad.npz", "not_x", "'x'", out=ws / "out")


def test_npz_missing_one_of_two_inputs(tmp_path):
    b = fk.attention_mask(heads=1, seq=8, masked=2)
    b.save(tmp_path, "m")
    np.savez(tmp_path / "half.npz", scores=b.feeds["scores"])
    proc = npuscope("run", "m.onnx", "--inputs", "half.npz", "--out", "out", cwd=tmp_path)
    assert_one_line_error(proc, 2, "half.npz", "mask", out=tmp_path / "out")


@pytest.mark.parametrize("shape", [(1, 8), (16,), (2, 16), (1, 16, 1)])
def test_npz_wrong_shape(ws, shape):
    np.savez(ws / "bad.npz", x=np.zeros(shape, np.float32))
    proc = npuscope("run", "model.onnx", "--inputs", "bad.npz", "--out", "out", cwd=ws)
    line = assert_one_line_error(proc, 2, "bad.npz", "'x'", out=ws / "out")
    assert "shape" in line


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64"])
def test_npz_wrong_dtype(ws, dtype):
    np.savez(ws / "bad.npz", x=np.zeros((1, 16), dtype))
    proc = npuscope("run", "model.onnx", "--inputs", "bad.npz", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "bad.npz", "'x'", dtype, out=ws / "out")


def test_pickled_npz_is_refused_without_unpickling(ws):
    marker = ws / "unpickled.marker"

    class Boom:  # unpickling this would create the marker file
        def __reduce__(self):
            return (Path.touch, (marker,))

    np.savez(ws / "pickled.npz", x=np.array([Boom(), None], dtype=object))
    proc = npuscope("run", "model.onnx", "--inputs", "pickled.npz", "--out", "out", cwd=ws)
    line = assert_one_line_error(proc, 2, "pickled.npz", "'x'", out=ws / "out")
    assert "pickle" in line
    assert not marker.exists(), "the npz was unpickled"


# ------------------------------------------------------------------ config and usage errors (exit 2)
@pytest.mark.parametrize("suffix,text", [(".json", '{"precison_mode": "force_fp16"}'),
                                         (".toml", 'precison_mode = "force_fp16"\n')])
def test_config_key_typo(ws, suffix, text):
    (ws / f"cfg{suffix}").write_text(text)
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--config", f"cfg{suffix}", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "precison_mode", "did you mean 'precision_mode'", out=ws / "out")


def test_config_value_typo(ws):
    (ws / "cfg.json").write_text(json.dumps({"precision_mode": "force_fp61"}))
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--config", "cfg.json", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "force_fp61", "did you mean 'force_fp16'", out=ws / "out")


def test_config_not_json(ws):
    (ws / "cfg.json").write_text("{precision_mode: force_fp16")
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--config", "cfg.json", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "cfg.json", out=ws / "out")


def test_keep_dtype_names_an_unknown_node(ws):
    (ws / "cfg.json").write_text(json.dumps({"precision_mode": "force_fp16", "keep_dtype": ["exq"]}))
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--config", "cfg.json", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "'exq'", "did you mean 'exp'", out=ws / "out")


def test_unknown_cli_option(ws):
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--precison-mode", "force_fp16", "--out", "out",
                    cwd=ws)
    line = assert_one_line_error(proc, 2, "--precison-mode", out=ws / "out")
    assert "did you mean" in line.lower() and "--precision-mode" in line


def test_bad_option_value(ws):
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--fusion-level", "7", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "--fusion-level", out=ws / "out")


# ------------------------------------------------------------------ external data
def _external_model(folder: Path, location: str, name: str = "ext.onnx") -> Path:
    """The softplus model with its constant 'one' stored as external data at ``location``."""
    m = fk.softplus(width=16, xmax=5.0).model
    t = numpy_helper.from_array(np.ones((), np.float32), "one")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    del m.graph.initializer[:]
    m.graph.initializer.append(t)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(m.SerializeToString())
    return path


@pytest.fixture()
def ext_ws(ws):
    """ws/model/ holds the models; ws/outside.bin is a real (readable) data file outside that folder."""
    (ws / "outside.bin").write_bytes(np.ones((), np.float32).tobytes())
    (ws / "model").mkdir()
    return ws


def test_external_data_inside_the_folder_is_accepted(ext_ws):
    (ext_ws / "model" / "inside.bin").write_bytes(np.ones((), np.float32).tobytes())
    _external_model(ext_ws / "model", "inside.bin")
    proc = npuscope("run", "model/ext.onnx", "--inputs", "model.npz", "--out", "out", cwd=ext_ws)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "nested_dotdot"])
def test_external_data_outside_the_model_folder_is_refused(ext_ws, kind):
    outside = (ext_ws / "outside.bin").resolve()
    if kind == "dotdot":
        loc = "../outside.bin"
    elif kind == "nested_dotdot":
        (ext_ws / "model" / "sub").mkdir()
        loc = "sub/../../outside.bin"
    elif kind == "absolute":
        loc = str(outside)
    else:
        (ext_ws / "model" / "link.bin").symlink_to(outside)
        loc = "link.bin"
    _external_model(ext_ws / "model", loc)
    proc = npuscope("run", "model/ext.onnx", "--inputs", "model.npz", "--out", "out", cwd=ext_ws)
    line = assert_one_line_error(proc, 2, "'one'", loc, out=ext_ws / "out")
    assert "outside" in line or "absolute" in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_external_data_outside_is_refused_without_touching_a_fifo(ws):
    """Black box: the outside 'data file' is a named pipe, so any attempt to read it would block; the CLI
    must answer with the one-line refusal well before the timeout."""
    os.mkfifo(ws / "outside.bin")
    (ws / "model").mkdir()
    _external_model(ws / "model", "../outside.bin")
    try:
        proc = subprocess.run([sys.executable, "-m", "toolkit", "run", "model/ext.onnx", "--inputs", "model.npz",
                               "--out", "out"], cwd=ws, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONWARNINGS="ignore"))
    except subprocess.TimeoutExpired:
        pytest.fail("npuscope blocked on the outside named pipe: it opened the file before refusing the path")
    assert_one_line_error(proc, 2, "'one'", "../outside.bin", out=ws / "out")


# ------------------------------------------------------------------ output folders
def test_out_folder_not_empty_is_refused_and_untouched(ws):
    out = ws / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    before = sorted(p.name for p in out.iterdir())
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--out", "existing", cwd=ws)
    assert_one_line_error(proc, 2, "existing")
    assert sorted(p.name for p in out.iterdir()) == before
    assert (out / "keep.txt").read_text() == "precious"


def test_failure_inside_the_output_folder_removes_it(ws):
    """--dump into a non-empty folder fails after the --out folder was created: it must be removed again."""
    dump = ws / "dumps"
    dump.mkdir()
    (dump / "old.npy").write_text("old")
    proc = npuscope("run", "model.onnx", "--inputs", "model.npz", "--dump", "dumps", "--out", "out", cwd=ws)
    assert_one_line_error(proc, 2, "dumps", out=ws / "out")
    assert not (ws / "out").exists()
    assert [p.name for p in dump.iterdir()] == ["old.npy"]


# ------------------------------------------------------------------ strict reading of the bar
def test_bad_input_prints_nothing_but_the_error_line(ws):
    """Strictly, stderr on bad input is exactly the one error line (no progress chatter before it)."""
    np.savez(ws / "bad.npz", x=np.zeros((1, 3), np.float32))
    proc = npuscope("run", "model.onnx", "--inputs", "bad.npz", "--out", "out", cwd=ws)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == error_lines(proc.stderr), proc.stderr


def _expected_y():
    return X_16_64 * np.float32(2.0) + X_16_64 * np.float32(3.0)  # by hand: the model's arithmetic in float32


@pytest.mark.parametrize("output, dump, out", [
    ("same", "same", "o"),                 # the same new path for the npz file and the dump folder
    ("same.npz", "same.npz", "o"),
    ("d/x.npz", "d", "o"),                 # the npz inside the dump folder (which must be new or empty)
    ("o", None, "o"),                      # the npz file is the --out folder
])
def test_output_paths_that_collide_are_a_usage_error_before_anything_is_written(tiny_compiled, tmp_path, output, dump, out):
    argv = ["-q", "run", str(tiny_compiled / "m.onnx"), "--inputs", str(tiny_compiled / "x.npz"), "--output", output, "--out", out]
    if dump:
        argv += ["--dump", dump]
    proc = _cli_argv(argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--save-outputs" in _one_error_line(proc)  # --output is its older (hidden) name
    assert list(tmp_path.iterdir()) == []  # nothing written: not the npz, not the dumps, not --out


def test_existing_output_file_is_refused_before_running(tiny_compiled, tmp_path):
    (tmp_path / "taken.npz").write_bytes(b"keep me")
    proc = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--output", "taken.npz", "--out", "o"], cwd=tmp_path)
    assert proc.returncode == 2 and "already exists" in _one_error_line(proc)
    assert (tmp_path / "taken.npz").read_bytes() == b"keep me" and not (tmp_path / "o").exists()


def test_distinct_output_and_dump_still_work(tiny_compiled, tmp_path):
    proc = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--config", str(tiny_compiled / "fp32.json"), "--inputs",
                 str(tiny_compiled / "x.npz"), "--output", "y.npz", "--dump", "d", "--out", "o"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)
    assert (tmp_path / "d").is_dir() and any((tmp_path / "d").iterdir())


def _set_kernel(field, value, i=0):
    def edit(d):
        d["kernels"][i][field] = value
    return edit


def _set_tensor(field, value, i=0):
    def edit(d):
        d["tensors"][i][field] = value
    return edit


EDITS = {
    "arena_bytes-str": (lambda d: d.update(arena_bytes="big"), "'arena_bytes'"),
    "arena_bytes-negative": (lambda d: d.update(arena_bytes=-5), "'arena_bytes'"),
    "version-99": (lambda d: d.update(version=99), "'version'"),
    "alignment-float": (lambda d: d.update(alignment=1.5), "'alignment'"),
    "kernels-not-list": (lambda d: d.update(kernels=5), "'kernels'"),
    "unknown-top-field": (lambda d: d.update(extra=1), "'extra'"),
    "precision-fp8": (_set_kernel("precision", "fp8"), "'precision'"),
    "placement-GPU": (_set_kernel("placement", "GPU"), "'placement'"),
    "kernel-inputs-str": (_set_kernel("inputs", "x"), "'inputs'"),
    "tensor-offset-bool": (_set_tensor("offset", True), "'offset'"),
    "tensor-nbytes-str": (_set_tensor("nbytes", "64"), "'nbytes'"),
    "tensor-storage": (_set_tensor("storage", "disk"), "'storage'"),
    "tensor-shape": (_set_tensor("shape", ["16", 64]), "'shape'"),
    # well-typed edits of fields that are not editable: compared with the recompiled plan
    "precision-fp16": (_set_kernel("precision", "fp16"), "precision 'fp16'"),
    "placement-CPU": (_set_kernel("placement", "CPU"), "placement 'CPU'"),
    "implmode": (_set_kernel("implmode", "high_precision"), "implmode 'high_precision'"),
}


@pytest.mark.parametrize("command", ["run", "memcheck"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_bad_plan_field_is_exit_1_naming_file_and_field(tiny_compiled, tmp_path, command, edit):
    fn, named = EDITS[edit]
    d = json.loads((tiny_compiled / "c" / "plan.json").read_text())
    fn(d)
    bad = tmp_path / "edited_plan.json"
    bad.write_text(json.dumps(d))
    proc = _cli_argv(["-q", command, str(tiny_compiled / "m.onnx"), "--plan", str(bad), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert "edited_plan.json" in line and named in line, line
    assert not (tmp_path / "o").exists()


def test_offset_edit_is_still_accepted(tiny_compiled, tmp_path):
    d = json.loads((tiny_compiled / "c" / "plan.json").read_text())
    t = next(t for t in d["tensors"] if t["name"] == "a")
    t["offset"] = d["arena_bytes"]  # its own range after the arena
    d["arena_bytes"] += t["nbytes"]
    p = tmp_path / "moved.json"
    p.write_text(json.dumps(d))
    proc = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--plan", str(p), "--inputs", str(tiny_compiled / "x.npz"),
                 "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "o")])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)


@pytest.mark.parametrize("victim,writer", [("a", "b"), ("x", "a")])
def test_a_plan_that_overwrites_live_data_runs_but_says_so_and_exits_1(tiny_compiled, tmp_path, victim, writer):
    """A hand-edited plan.json that puts ``writer``'s bytes onto ``victim`` while ``victim`` is still to be read:
    the run goes on (the user asked for that plan), but the outputs are not the model's (checked against 5x,
    computed here), so it exits 1 with a WARNING naming both tensors and memcheck."""
    d = json.loads((tiny_compiled / "c" / "plan.json").read_text())
    by = {t["name"]: t for t in d["tensors"]}
    by[writer]["offset"] = by[victim]["offset"]
    p = tmp_path / "overlap.json"
    p.write_text(json.dumps(d))
    proc = _cli_argv(["run", str(tiny_compiled / "m.onnx"), "--plan", str(p), "--inputs", str(tiny_compiled / "x.npz"),
                      "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "o")])
    assert proc.returncode == 1, proc.stderr
    warning = next(line for line in proc.stdout.splitlines() if line.startswith("WARNING: the plan"))
    assert f"'{victim}'" in warning and f"'{writer}'" in warning and "npuscope memcheck" in warning
    assert not np.allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)


def test_run_plan_uses_the_plans_own_config(tiny_compiled, tmp_path):
    # the plan was compiled with force_fp32 / fusion 0; the defaults (mixed precision) give other kernels
    proc = _cli_argv(["-q", "run", "--plan", str(tiny_compiled / "c" / "plan.json"), "--inputs", str(tiny_compiled / "x.npz"),
                 "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "o")])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], _expected_y(), rtol=1e-6)
    ran = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert ran["config"]["precision_mode"] == "force_fp32"
    assert {k["precision"] for k in ran["kernels"]} == {"fp32"}


@pytest.mark.parametrize("command", ["run", "memcheck"])
def test_plan_with_invalid_recorded_config_is_exit_2(tiny_compiled, tmp_path, command):
    d = json.loads((tiny_compiled / "c" / "plan.json").read_text())
    d["config"]["precision_mode"] = "bogus"
    p = tmp_path / "bogus.json"
    p.write_text(json.dumps(d))
    proc = _cli_argv(["-q", command, "--plan", str(p), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc)
    assert "bogus.json" in line and "precision_mode" in line


def test_run_plan_with_explicit_config_uses_that_config(tiny_compiled, tmp_path):
    # --precision-mode given: the plan is checked against that compile (mixed precision differs from the plan)
    proc = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--plan", str(tiny_compiled / "c" / "plan.json"), "--precision-mode",
                 "force_fp16", "--out", str(tmp_path / "o")])
    assert proc.returncode == 2 and "plan.json" in _one_error_line(proc)


def test_npz_member_that_is_not_npy_is_named(tiny_compiled, tmp_path):
    bad = tmp_path / "garbage.npz"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("x.npy", b"garbage bytes!!")
    proc = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--inputs", str(bad), "--out", str(tmp_path / "o")])
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "'x.npy' is not a valid .npy array" in line and "dtype" not in line


def test_npz_path_that_is_not_a_regular_file(tiny_compiled, tmp_path):
    proc = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--inputs", os.devnull, "--out", str(tmp_path / "o")])
    assert proc.returncode == 2
    line = _one_error_line(proc)
    assert "not a regular file" in line and "character device" in line and "does not exist" not in line
    missing = _cli_argv(["-q", "run", str(tiny_compiled / "m.onnx"), "--inputs", str(tmp_path / "nope.npz"), "--out",
                    str(tmp_path / "o")])
    assert missing.returncode == 2 and "does not exist" in _one_error_line(missing)


@pytest.mark.parametrize("elem, dtype, op, rng, limits", [
    (TensorProto.FLOAT16, "float16", "Neg", "x:[-1e6,1e6]", "[-65504, 65504]"),
    (TensorProto.FLOAT16, "float16", "Neg", "[0,7e4]", "[-65504, 65504]"),  # a bare range applies to x too
    (TensorProto.INT8, "int8", "Identity", "x:[-1000,0]", "[-128, 127]"),
    (TensorProto.UINT8, "uint8", "Identity", "x:[-1,10]", "[0, 255]"),
    (TensorProto.FLOAT, "float32", "Neg", "x:[0,1e39]", "3.4028235e+38"),
])
def test_cli_val_range_outside_the_dtype_is_a_usage_error(tmp_path, elem, dtype, op, rng, limits):
    model = save_model(tmp_path / "m.onnx", elem, op)
    for cmd in ("run", "diagnose") if dtype == "float16" and rng.startswith("x") else ("run",):
        res = quiet_cli_with_warnings(cmd, model, "--val-range", rng, "--out", tmp_path / f"o_{cmd}")
        line = one_line_error_without_warning(res, 2)
        assert "--val-range" in line and "'x'" in line and dtype in line and limits in line, line
        assert "NaN" not in line and "inputs" not in line.split("--val-range", 1)[0]
        assert not (tmp_path / f"o_{cmd}").exists()


def test_cli_float64_input_may_use_the_float64_range(tmp_path):
    model = save_model(tmp_path / "m.onnx", TensorProto.DOUBLE, "Neg")
    res = quiet_cli_with_warnings("run", model, "--val-range", "x:[-1e300,1e300]", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    with np.load(tmp_path / "o" / "outputs.npz") as z:
        y = z["y"]
    assert y.dtype == np.float64 and np.isfinite(y).all() and np.abs(y).max() <= 1e300
    assert np.abs(y).max() > 1e200  # really drawn from the wide range (8 uniform values: P(all < 1e200) ~ 0)


def test_cli_run_plan_with_edited_nbytes_names_the_field(tmp_path):
    assert quiet_cli_with_warnings("compile", "resnet_small", "--out", tmp_path / "c").returncode == 0
    d = json.loads((tmp_path / "c" / "plan.json").read_text())
    t = next(t for t in d["tensors"] if t["name"] == "stem_relu")
    old, t["nbytes"] = t["nbytes"], t["nbytes"] - 1
    (tmp_path / "p.json").write_text(json.dumps(d))
    line = one_line_error_without_warning(quiet_cli_with_warnings("run", "resnet_small", "--plan", tmp_path / "p.json", "--out", tmp_path / "o"), 2)
    assert f"nbytes {old - 1} but the compiled model has {old}" in line, line


def _cli_with_env(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def _reachable(root) -> bool:
    base = root / store.LAYOUT
    bundles = {p.name for p in (base / "bundle").glob("*")} if (base / "bundle").is_dir() else set()
    compiles = {p.name for p in (base / "compile").glob("*")} if (base / "compile").is_dir() else set()
    return bundles <= compiles


def test_cli_run_with_small_cache_limit_keeps_only_reachable_bundles(tmp_path):
    env = {**os.environ, "NPUSCOPE_COMPILE_CACHE": str(tmp_path / "cc"), "NPUSCOPE_COMPILE_CACHE_MODE": "enable",
           "NPUSCOPE_COMPILE_CACHE_MAX_BYTES": "300000"}
    r = _cli_with_env("run", "resnet_small", "--out", tmp_path / "r", env=env)
    assert r.returncode == 0, r.stderr
    base = tmp_path / "cc" / store.LAYOUT
    files = [p for p in base.glob("*/*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 300000
    assert _reachable(tmp_path / "cc")
    info = _cli_with_env("cache", "info", env=env)
    assert info.returncode == 0
    n_bundle = len(list((base / "bundle").glob("*"))) if (base / "bundle").is_dir() else 0
    n_compile = len(list((base / "compile").glob("*"))) if (base / "compile").is_dir() else 0
    assert n_bundle <= n_compile


F16 = np.float16


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
    r = cli_with_env("run", str(model), "--config", str(tmp_path / cfg_file), "--inputs", str(tmp_path / "in.npz"),
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
    r = cli_with_env("run", str(model), "--config", str(tmp_path / "c.toml"), "--inputs", str(tmp_path / "in.npz"),
            "--output", str(tmp_path / "o.npz"), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    m = np.load(tmp_path / "o.npz")["m"]
    want = x.astype(F16).astype(np.float64).mean(axis=1, keepdims=True).astype(F16)
    assert np.all(np.isfinite(m.astype(np.float64)))
    assert np.abs(m.astype(F16).view(np.int16).astype(int) - want.view(np.int16).astype(int)).max() <= 1


ROWS, COLS = 4, 4096


def test_run_of_an_overflowing_layernorm_prints_no_numpy_warning(tmp_path):
    x = np.random.default_rng(3).uniform(0, 100, (2, COLS)).astype(np.float32)
    assert x.astype(np.float64).sum(1).max() > FP16_MAX
    m = _model([helper.make_node("LayerNormalization", ["x", "g"], ["y"], name="ln", axis=-1)],
               [("x", [2, COLS])], [("y", [2, COLS])], {"g": np.ones(COLS)})
    onnx.save(m, tmp_path / "ln.onnx")
    np.savez(tmp_path / "ln.npz", x=x)
    r = _cli("run", str(tmp_path / "ln.onnx"), "--inputs", str(tmp_path / "ln.npz"), "--precision-mode",
             "force_fp16", "--output", str(tmp_path / "y.npz"), "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    assert "RuntimeWarning" not in r.stderr, r.stderr
    assert not np.isfinite(np.load(tmp_path / "y.npz")["y"]).all()  # the simulated device overflow stays


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", ["STRING", "BFLOAT16", "INT4", "FLOAT8E5M2"])
def test_run_outputs_and_dumps_read_back(name, tmp_path):
    from toolkit.dumps.readers import SideSpec, read_side

    path = _save(CPU_MODELS[name], tmp_path)
    np.savez(tmp_path / "in.npz", x=FEED)
    res = _run_cli("run", path, "--inputs", "in.npz", "--out", "o", "--dump", "d", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    golden = _reference_output(name)
    with np.load(tmp_path / "o" / "outputs.npz", allow_pickle=False) as z:
        stored = z["y"]
    assert stored.dtype.kind in "biufU"
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    entry = next(v for v in index.values() if v["tensor"] == "y")
    assert entry["dtype"] == str(golden.dtype)
    assert entry["stored_dtype"] == str(stored.dtype)
    dumped = next(e for e in read_side(SideSpec(str(tmp_path / "d"), "target")).entries if e.name == "y").load()
    if golden.dtype.kind == "O":
        assert dumped.dtype.kind == "U" and dumped.tolist() == golden.tolist() and stored.tolist() == golden.tolist()
    else:  # the reader restores the ml_dtypes dtype index.json records; outputs.npz holds the exact standard form
        assert dumped.dtype == golden.dtype and dumped.tobytes() == golden.tobytes()
        assert stored.astype(golden.dtype).tobytes() == golden.tobytes()


def _cli_user_path(*args, cwd, env_path: Path | None = None, timeout=300):
    import os

    env = dict(os.environ)
    if env_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(env_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def test_cli_run_takes_a_folder_holding_one_set(m1):
    (m1 / "ds").mkdir()
    np.savez(m1 / "ds" / "only.npz", x=X_4_8)
    res = _cli_user_path("run", "m1.onnx", "--precision-mode", "force_fp32", "--inputs", "ds", "--out", "o", cwd=m1)
    assert res.returncode == 0, res.stderr
    np.testing.assert_allclose(np.load(m1 / "o" / "outputs.npz")["y"], 3 * X_4_8 + 1, rtol=1e-6)


def test_cli_string_input_runs_end_to_end(tmp_path):
    _string_model(tmp_path / "s.onnx")
    np.savez(tmp_path / "u.npz", x=np.array(["hello", "wörld"]))
    res = _cli_user_path("run", "s.onnx", "--inputs", "u.npz", "--out", "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = np.load(tmp_path / "o" / "outputs.npz", allow_pickle=True)["y"]  # our own file (Identity of x)
    assert out.tolist() == ["hello", "wörld"]


def test_cli_big_endian_inputs_compute_the_right_outputs(m1):
    np.savez(m1 / "be.npz", x=X_4_8.astype(">f4"))
    res = _cli_user_path("run", "m1.onnx", "--precision-mode", "force_fp32", "--inputs", "be.npz", "--out", "o", cwd=m1)
    assert res.returncode == 0, res.stderr
    out = np.load(m1 / "o" / "outputs.npz")
    np.testing.assert_allclose(out["y"], 3 * X_4_8 + 1, rtol=1e-6)
    np.testing.assert_allclose(out["z"], np.exp(X_4_8), rtol=1e-6)


MASKED_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32;64,64"}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_compile_and_run_cli_with_gears(tmp_path):
    cfg = tmp_path / "gears.json"
    cfg.write_text(json.dumps({**MASKED_CFG, "pad_value": "mask:0"}))
    r = _cli("compile", "transformer_seq_masked", "--config", cfg, "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "c" / "gears.json").read_text())
    assert [g["label"] for g in meta["gears"]] == ["16x16", "32x32", "64x64"]
    for g in meta["gears"]:
        plan = json.loads((tmp_path / "c" / g["folder"] / "plan.json").read_text())
        assert plan["config"]["input_shape"] == g["input_shape"]
    feeds = samples.transformer_seq_masked_inputs(2, 20)
    np.savez(tmp_path / "in.npz", **feeds)
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert "gear 32x32" in r.stdout and "padding is safe" in r.stdout
    with np.load(tmp_path / "r" / "outputs.npz") as z:
        y = z["y"]
    ref = _ort(samples.build_transformer_seq_masked(), feeds)[0]
    np.testing.assert_allclose(y, ref, rtol=0, atol=2e-3 * np.abs(ref).max())
    assert json.loads((tmp_path / "r" / "gear.json").read_text())["padded"] is True
    big = samples.transformer_seq_masked_inputs(2, 70)
    np.savez(tmp_path / "big.npz", **big)
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "big.npz", "--out", tmp_path / "b")
    assert r.returncode == 2 and 'gears are dynamic_dims "16,16;32,32;64,64"' in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_run_cli_reports_the_unmasked_softmax(tmp_path):
    cfg = tmp_path / "gears.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64", "dynamic_dims": "16;32"}))
    r = _cli("run", "transformer_seq", "--config", cfg, "--out", tmp_path / "r")
    # the leak reaches the output y: the outputs are wrong, so exit 1, but everything is still written
    assert r.returncode == 1, r.stderr
    assert "first at 'attn_softmax' (Softmax)" in r.stdout and "FAILED: padding to gear 32 changes output(s) y" in r.stdout
    rep = json.loads((tmp_path / "r" / "padding.json").read_text())
    assert [(f["subject"], f["severity"]) for f in rep["findings"]] == [("attn_softmax", "error")]
    assert rep["outputs_leak"] == ["y"] and (tmp_path / "r" / "outputs.npz").is_file()
    bad = _cli("diagnose", "transformer_seq", "--config", cfg, "--out", tmp_path / "d")
    assert bad.returncode == 2 and "only 'compile' and 'run' choose a gear" in bad.stderr


FP32 = {"precision_mode": "force_fp32"}


def _error_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("npuscope: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _float_model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_shared_dim_cli_paths(tmp_path):
    """The tester's cases: a gear giving x[1] and mask[1] (both 'seq') two sizes, and --input-shape doing the same,
    refused with exit 2 before anything compiles; mismatched data exit 1."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,32;32,16"}))
    feeds = samples.transformer_seq_masked_inputs(0, 16)
    np.savez(tmp_path / "b16.npz", **feeds)
    for cmd in (["compile"], ["run", "--inputs", tmp_path / "b16.npz"]):
        r = _cli(cmd[0], "transformer_seq_masked", "--config", cfg, *cmd[1:], "--out", tmp_path / cmd[0])
        assert r.returncode == 2 and "dim 'seq' is 16 in x but 32 in mask" in _error_line(r)
        assert not (tmp_path / cmd[0]).exists()
    for cmd in ("compile", "run"):
        r = _cli(cmd, "transformer_seq_masked", "--input-shape", "x:1,16,64;mask:1,32", "--out", tmp_path / f"s{cmd}")
        assert r.returncode == 2 and "dim 'seq' is 16 in x but 32 in mask" in _error_line(r)
    np.savez(tmp_path / "skew.npz", x=feeds["x"], mask=np.ones((1, 8), np.float32))
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}))
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "skew.npz", "--out", tmp_path / "k")
    assert r.returncode == 2 and "'seq' is 16 in input 'x' but 8 in input 'mask'" in _error_line(r)


def test_compile_and_run_agree_on_a_static_batch(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:-1,3,32,32", "dynamic_batch_size": "1,2,4"}))
    for cmd in ("compile", "run"):
        r = _cli(cmd, "resnet_small", "--config", cfg, "--out", tmp_path / cmd)
        assert r.returncode == 2, r.stderr
        assert "-1 marks dim 0 of 'x' as a gear dim, but that dim is static (1)" in _error_line(r)


# ------------------------------------------------------------------------------ padding leaks and exit code (kind)
def _batch_sum_model():
    ax0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
    return _float_model([helper.make_node("ReduceSum", ["x", "ax0"], ["s"], name="bsum", keepdims=1),
                   helper.make_node("Add", ["x", "s"], ["y"], name="add")], [("x", ["N", 3])], [("y", ["N", 3])], [ax0])


def _dead_leak_model():
    """ReduceMean over the padded axis whose result is multiplied by 0 before the output: a leak that dies."""
    zero = numpy_helper.from_array(np.zeros((1, 1, 1), np.float32), "zero")
    return _float_model([helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[1], keepdims=1),
                   helper.make_node("Mul", ["mu", "zero"], ["z0"], name="mul0"),
                   helper.make_node("Add", ["x", "z0"], ["y"], name="add")],
                  [("x", [1, "seq", 4])], [("y", [1, "seq", 4])], [zero])


def test_run_exits_1_when_a_leak_reaches_an_output_and_still_writes_everything(tmp_path):
    onnx.save(_batch_sum_model(), tmp_path / "bsum.onnx")
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.savez(tmp_path / "in.npz", x=x)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:-1,3", "dynamic_batch_size": "2,4", "pad_value": "x:1", **FP32}))
    r = _cli("run", tmp_path / "bsum.onnx", "--config", cfg, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "r")
    assert r.returncode == 1, r.stderr
    assert "FAILED: padding to gear 4 changes output(s) y" in r.stdout and "ERROR   padding_leak: bsum" in r.stdout
    with np.load(tmp_path / "r" / "outputs.npz") as z:
        y = z["y"]
    np.testing.assert_allclose(y, x + x.sum(0) + 1)  # by hand: the padded row of ones joins the batch sum
    assert not np.allclose(y, x + x.sum(0))
    rep = json.loads((tmp_path / "r" / "padding.json").read_text())
    assert rep["outputs_leak"] == ["y"] and (tmp_path / "r" / "padding.csv").is_file()
    # a leak that dies before the output: warning, exit 0, outputs exact
    onnx.save(_dead_leak_model(), tmp_path / "dead.onnx")
    x = np.random.RandomState(1).rand(1, 5, 4).astype(np.float32)
    np.savez(tmp_path / "s.npz", x=x)
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,4", "dynamic_dims": "4;8", **FP32}))
    r = _cli("run", tmp_path / "dead.onnx", "--config", cfg, "--inputs", tmp_path / "s.npz", "--out", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    assert "WARNING padding_leak: mean" in r.stdout and "FAILED" not in r.stdout
    with np.load(tmp_path / "d" / "outputs.npz") as z:
        np.testing.assert_array_equal(z["y"], x)


def test_unknown_input_in_input_shape_is_a_config_error_with_did_you_mean(tmp_path):
    m = samples.build_transformer_seq_masked()
    with pytest.raises(ConfigError, match="input_shape names 'xx', which is not a model input \\(did you mean 'x'"):
        GearSession(m, config_from_dict({"input_shape": "xx:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}))
    with pytest.raises(ConfigError, match="names 'mask_', which is not a model input \\(did you mean 'mask'"):
        compile_model(m, config_from_dict({"input_shape": "x:1,8,64;mask_:1,8"}))
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "y:1,-1,64", "dynamic_dims": "16;32"}))
    for args in (["run", "transformer_seq", "--config", cfg], ["compile", "transformer_seq", "--input-shape", "xx:1,8,64"],
                 ["run", "transformer_seq", "--input-shape", "xx:1,8,64"]):
        r = _cli(*args, "--out", tmp_path / "o")
        assert r.returncode == 2, r.stderr
        assert "which is not a model input" in _error_line(r)


def test_run_into_a_new_out_still_works_with_output_inside_it(tiny):
    proc = _cli_cached(["run", "m.onnx", "--inputs", "x.npz", "--precision-mode", "force_fp32", "--out", "o",
                 "--output", "o/y.npz", "--dump", "d"], tiny, tiny / "cache")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tiny / "o" / "y.npz")["y"], X_2_8 * np.float32(2) + np.float32(1), rtol=1e-6)
    assert (tiny / "o" / "plan.json").is_file() and (tiny / "d" / "index.json").is_file()
    assert any(p.is_file() for p in (tiny / "cache").rglob("*"))  # the cache is on: the refusals above prove it
