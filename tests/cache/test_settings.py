"""Compile-cache settings (toolkit/cache/settings.py): where the folder is, the size limit from the
environment, and bad cache options as clear errors."""

from __future__ import annotations

import pytest

from tests.cache.helpers import build, cfg, make_model
from toolkit.commands.common import config_from_dict, load_config
from toolkit.cache.settings import default_dir, from_config
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError


def test_cache_size_limit_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "20000")
    build(make_model(), cfg(tmp_path))
    total = sum(f.stat().st_size for f in (tmp_path / "v1").rglob("*") if f.is_file())
    assert total <= 20000


def test_settings_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("NPUSCOPE_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == tmp_path / "xdg" / "npuscope" / "compile"
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE", str(tmp_path / "moved"))
    assert default_dir() == tmp_path / "moved"
    assert from_config(Config(op_compiler_cache_dir=str(tmp_path / "cfg"))).root == tmp_path / "cfg"
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MODE", "force")
    assert Config().op_compiler_cache_mode == "force"


def test_bad_cache_options_are_clear_errors(monkeypatch):
    with pytest.raises(ConfigError, match="op_compiler_cache_mode = 'enabled'.*did you mean 'enable'"):
        config_from_dict({"op_compiler_cache_mode": "enabled"})
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ConfigError, match="NPUSCOPE_COMPILE_CACHE_MAX_BYTES = 'lots'"):
        from_config(Config())
