"""``npuscope doctor`` in a subprocess: exit codes, a model without graph outputs, one JSON document for every
outcome, and the user's own environment settings told from the CLI's defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from toolkit import samples

TIMEOUT_S = 600


def test_cli_doctor_exit_zero():
    r = subprocess.run([sys.executable, "-m", "toolkit", "doctor", "resnet_small"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "doctor: OK" in r.stdout and "resnet_small' opset" in r.stdout


REPO = Path(__file__).resolve().parents[2]


def _cli_argv(argv, env=None, cwd=None, timeout=300):
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout, env=full)


def _relu_model(path: Path, with_output: bool) -> None:
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])] if with_output else []
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], outs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_doctor_fails_a_model_without_graph_outputs(tmp_path):
    _relu_model(tmp_path / "noout.onnx", with_output=False)
    _relu_model(tmp_path / "without.onnx", with_output=True)
    ok = _cli_argv(["doctor", str(tmp_path / "without.onnx")])
    assert ok.returncode == 0 and "doctor: OK" in ok.stdout, ok.stdout
    bad = _cli_argv(["doctor", str(tmp_path / "noout.onnx")])
    assert bad.returncode == 1
    assert any(ln.startswith("BAD") and "0 graph output(s)" in ln for ln in bad.stdout.splitlines()), bad.stdout
    js = _cli_argv(["doctor", "--json", str(tmp_path / "noout.onnx")])
    rep = json.loads(js.stdout)
    assert js.returncode == 1 and rep["ok"] is False
    (check,) = [c for c in rep["checks"] if c["name"] == "noout outputs"]
    assert check["passed"] is False and check["found"] == "0"


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


BIDI_CHARS = set(BIDI) | {"\u061c", "\u200e", "\u200f", "\u2028", "\u2029"}


def _cli_bytes(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONIOENCODING="utf-8", **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], cwd=REPO, capture_output=True,
                          timeout=timeout, env=full)


def _bad_chars(text: str) -> list[str]:
    """Characters that must not reach a terminal: C0 controls but LF, DEL and C1, bidi controls, separators."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in BIDI_CHARS]


def _assert_clean(raw: bytes, what: str) -> str:
    text = raw.decode("utf-8")  # strict: a lone surrogate or a broken sequence fails here too
    assert not _bad_chars(text), (what, sorted(set(map(hex, map(ord, _bad_chars(text))))), text[:2000])
    return text


def test_doctor_json_is_still_one_valid_json_document():
    import json

    proc = _cli_bytes("doctor", "--json")
    data = json.loads(_assert_clean(proc.stdout, "doctor --json"))
    assert set(data) >= {"ok", "checks", "environment"}


def _clean_env():
    from toolkit.core.env import RELEVANT_ENV

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


ENV = dict(os.environ, PYTHONWARNINGS="ignore")


TB = str(samples.sample_path("transformer_block"))


def cli_no_warnings(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=TIMEOUT_S, cwd=cwd, check=False)


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doctor")
    (tmp / "garbage.onnx").write_bytes(b"\x08\x07garbage, not a protobuf \xff\xfe")
    (tmp / "folder.onnx").mkdir()
    m = onnx.load(TB)
    m.opset_import[0].version = 99
    onnx.save(m, tmp / "opset99.onnx")
    return tmp


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("arg,code", [("missing.onnx", 2), ("garbage.onnx", 2), ("folder.onnx", 2),
                                      ("opset99.onnx", 1), ("resnet_small", 0)])
def test_doctor_json_for_every_outcome(bad_models, arg, code):
    target = arg if arg == "resnet_small" else bad_models / arg
    plain = cli_no_warnings("doctor", target)
    js = cli_no_warnings("doctor", "--json", target)
    assert plain.returncode == js.returncode == code, plain.stderr + js.stderr
    doc = json.loads(js.stdout)
    assert doc["ok"] is (code == 0)
    assert js.stderr.strip() == ""
    if arg in ("missing.onnx", "garbage.onnx", "folder.onnx"):
        assert doc["exit_code"] == code and arg in doc["error"]
    if arg == "opset99.onnx":  # read anyway: the opset check itself says why
        bad = {c["name"]: c for c in doc["checks"] if not c["passed"]}
        assert bad["opset99 opset"]["found"] == "99" and "opset99 loads" in bad
