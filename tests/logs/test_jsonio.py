"""The JSON helpers (toolkit/logs/jsonio.py): the number helper refuses non-finite and huge values; the text is
decoded like the other logs (BOM, GB18030, counted replacements)."""

from __future__ import annotations


def test_number_helper_rejects_non_finite_and_huge_values():
    from toolkit.logs.jsonio import number
    from toolkit.logs.numbers import MAX_ABS

    assert number(3) == 3.0 and number("2.5") == 2.5 and number(-MAX_ABS) == -MAX_ABS
    for v in (float("inf"), float("-inf"), float("nan"), "1e309", "NaN", "Infinity", 10 ** 400, 1e19, True, None):
        assert number(v) is None, v


def test_trace_text_is_decoded_like_the_other_logs(tmp_path):
    """Kind: a JSON trace with a UTF-8 BOM reads from its first event; one saved as GBK keeps its names, with a
    note; undecodable bytes are counted."""
    import json

    from toolkit.logs.jsonio import load_events

    events = [{"ph": "X", "name": "卷积", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(events, ensure_ascii=False).encode())
    loaded = load_events(path)
    assert loaded.events == events and loaded.notes == []
    path.write_bytes(json.dumps(events, ensure_ascii=False).encode("gbk"))
    loaded = load_events(path)
    assert loaded.events == events and loaded.notes == ["decoded as GB18030 (not UTF-8)"]
    data = json.dumps([{**events[0], "name": "café"}], ensure_ascii=False).encode("latin-1")
    path.write_bytes(data)
    loaded = load_events(path)
    assert loaded.events[0]["name"] == "caf\ufffd" and loaded.notes[0].startswith("1 byte(s) that are not UTF-8")
