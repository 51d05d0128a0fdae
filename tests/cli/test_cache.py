"""``npuscope cache info`` / ``clear`` in a subprocess: foreign files are left and reported, a cache folder that
is a file, an unwritable folder, and a namespace folder that is a symbolic link is never followed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cache.helpers import _foreign_tree, build, cfg, make_model
from toolkit.cache.settings import from_config
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError


def test_cli_clear_leaves_and_reports_foreign_files(tmp_path):
    folder = tmp_path / "myfiles"
    build(make_model(), cfg(folder))
    foreign = _foreign_tree(folder)

    def run_(*a):
        return subprocess.run([sys.executable, "-m", "toolkit", "cache", *a, "--dir", str(folder)],
                              capture_output=True, text=True, check=False)
    info = run_("info")
    assert info.returncode == 0, info.stderr
    assert "1 compile" in info.stdout and "ignored 8 file(s)" in info.stdout
    clear = run_("clear")
    assert clear.returncode == 0, clear.stderr
    assert "no entries; 0 B" in clear.stdout and "left 8 file(s)" in clear.stdout and "not cache entries" in clear.stdout
    assert all(f.read_text() == "user data" for f in foreign)


@pytest.mark.parametrize("under", [False, True])
def test_cache_folder_that_is_a_file_is_an_error(tmp_path, monkeypatch, under):
    f = tmp_path / "notes.txt"
    f.write_text("not a cache")
    where = f / "sub" if under else f
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(where))
    res = subprocess.run([sys.executable, "-m", "toolkit", "cache", "info"], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "NPUSCOPE_COMPILE_CACHE" in res.stderr and str(where) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "no entries" not in res.stdout
    # a compile stops with the same error instead of running without a cache
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE", str(where))
    with pytest.raises(ConfigError, match="environment variable NPUSCOPE_COMPILE_CACHE = .* not a folder"):
        compile_model(make_model(), Config(op_compiler_cache_mode="enable"), input_shapes={"x": (1, 3, 8, 8)})
    with pytest.raises(ConfigError, match="op_compiler_cache_dir = .* not a folder"):
        from_config(Config(op_compiler_cache_mode="enable", op_compiler_cache_dir=str(where)))
    assert from_config(Config(op_compiler_cache_mode="disable")).mode == "disable"  # a disabled cache is not checked
    assert f.read_text() == "not a cache"


def test_cli_cache_info_and_clear(tmp_path):
    build(make_model(), cfg(tmp_path))
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(tmp_path))
    info = subprocess.run([sys.executable, "-m", "toolkit", "cache", "info"], capture_output=True, text=True, env=env)
    assert info.returncode == 0, info.stderr
    assert str(tmp_path) in info.stdout and "1 compile" in info.stdout
    clear = subprocess.run([sys.executable, "-m", "toolkit", "cache", "clear"], capture_output=True, text=True, env=env)
    assert clear.returncode == 0 and "no entries; 0 B" in clear.stdout
    assert not (tmp_path / "v1").exists()
    bad = subprocess.run([sys.executable, "-m", "toolkit", "cache", "purge"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2


REPO = Path(__file__).resolve().parents[2]


def _cli_argv(argv, env=None, cwd=None, timeout=300):
    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout, env=full)


def _one_error_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def _unwritable_dir(tmp_path) -> Path:
    """A folder that exists and cannot be written: chmod 0o500 for a normal user; root ignores permissions,
    so a folder under /proc (a virtual file system refusing new files)."""
    if os.geteuid() == 0:
        return Path("/proc/1")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    return d


def test_unwritable_compile_cache_is_reported_by_info_and_refused_by_clear(tmp_path):
    ro = _unwritable_dir(tmp_path)
    env = {"NPUSCOPE_COMPILE_CACHE": str(ro)}
    info = _cli_argv(["cache", "info"], env=env)
    assert info.returncode == 0, info.stderr
    warn = [ln for ln in info.stdout.splitlines() if "not writable" in ln]
    assert len(warn) == 1 and str(ro) in warn[0]
    clear = _cli_argv(["cache", "clear"], env=env)
    assert clear.returncode == 2
    assert "not writable" in _one_error_line(clear)
    ok = _cli_argv(["cache", "info", "--dir", str(tmp_path / "fresh")])  # a new folder that can be created
    assert ok.returncode == 0 and "not writable" not in ok.stdout
    assert not (tmp_path / "fresh").exists()  # info creates nothing


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def test_cache_clear_does_not_follow_a_linked_namespace_folder(tmp_path):
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    (cache / "v2").mkdir(parents=True)
    outside.mkdir()
    precious = outside / ("a" * 64)
    precious.write_text("precious")
    (cache / "v2" / "recipes").symlink_to(outside)
    env = {"NPUSCOPE_COMPILE_CACHE": str(cache)}
    info = _cli("cache", "info", env=env)
    assert info.returncode == 0 and "recipes" not in info.stdout.split("entries:")[1].split("\n")[0], info.stdout
    clear = _cli("cache", "clear", env=env)
    assert clear.returncode == 0, clear.stderr
    assert precious.read_text() == "precious"


def test_cache_info_on_a_folder_that_does_not_exist_says_so_and_creates_nothing(tmp_path):
    """`cache info --dir` on a mistyped folder had read as an empty cache: it says the folder does not exist
    (and that a compile would create it), exit 0, and creates nothing."""
    from toolkit.commands.cache import cache_command

    res = cache_command("info", str(tmp_path / "typo_cache"))
    assert any("does not exist yet" in line and "--dir" in line for line in res["summary"])
    assert not (tmp_path / "typo_cache").exists()
    (tmp_path / "real").mkdir()
    assert not any("does not exist" in line for line in cache_command("info", str(tmp_path / "real"))["summary"])
