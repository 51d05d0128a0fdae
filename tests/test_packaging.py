"""Packaging: pyproject lists every toolkit package."""

from __future__ import annotations

import tomllib

from tests.report.helpers import ROOT


def test_pyproject_lists_every_toolkit_package():
    """pyproject lists packages explicitly (to map templates/ into toolkit.templates): every folder of
    toolkit/ holding Python files or package data must be in that list, or a non-editable install misses it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "toolkit").rglob("*")
             if d.is_dir() and d.name != "__pycache__" and any(f.suffix == ".py" for f in d.iterdir())}
    found.add("toolkit")
    missing = sorted(found - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert "toolkit.templates" in listed
