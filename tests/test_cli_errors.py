"""The acceptance bar for bad input: "Bad input gets a one-line error and exit code 1 (2 for usage errors)".

Each case runs ``npuscope run MODEL --inputs X.npz [--config CFG] --out <tmp>`` as a subprocess and checks:
the exit code; one error line on stderr, starting with ``npuscope: error:`` and naming the offending file /
tensor / key; no traceback; and no partial output folder (``--out`` does not exist or is empty).

The CLI prints progress lines (``[npuscope HH:MM:SS] ...``) to stderr; :func:`error_lines` sets them aside so
each case checks the error itself, and :func:`test_bad_input_prints_nothing_but_the_error_line` checks the
strict reading (stderr is exactly the one error line).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import faultkinds as fk

PROGRESS = re.compile(r"^\[npuscope \d\d:\d\d:\d\d\] ")
TIMEOUT_S = 120


def npuscope(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=env)


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


@pytest.fixture()
def ws(tmp_path):
    """A working folder with a valid model (softplus) and a valid feed."""
    b = fk.softplus(width=16, xmax=5.0)
    b.save(tmp_path, "model")
    return tmp_path


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


def _spy_reads(monkeypatch, target: Path) -> list:
    """Record every attempt to open ``target``: Python opens, os.open and onnx's external-data reader (which
    opens files in C++)."""
    import onnx.external_data_helper as edh

    target = target.resolve()
    opened: list = []

    def hits(base, loc=None) -> bool:
        try:
            p = Path(os.fsdecode(base)) if loc is None else Path(os.fsdecode(base)) / os.fsdecode(loc)
            return p.resolve() == target
        except (TypeError, ValueError, OSError):
            return False

    def wrap_path(real):
        def wrapper(file, *a, **kw):
            if hits(file):
                opened.append(("open", file))
            return real(file, *a, **kw)
        return wrapper

    real_fd = edh._open_external_data_fd

    def open_fd(base_dir, location, tensor_name, read_only):
        if hits(base_dir, location):
            opened.append(("onnx", location))
        return real_fd(base_dir, location, tensor_name, read_only)

    monkeypatch.setattr(builtins, "open", wrap_path(builtins.open))
    monkeypatch.setattr(io, "open", wrap_path(io.open))
    monkeypatch.setattr(os, "open", wrap_path(os.open))
    monkeypatch.setattr(edh, "_open_external_data_fd", open_fd)
    return opened


def test_read_spy_sees_an_inside_read(ext_ws, monkeypatch):
    """The spy below is not vacuous: it records the read of an accepted (inside) data file."""
    from toolkit.ir.load import load_model

    inside = ext_ws / "model" / "inside.bin"
    inside.write_bytes(np.ones((), np.float32).tobytes())
    path = _external_model(ext_ws / "model", "inside.bin")
    opened = _spy_reads(monkeypatch, inside)
    load_model(path)
    assert opened


@pytest.mark.parametrize("loc_kind", ["dotdot", "absolute", "symlink"])
def test_external_data_outside_is_refused_before_reading(ext_ws, monkeypatch, loc_kind):
    """In process: the loader refuses the path without opening the outside file."""
    from toolkit.core.errors import ModelError
    from toolkit.ir.load import load_model

    outside = (ext_ws / "outside.bin").resolve()
    if loc_kind == "symlink":
        (ext_ws / "model" / "link.bin").symlink_to(outside)
    loc = {"dotdot": "../outside.bin", "absolute": str(outside), "symlink": "link.bin"}[loc_kind]
    path = _external_model(ext_ws / "model", loc)
    opened = _spy_reads(monkeypatch, outside)
    with pytest.raises(ModelError, match="'one'"):
        load_model(path)
    assert not opened, f"the outside file was opened: {opened}"


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


def test_diagnose_bad_input_same_contract(ws):
    np.savez(ws / "bad.npz", x=np.zeros((1, 3), np.float32))
    proc = npuscope("diagnose", "model.onnx", "--inputs", "bad.npz", "--out", "rep", cwd=ws)
    assert_one_line_error(proc, 2, "bad.npz", "'x'", out=ws / "rep")
    proc = npuscope("diagnose", "nothere.onnx", "--out", "rep", cwd=ws)
    assert_one_line_error(proc, 2, "nothere.onnx", out=ws / "rep")


# ------------------------------------------------------------------ help
@pytest.mark.parametrize("args", [["--help"], ["diagnose", "--help"], ["run", "--help"], ["-h"]])
def test_help_exits_zero(tmp_path, args):
    proc = npuscope(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: ") and not proc.stderr


def test_console_script_help(tmp_path):
    script = Path(sys.executable).with_name("npuscope")
    if not script.exists():
        pytest.skip("npuscope console script not installed next to this interpreter")
    for args in (["--help"], ["diagnose", "--help"]):
        proc = subprocess.run([str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ strict reading of the bar
def test_bad_input_prints_nothing_but_the_error_line(ws):
    """Strictly, stderr on bad input is exactly the one error line (no progress chatter before it)."""
    np.savez(ws / "bad.npz", x=np.zeros((1, 3), np.float32))
    proc = npuscope("run", "model.onnx", "--inputs", "bad.npz", "--out", "out", cwd=ws)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == error_lines(proc.stderr), proc.stderr


@pytest.mark.parametrize("text,expect", [('{"precision_mode": "force_fp32"}', "force_fp32"),
                                         ('precision_mode = "force_fp16"', "force_fp16")])
def test_config_from_a_pipe_is_read_as_json_or_toml(tmp_path, text, expect):
    """--config <(echo ...) hands us a pipe with no suffix: it is read (JSON first, else TOML), not refused as
    'does not exist'."""
    import threading

    from toolkit.config.schema import Config

    fifo = tmp_path / "cfg"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    try:
        assert Config.load(str(fifo)).precision_mode == expect
    finally:
        writer.join(timeout=10)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_exits_128_plus_signal_and_leaves_no_folder(tmp_path, sig, code):
    """Kind: a run stopped by a signal (Ctrl-C, a CI timeout's SIGTERM). Exit code 128 + signal number, as
    shells report it, and the half-written output folder is removed."""
    (tmp_path / "slow.py").write_text("import time\nimport numpy as np\n"
                                      "def pre(i):\n    time.sleep(60)\n    return np.zeros((1, 3, 32, 32), np.float32)\n")
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "profile", "resnet_small", "--pre", "slow.py:pre",
                             "--requests", "2", "--out", "o"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    time.sleep(8)  # imports, compile, then the first (sleeping) pre-processing call
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())



@pytest.mark.parametrize("args,mention", [
    (["--val-range", "y:[0,1]"], "--val-range names 'y'"),
    (["--input-shape", "x:1,3,64,64"], "dim 2 is 32 in the model but 64 was given"),
    (["--input-shape", "y:1,3,32,32"], "'y'"),
])
def test_options_the_model_cannot_take_are_usage_errors(tmp_path, args, mention):
    """Kind: an option naming an input the model lacks or a shape its static dims refuse — a usage error
    (exit 2), found before any data is generated, whichever option carries it."""
    proc = npuscope("compare", "resnet_small", *args, "--out", "o", cwd=tmp_path)
    assert_one_line_error(proc, 2, mention, out=tmp_path / "o")
