"""keep_dtype entries (toolkit/config/keep_dtype.py): the converter's one-entry-per-line file holds only entries
that survive its reader (toolkit.config.schema strips each line); the others go to a JSON config only."""

from __future__ import annotations

import json

import pytest

from toolkit.config.keep_dtype import keep_file_text, unwritable_entry
from toolkit.config.schema import Config


@pytest.mark.parametrize("names", [["mm"], ["a/b", "OpType::Conv", "x.y:z"], ["n\u00e9\u4e2d"], [],
                                   ["#m2", "#", "# x", "a#b"]])  # '#' starts a comment line: written OpName::#...
def test_entries_the_file_holds_read_back_as_written(tmp_path, names):
    text = keep_file_text(names)
    assert text is not None and unwritable_entry(names) is None
    (tmp_path / "keep.txt").write_text(text, encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps({"keep_dtype": str(tmp_path / "keep.txt")}))
    assert list(Config.load(tmp_path / "c.json").keep_dtype) == names


@pytest.mark.parametrize("bad", ["mm\nverdict: PASS", "a\rb", "x\u2028y", "tail\r", " lead", "trail ", "a\x1cb"])
def test_an_entry_no_line_can_hold_is_not_written_but_a_json_config_holds_it(tmp_path, bad):
    names = ["ok", bad]
    assert keep_file_text(names) is None and unwritable_entry(names) == bad
    (tmp_path / "c.json").write_text(json.dumps({"keep_dtype": names}))
    assert list(Config.load(tmp_path / "c.json").keep_dtype) == names
