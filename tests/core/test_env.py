"""The environment record (toolkit/core/env.py): every variable the package reads is listed (checked by
scanning the source), defaults npuscope sets are told from the user's, the compile cache folder and
distribution versions."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from toolkit.cache import settings as cache_settings
from toolkit.core import env as tkenv


@pytest.mark.parametrize("dist", sorted({*__import__("toolkit.core.env").core.env.PACKAGES, "onnxscript", "Jinja2", "ONNX_IR",
                                          "pytest", "no-such-distribution-xyz"}))
def test_fast_distribution_version_agrees_with_importlib_metadata(dist):
    from importlib import metadata

    from toolkit.core.env import dist_version

    try:
        want = metadata.version(dist)
    except metadata.PackageNotFoundError:
        want = None
    assert dist_version(dist) == want


def test_set_default_records_and_user_change_wins():
    from toolkit.core.env import DEFAULTED_ENV, defaulted, set_default

    environ = {"OPENBLAS_NUM_THREADS": "4"}
    assert set_default("OPENBLAS_NUM_THREADS", "1", environ) is False and environ["OPENBLAS_NUM_THREADS"] == "4"
    assert set_default("MKL_NUM_THREADS", "1", environ) is True
    assert environ[DEFAULTED_ENV] == "MKL_NUM_THREADS=1" and defaulted(environ) == {"MKL_NUM_THREADS": "1"}
    environ["MKL_NUM_THREADS"] = "8"  # changed after npuscope set it: the user's now
    assert defaulted(environ) == {}


ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolkit"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _loop_values(tree: ast.AST, name: str) -> list[str] | None:
    """String constants a ``for name in ("A", "B")`` loop (or comprehension) of ``tree`` binds ``name`` to."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and node.target.id == name and isinstance(node.iter, (ast.Tuple, ast.List)):
            vals = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(vals) == len(node.iter.elts):
                found = (found or []) + vals
    return found


