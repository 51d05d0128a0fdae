"""Fault kinds of round 7 in the compile cache (toolkit.cache.store / settings):

- an intact entry stored under another key (copied, renamed, swapped between two models) is refused like a
  corrupted one, in every namespace: the run gives what a fresh compile gives;
- an entry path that is not a regular file (FIFO, symbolic link to /dev/zero or to another entry) is a warned
  miss: never waited on, never read without limit;
- a damaged cache layout (``v2`` or a namespace folder that is a file, a broken symbolic link as the folder) gives
  a message that says so, ``cache info`` warns, ``cache clear`` refuses, and a compile that cannot store its
  compile entry stores nothing else (no bundle nothing can reach).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.test_cache import W1, build, cfg, fresh, make_model, run
from toolkit.cache import store
from toolkit.cache.store import LAYOUT, unpack


def _swap(a, b):
    tmp = a.with_name("swap.tmp")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)


CLI = [sys.executable, "-m", "toolkit", "run", "resnet_small"]  # compiles and builds kernels: every namespace


def _cli(cache, *args, out):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache), NPUSCOPE_COMPILE_CACHE_MODE="enable",
               NPUSCOPE_LOG_LEVEL="2")  # warnings on stderr (docs/compile-cache.md)
    return subprocess.run([*CLI, *args, "--out", str(out)], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "link_to_entry"])
@pytest.mark.parametrize("ns", ["compile", "bundle", "family"])
def test_a_non_regular_entry_is_a_warned_miss(tmp_path, kind, ns):
    cache = tmp_path / "cache"
    first = _cli(cache, out=tmp_path / "o1")
    assert first.returncode == 0, first.stderr
    if ns == "family":  # read only when the exact compile entry misses
        for f in (cache / LAYOUT / "compile").iterdir():
            f.unlink()
    entries = sorted((cache / LAYOUT / ns).iterdir())
    target = entries[0]
    other = tmp_path / "elsewhere"
    os.replace(target, other)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev_zero":
        target.symlink_to("/dev/zero")
    else:
        target.symlink_to(other)  # even an intact entry is not read through a link
    proc = _cli(cache, out=tmp_path / "o2")  # a hang fails by the timeout
    assert proc.returncode == 0, proc.stderr
    assert "not a regular file" in proc.stderr, proc.stderr
    assert (tmp_path / "o2" / "plan.json").read_text() == (tmp_path / "o1" / "plan.json").read_text()
    a, b = np.load(tmp_path / "o1" / "outputs.npz"), np.load(tmp_path / "o2" / "outputs.npz")
    assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_broken_symlink_as_the_cache_folder_is_named_so(tmp_path):
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "gone")
    proc = _cli(link, out=tmp_path / "o")
    assert proc.returncode == 2, proc.stderr
    assert "broken symbolic link" in proc.stderr and "is a file" not in proc.stderr


@pytest.mark.parametrize("part", [LAYOUT, f"{LAYOUT}/compile", f"{LAYOUT}/bundle"])
def test_a_file_in_place_of_a_cache_folder(tmp_path, part):
    cache = tmp_path / "cache"
    (cache / part).parent.mkdir(parents=True, exist_ok=True)
    (cache / part).write_text("not a folder")
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(cache))
    info = subprocess.run([sys.executable, "-m", "toolkit", "cache", "info"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert info.returncode == 0 and "WARNING" in info.stdout and "is not a folder" in info.stdout, info.stdout
    clear = subprocess.run([sys.executable, "-m", "toolkit", "cache", "clear"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert clear.returncode == 2 and "is not a folder" in clear.stderr, clear.stderr
    proc = _cli(cache, out=tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert "compiling without storing entries" in proc.stderr
    def keys(ns):
        folder = cache / LAYOUT / ns
        return {p.name for p in folder.iterdir()} if folder.is_dir() else set()

    assert keys("bundle") <= keys("compile")  # no bundle that no compile entry reaches
    if part.endswith("compile"):  # the first entry failed: nothing after it stored
        assert not keys("bundle") | keys("kernel") | keys("family")
    assert (cache / part).read_text() == "not a folder"  # the user's file is left alone
