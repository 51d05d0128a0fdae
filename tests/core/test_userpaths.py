"""Paths the user names (toolkit/core/userpaths.py): every reason the file system refuses to look at one — a name
too long, a symbolic link loop, a file where a folder should be, permission denied — is one line naming the option,
the path, the reason and the fix; a path that is simply not there is None."""

from __future__ import annotations

import errno
import os

import pytest

from toolkit.core.errors import ConfigError, InputError, UsageError
from toolkit.core.userpaths import check_path, path_problem, shown_path

LONG = "a" * 300


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir").mkdir()
    return tmp_path


@pytest.mark.parametrize("rel,why", [
    (f"{LONG}", "one part of it is 300 bytes long, more than the 255 a file name may have here"),
    (f"dir/{LONG}/x", "one part of it is 300 bytes long"),
    (f"missing/{LONG}", "one part of it is 300 bytes long"),  # below a folder that does not exist yet
    ("/".join(["b" * 200] * 25), "bytes long, more than the 4095 a path may have here"),
    ("loop", "a symbolic link on it loops"),
    ("loop/x", "a symbolic link on it loops"),
    ("file.txt/x", "on it is a file, not a folder"),
    ("a\0b", "NUL character"),
])
def test_path_problem_names_each_reason(tree, rel, why):
    assert why in path_problem(tree / rel if "\0" not in rel else str(tree) + "/" + rel)


@pytest.mark.parametrize("rel", ["file.txt", "dir", "missing", "missing/x", "dangling", "a" * 255])
def test_a_path_that_exists_or_is_simply_not_there_has_no_problem(tree, rel):
    assert path_problem(tree / rel) is None


def test_check_path_stats_or_raises_one_line_of_the_callers_class(tree):
    assert check_path(tree / "file.txt", "--config").st_size == 1
    assert check_path(tree / "missing", "--out") is None and check_path(tree / "dangling", "--out") is None
    for error in (UsageError, InputError, ConfigError):
        with pytest.raises(error) as exc:
            check_path(tree / "dir" / LONG, "--out", error, "choose another --out")
        msg = str(exc.value)
        assert "\n" not in msg and msg.startswith("--out '") and msg.endswith("; choose another --out")
        assert "one part of it is 300 bytes long" in msg and "characters)' cannot be used: " in msg
    with pytest.raises(UsageError, match=r"/file.txt' on it is a file, not a folder; give another path$"):
        check_path(tree / "file.txt" / "x", "--dump")


def test_permission_denied_is_one_line(tree, monkeypatch):
    """EACCES (a folder on the way may not be searched; root is never refused, so the OS error is simulated)."""
    real = os.stat

    def stat(path, *a, **kw):
        if os.fsencode(path).endswith(b"/secret/x"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "stat", stat)
    with pytest.raises(InputError, match="^--inputs '.*/secret/x' cannot be used: permission denied: a folder on it "
                                         "may not be searched; give a readable folder$"):
        check_path(tree / "secret" / "x", "--inputs", InputError, "give a readable folder")


def test_shown_path_shortens_long_paths_only():
    assert shown_path("out/x") == "out/x"
    text = shown_path("out/" + LONG)
    assert text.startswith("out/aaa") and "..." in text and text.endswith("(304 characters)") and len(text) <= 140
    name = os.fsdecode(b"m\xff.onnx")
    assert shown_path(name) == name  # escaping is the printer's (toolkit.core.text.printable), not this