def _resolve(arg: ast.AST, tree: ast.AST, module: str) -> list[str] | None:
    """The variable names ``arg`` (an expression naming an environment variable) stands for; None if unknown."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Name):
        looped = _loop_values(tree, arg.id)
        if looped is not None:
            return looped
        value = getattr(importlib.import_module(module), arg.id, None)
        return [value] if isinstance(value, str) else None
    return None


def _is_environ(expr: ast.AST) -> bool:
    return re.search(r"\benviron\b", ast.unparse(expr)) is not None


def environment_reads(source: str, module: str) -> tuple[set[str], list[str]]:
    """({variable names read or set}, [unresolved reads as 'line: code']) of a module's source: calls
    ``<environ>.get/pop/setdefault(X)``, ``os.getenv(X)``, ``set_default(X, ...)``, subscripts ``<environ>[X]``
    and tests ``X in <environ>``, where <environ> is any expression mentioning ``environ``."""
    tree = ast.parse(source)
    names, unknown = set(), []

    def take(arg, node):
        got = _resolve(arg, tree, module)
        if got is None:
            unknown.append(f"{node.lineno}: {ast.unparse(node)}")
        else:
            names.update(got)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and _is_environ(f.value)) \
                    or ast.unparse(f) in ("os.getenv", "getenv", "set_default"):
                take(node.args[0], node)
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            take(node.slice, node)
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops) \
                and any(_is_environ(c) for c in node.comparators):
            take(node.left, node)
    return names, unknown


def test_scanner_finds_every_form_of_read():
    """The scanner itself: each way of reading a variable is found (so the completeness test can fail)."""
    src = ('import os\nENV_X = "NPUSCOPE_CONST"\n'
           'a = os.environ.get("NPUSCOPE_DIRECT", "")\n'
           'b = os.environ.get(ENV_X)\n'
           'for var in ("OMP_A", "OMP_B"):\n    c = os.environ[var]\n'
           'd = "NPUSCOPE_IN" in os.environ\n'
           'e = (environ if environ is not None else os.environ).get("NPUSCOPE_IFEXP")\n'
           'f = os.getenv("ORT_GETENV")\n')
    mod = type(sys)("scanner_probe")
    mod.ENV_X = "NPUSCOPE_CONST"
    sys.modules["scanner_probe"] = mod
    try:
        names, unknown = environment_reads(src, "scanner_probe")
        _, unknown_param = environment_reads("import os\ndef f(k):\n    return os.environ.get(k)\n", "scanner_probe")
    finally:
        del sys.modules["scanner_probe"]
    assert names == {"NPUSCOPE_DIRECT", "NPUSCOPE_CONST", "OMP_A", "OMP_B", "NPUSCOPE_IN", "NPUSCOPE_IFEXP",
                     "ORT_GETENV"}
    assert unknown == []
    assert len(unknown_param) == 1  # a read through a parameter is flagged, not skipped


def test_relevant_env_lists_every_variable_the_package_reads():
    """Every environment variable read (or set) anywhere in toolkit/ is in RELEVANT_ENV or BOOKKEEPING_ENV;
    toolkit/core/env.py itself is the generic accessor (its names come from its callers, scanned here)."""
    listed = set(tkenv.RELEVANT_ENV) | set(tkenv.BOOKKEEPING_ENV)
    read, unknown = set(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "core" / "env.py":
            continue
        names, unk = environment_reads(path.read_text(encoding="utf-8"), _module_name(path))
        read |= names
        unknown += [f"{path.relative_to(ROOT)}:{u}" for u in unk]
    assert not unknown, f"environment reads the test cannot resolve (name them with a constant): {unknown}"
    assert {"NPUSCOPE_COMPILE_CACHE", "NPUSCOPE_COMPILE_CACHE_MODE", "NPUSCOPE_COMPILE_CACHE_MAX_BYTES",
            "NPUSCOPE_LOG_LEVEL", "NPUSCOPE_THREADS", "OMP_NUM_THREADS"} <= read  # the scan sees the known ones
    assert read - listed == set(), f"read but not recorded in toolkit.core.env.RELEVANT_ENV: {sorted(read - listed)}"


def test_every_npuscope_variable_name_in_the_source_is_listed():
    """A second net: any string literal shaped like an npuscope variable (NPUSCOPE_*) in toolkit/ is listed."""
    listed = set(tkenv.RELEVANT_ENV) | set(tkenv.BOOKKEEPING_ENV)
    seen = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"NPUSCOPE_[A-Z0-9_]+", node.value):
                seen.add(node.value)
    assert seen and seen - listed == set(), sorted(seen - listed)


def test_environment_records_cache_log_and_thread_variables(monkeypatch):
    want = {"NPUSCOPE_COMPILE_CACHE": "/tmp/some-cache", "NPUSCOPE_COMPILE_CACHE_MODE": "force",
            "NPUSCOPE_COMPILE_CACHE_MAX_BYTES": "12345", "NPUSCOPE_LOG_LEVEL": "2", "NPUSCOPE_LOG_TO_STDOUT": "0",
            "NPUSCOPE_LOG_FILE": "/tmp/x.log", "GOTO_NUM_THREADS": "3", "XDG_CACHE_HOME": "/tmp/xdg"}
    for k, v in want.items():
        monkeypatch.setenv(k, v)
    env = tkenv.environment()["env"]
    assert {k: env.get(k) for k in want} == want


def test_compile_cache_names_the_folder_used(monkeypatch, tmp_path):
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE", str(tmp_path / "from-env"))
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "777")
    cfg = {"op_compiler_cache_mode": "enable", "op_compiler_cache_dir": ""}
    assert cache_settings.compile_cache(cfg) == {"mode": "enable", "dir": str(tmp_path / "from-env"),
                                        "dir_from": "NPUSCOPE_COMPILE_CACHE", "max_bytes": 777}
    cfg["op_compiler_cache_dir"] = str(tmp_path / "explicit")
    got = cache_settings.compile_cache(cfg)
    assert (got["dir"], got["dir_from"]) == (str(tmp_path / "explicit"), "op_compiler_cache_dir")
    monkeypatch.delenv("NPUSCOPE_COMPILE_CACHE")
    monkeypatch.delenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = cache_settings.compile_cache({"op_compiler_cache_mode": "disable", "op_compiler_cache_dir": ""})
    assert got == {"mode": "disable", "dir": str(tmp_path / "xdg" / "npuscope" / "compile"), "dir_from": "default",
                   "max_bytes": 2 * 1024 ** 3}
    assert cache_settings.compile_cache({"golden_format": "npy"}) is None  # compare-dumps: no compile, no cache
