"""The package's import structure: layers import only downward (import-linter's contract in pyproject.toml),
no import cycles, and imports of toolkit modules sit at the top of their files."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolkit"
#: function-level imports of toolkit modules the structure allows, each with its reason in a comment
MAX_FUNCTION_LEVEL_IMPORTS = 10


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    script = ("import sys; from importlinter.cli import lint_imports; "
              "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))")
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_layers_contract_is_kept():
    proc = _lint(ROOT, ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout


@pytest.mark.parametrize("low, high", [("toolkit/core/errors.py", "toolkit.cli"),
                                       ("toolkit/compiler/pipeline.py", "toolkit.cache.compile_cache"),
                                       ("toolkit/runtime/kernels.py", "toolkit.cache.kernel_entries"),
                                       ("toolkit/compare/layerwise.py", "toolkit.reexec.isolate")])
def test_a_planted_upward_import_breaks_the_contract(tmp_path, low, high):
    shutil.copytree(PACKAGE, tmp_path / "toolkit", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    planted = tmp_path / low
    planted.write_text(planted.read_text() + f"\nimport {high}  # planted\n")
    proc = _lint(tmp_path, tmp_path)
    assert proc.returncode != 0
    assert f"is not allowed to import {high.rsplit('.', 1)[0]}" in proc.stdout or high in proc.stdout


def _function_level_imports() -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("toolkit")):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(a.name.startswith("toolkit") for a in node.names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_toolkit_imports_sit_at_the_top_of_their_files():
    found = _function_level_imports()
    assert len(found) <= MAX_FUNCTION_LEVEL_IMPORTS, found
    for where in found:  # each one says why
        file, line = where.rsplit(":", 1)
        text = (ROOT / file).read_text(encoding="utf-8").splitlines()[int(line) - 1]
        assert "#" in text, f"{where}: a function-level import needs its reason in a comment"


def test_the_package_has_no_import_cycle():
    import grimp

    graph = grimp.build_graph("toolkit")
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            assert not graph.chain_exists(imported, module), f"cycle: {module} <-> {imported}"
