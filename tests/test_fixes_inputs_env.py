"""Fault kinds found by the adversarial tester: environment variables, user text files (BOM, encodings),
npz files that are empty or not zip archives, error messages naming their source, silently accepted values.

CLI behaviour runs in a subprocess (the CLI enables a global onnxruntime thread pool)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.text import SUGGEST_MAX_NAMES
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError, ModelError

BOM = b"\xef\xbb\xbf"


def run_cli(*args, env=None, cwd=None, timeout=240):
    full = dict(os.environ)
    full.pop("NPUSCOPE_THREADS", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)


def error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npuscope:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture()
def tiny_model(tmp_path):
    """x[1,4] float32 -> MatMul 'mm' (W 4x4) -> Relu 'relu' -> y."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"), helper.make_node("Relu", ["t"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    return path


# ------------------------------------------------------------------------------------ 1. NPUSCOPE_THREADS
def test_threads_upper_bound_is_four_per_cpu(monkeypatch):
    from toolkit.ort.ort_env import intra_op_threads

    limit = 4 * (os.cpu_count() or 1)
    monkeypatch.setenv("NPUSCOPE_THREADS", str(limit))
    assert intra_op_threads() == limit
    for bad in (limit + 1, 99999, 10**40):
        monkeypatch.setenv("NPUSCOPE_THREADS", str(bad))
        with pytest.raises(ConfigError, match=rf"0\.\.{limit}\b"):
            intra_op_threads()


@pytest.mark.parametrize("value", ["99999", "100000000000000000000"])
def test_threads_too_many_is_a_config_error_on_the_cli(value):
    proc = run_cli("cache", env={"NPUSCOPE_THREADS": value})
    assert proc.returncode == 2
    line = error_line(proc)
    assert "NPUSCOPE_THREADS" in line and value[:40] in line and f"0..{4 * (os.cpu_count() or 1)}" in line


# ------------------------------------------------------------------------------------ 2. npz files, EOFError
def _bad_npz_files(tmp_path):
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    text = tmp_path / "text.npz"
    text.write_text("hello, not a zip\n")
    pickled = tmp_path / "pk.npz"
    pickled.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)  # a pickle header: numpy would suggest allow_pickle
    npy = tmp_path / "single.npz"
    with open(npy, "wb") as fh:
        np.save(fh, np.zeros((1, 4), np.float32))
    return {"empty (0 bytes)": empty, "not an npz (zip) archive": text, "not an npz (zip) archive ": pickled,
            "single-array .npy": npy}


def test_load_npz_refuses_empty_and_non_zip_files(tmp_path):
    from toolkit.inputs.npz import load_npz

    for expected, path in _bad_npz_files(tmp_path).items():
        with pytest.raises(InputError) as info:
            load_npz(path, [])  # refused before the arrays are checked against any model input
        msg = str(info.value)
        assert expected.strip() in msg and str(path) in msg and "allow_pickle" not in msg and "pickled" not in msg and "\n" not in msg


@pytest.mark.parametrize("command", ["run", "compare"])
def test_bad_npz_is_one_line_exit_1_in_every_command(tmp_path, tiny_model, command):
    for i, (expected, path) in enumerate(_bad_npz_files(tmp_path).items()):
        proc = run_cli(command, str(tiny_model), "--inputs", str(path), "--out", str(tmp_path / f"o{i}"))
        assert proc.returncode == 2, proc.stderr
        line = error_line(proc)
        assert expected.strip() in line and "aborted" not in proc.stderr and "allow_pickle" not in proc.stderr
        assert not (tmp_path / f"o{i}").exists()


_RAISE_IN_COMPILE = """
import os, signal, sys, time
import toolkit.api
from toolkit.cli import main

def boom(*a, **k):
    kind = sys.argv[1]
    if kind == "eof":
        raise EOFError("No data left in file")
    if kind == "int":
        raise KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)

toolkit.api.compile_command = boom
main(["compile", "resnet_small", "--out", sys.argv[2]])
"""


@pytest.mark.parametrize("kind, code, text", [("eof", 3, "internal error (EOFError"),
                                              ("int", 130, "npuscope: interrupted"),
                                              ("term", 143, "npuscope: interrupted (SIGTERM)")])
def test_eoferror_is_never_reported_as_an_abort(tmp_path, kind, code, text):
    env = dict(os.environ)
    env.pop("NPUSCOPE_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", _RAISE_IN_COMPILE, kind, str(tmp_path / "o")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stderr and "aborted" not in proc.stderr


# ------------------------------------------------------------------------------------ 3. warnings
def test_fp16_constant_issues_does_not_warn_and_counts_overflow():
    from toolkit.compiler.passes.check_constants import fp16_constant_issues

    a = np.array([1e6, -7e4, 65504.0, 1.0, 3e38], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ev = fp16_constant_issues(a)
    over = np.abs(a) > 65504.0  # float16 max, by hand
    assert ev["overflow"] == {"count": int(over.sum()), "absmax": float(np.abs(a[over]).max())}


def test_compare_prints_no_warning_from_check_constants(tmp_path):
    w = numpy_helper.from_array(np.full((1, 4), 1e6, np.float32), "W")
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "ovf",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "ovf.onnx")
    proc = run_cli("compare", str(tmp_path / "ovf.onnx"), "--out", str(tmp_path / "o"))
    assert "check_constants.py" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------ 4. BOM / encodings
def _write(path, text, bom=True):
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_config_files_with_bom_read_like_without(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder, bom in (("a", True), ("b", False)):
        d = tmp_path / folder
        _write(d / "keep.txt", "mm\nOpType::Softmax\n", bom)
        _write(d / "mix.json", json.dumps({"black-list": {"to-add": ["Relu"]}}), bom)
        _write(d / "switch.json", json.dumps({"Switch": {"UBFusion": {"ALL": "off"}}}), bom)
        _write(d / "c.toml", 'precision_mode = "force_fp16"\nkeep_dtype = "keep.txt"\nmodify_mixlist = "mix.json"\n'
                             'fusion_switch_file = "switch.json"\n', bom)
        _write(d / "c.json", json.dumps({"precision_mode": "force_fp16", "keep_dtype": "keep.txt"}), bom)
    for name in ("c.toml", "c.json"):
        with_bom, plain = Config.load(tmp_path / "a" / name), Config.load(tmp_path / "b" / name)
        assert with_bom.to_dict() == plain.to_dict()
        assert with_bom.keep_dtype == ["mm", "OpType::Softmax"] and with_bom.precision_mode == "force_fp16"


def test_policy_and_lengths_files_with_bom(tmp_path):
    from toolkit.commands.gears import read_lengths
    from toolkit.signoff.policy import load_policy

    text = '[outputs."*"]\nCosineSimilarity = 0.9\n'
    assert load_policy(_write(tmp_path / "p1.toml", text)).data == load_policy(_write(tmp_path / "p2.toml", text, False)).data
    assert read_lengths(_write(tmp_path / "l.txt", "10\n20\n7\n")).tolist() == [10, 20, 7]
    assert read_lengths(_write(tmp_path / "l.csv", "len,x\n5,1\n9,2\n"), column="len").tolist() == [5, 9]


def test_non_utf8_user_files_are_one_line_errors(tmp_path):
    from toolkit.commands.gears import read_lengths
    from toolkit.signoff.policy import load_policy

    bad = "precision_mode = 'caf\xe9'\n".encode("latin-1")
    (tmp_path / "c.toml").write_bytes(bad)
    (tmp_path / "p.toml").write_bytes(bad)
    (tmp_path / "l.txt").write_bytes(b"10\n\xff\n")
    for call, error in ((lambda: Config.load(tmp_path / "c.toml"), ConfigError),
                        (lambda: load_policy(tmp_path / "p.toml"), ConfigError),
                        (lambda: read_lengths(tmp_path / "l.txt"), InputError)):
        with pytest.raises(error, match=r"is not UTF-8 text \(byte 0x[0-9a-f]{2} at offset \d+\)") as info:
            call()
        assert "\n" not in str(info.value)


def test_cli_compiles_with_a_bom_config(tmp_path, tiny_model):
    _write(tmp_path / "keep.txt", "mm\n")
    cfg = _write(tmp_path / "c.toml", 'keep_dtype = "keep.txt"\n')
    proc = run_cli("compile", str(tiny_model), "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert plan["config"]["keep_dtype"] == ["mm"]


# ------------------------------------------------------------------------------------ 5. messages
def test_checker_message_keeps_the_node_name(tmp_path):
    from toolkit.ir.load import load_model

    graph = helper.make_graph(  # n1 reads 'b' before n2 produces it: not topologically sorted
        [helper.make_node("Add", ["a", "b"], ["c"], name="n1_node"), helper.make_node("Relu", ["a"], ["b"], name="n2")],
        "cycle", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "cycle.onnx")
    with pytest.raises(ModelError) as info:
        load_model(tmp_path / "cycle.onnx")
    assert "n1_node" in str(info.value) and "Add" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("offset, length, expected", [
    (10**15, None, "declares offset 1000000000000000, beyond the end of the data file (64 bytes)"),
    (0, 10**15, "declares 1000000000000000 bytes at offset 0, ending at byte 1000000000000000, beyond the end of "
                "the data file (64 bytes)"),
    (8, None, "the 56 bytes from there to the end of the file (64 bytes) are fewer than the 64 bytes"),
    (0, 32, "declares length 32 bytes, fewer than the 64 bytes the tensor needs"),
])
def test_external_data_extent_is_reported_as_declared(tmp_path, offset, length, expected):
    from toolkit.ir.load import load_model

    w = np.ones((4, 4), np.float32)  # 64 bytes
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    init = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4],
                            data_location=TensorProto.EXTERNAL)
    for key, val in (("location", "w.bin"), ("offset", offset), ("length", length)):
        if val is not None:
            init.external_data.add(key=key, value=str(val))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelError) as info:
        load_model(tmp_path / "m.onnx")
    assert expected in str(info.value) and "-99" not in str(info.value)


def test_model_cache_that_is_a_file_is_a_config_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    for value in (f, f / "sub"):
        proc = run_cli("compile", "ppocr_cls", "--out", str(tmp_path / "o"), env={"NPUSCOPE_MODEL_CACHE": str(value)})
        assert proc.returncode == 2, proc.stderr
        line = error_line(proc)
        assert "NPUSCOPE_MODEL_CACHE" in line and str(value) in line and "not a folder" in line


@pytest.mark.parametrize("name, content", [("/dev/null", None), ("empty.txt", b""), ("blank.txt", b"\n  \n")])
def test_empty_lengths_file_is_not_called_missing(tmp_path, name, content):
    from toolkit.commands.gears import read_lengths

    path = name if content is None else tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_lengths(path)
    msg = str(info.value)
    assert "does not exist" not in msg and ("is empty" in msg or "holds no lengths" in msg)
    if name == "/dev/null":
        assert "not a regular file" in msg


def test_gear_errors_name_the_config_file(tmp_path):
    cfg = tmp_path / "g.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,32;32,16"}))
    proc = run_cli("compile", "transformer_seq", "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert f"config '{cfg}'" in error_line(proc)


def test_unknown_op_type_lists_at_most_ten_names():
    names = {s.name for s in onnx.defs.get_all_schemas()}
    with pytest.raises(ConfigError) as info:
        Config.from_dict({"keep_dtype": ["OpType::Qwxzvkj"]})
    msg = str(info.value)
    assert msg.endswith(f", ... ({len(names) - SUGGEST_MAX_NAMES} more))")
    listed = msg.split("(valid: ")[1].split(", ...")[0].split(", ")
    assert listed == sorted(names)[:SUGGEST_MAX_NAMES]
    for field in ("optypelist_for_implmode", "modify_mixlist"):
        value = ["Qwxzvkj"] if field == "optypelist_for_implmode" else {"black-list": {"to-add": ["Qwxzvkj"]}}
        with pytest.raises(ConfigError, match=r"\.\.\. \(\d+ more\)\)$"):
            Config.from_dict({field: value})
    with pytest.raises(ConfigError, match=r"did you mean 'Softmax'\?"):
        Config.from_dict({"keep_dtype": ["OpType::Sofmax"]})
    with pytest.raises(ConfigError, match=r"did you mean 'MatMul'\?"):
        Config.from_dict({"optypelist_for_implmode": ["matmul"]})


# ------------------------------------------------------------------------------------ 6. silently accepted values
def test_log_to_stdout_values():
    from toolkit.logs.plog import to_stdout_from_env

    for val, want in (("1", True), ("TRUE", True), ("yes", True), ("on", True), ("0", False), ("false", False),
                      ("No", False), ("off", False), ("", False)):
        assert to_stdout_from_env({"NPUSCOPE_LOG_TO_STDOUT": val}) is want
    for bad in ("maybe", "2", "y"):
        with pytest.raises(ConfigError, match="NPUSCOPE_LOG_TO_STDOUT"):
            to_stdout_from_env({"NPUSCOPE_LOG_TO_STDOUT": bad})


def test_log_to_stdout_bad_value_on_the_cli():
    proc = run_cli("cache", env={"NPUSCOPE_LOG_TO_STDOUT": "maybe"})
    assert proc.returncode == 2 and "NPUSCOPE_LOG_TO_STDOUT='maybe'" in error_line(proc)


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


def test_mixlist_conflicts_are_refused():
    for mix, op in (({"black-list": {"to-add": ["MatMul"]}, "white-list": {"to-add": ["MatMul"]}}, "MatMul"),
                    ({"gray-list": {"to-add": ["Relu"]}, "black-list": {"to-add": ["Relu"]}}, "Relu"),
                    ({"white-list": {"to-add": ["Add"], "to-remove": ["Add"]}}, "Add")):
        with pytest.raises(ConfigError, match=f"'{op}'"):
            Config.from_dict({"modify_mixlist": mix})
    ok = {"black-list": {"to-add": ["MatMul"]}, "white-list": {"to-remove": ["MatMul"]}}
    assert Config.from_dict({"modify_mixlist": ok}).modify_mixlist == ok


def test_quiet_and_verbose_together_is_a_usage_error():
    proc = run_cli("-q", "-v", "cache")
    assert proc.returncode == 2 and "-q" in error_line(proc) and "-v" in error_line(proc)


# ------------------------------------------------------------------------------------ 7. cache warning once
def test_unwritable_cache_warns_once_per_process(tmp_path, caplog):
    from toolkit.cache import store

    blocker = tmp_path / "file"
    blocker.write_text("x")
    root = blocker / "cache"  # under a file: every write fails with NotADirectoryError
    store._UNWRITABLE_WARNED.discard(str(root))
    with caplog.at_level(logging.WARNING, logger="npuscope.cache"):
        logging.getLogger("npuscope").propagate = True
        try:
            for i in range(3):  # three stores, as compile, kernel and bundle caches open in one command
                s = store.EntryStore(root, limit=10**9)
                s.put("ns", f"{i:064x}", {"i": i}, b"payload")
                s.put("ns", f"{i + 10:064x}", {"i": i}, b"payload")
            store.flush()
        finally:
            logging.getLogger("npuscope").propagate = False
    hits = [r for r in caplog.records if "is not writable" in r.getMessage()]
    assert len(hits) == 1
