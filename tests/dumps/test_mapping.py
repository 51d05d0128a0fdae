"""Fusion mapping files (toolkit/dumps/mapping.py) with or without a BOM."""

from __future__ import annotations

import json

import pytest

BOM = b"\xef\xbb\xbf"


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_mapping_with_bom_reads_as_without(tmp_path):
    from toolkit.dumps.mapping import load_mapping

    m = {"fused": ["a", "b"]}
    (tmp_path / "bom.json").write_bytes(BOM + json.dumps(m).encode())
    assert load_mapping(tmp_path / "bom.json") == m
