"""The dataset store (toolkit/dataset/store.py): result keys do not collide, results read back without pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_result_keys_do_not_collide():
    from toolkit.dataset.store import result_key

    names = ["a b.npz", "a_b.npz", "a?b.npz", "x.npz", "../x.npz"]
    keys = [result_key(n) for n in names]
    assert len(set(keys)) == len(names) and keys[1] == "a_b" and keys[3] == "x"
    assert all("/" not in k and not k.startswith(".") for k in keys)


def test_dataset_store_results_read_back_without_pickle(tmp_path):
    from toolkit.dataset.store import Store
    from toolkit.dataset.worker import COLUMNS, Record

    store = Store(tmp_path)
    rec = Record({"input": "ä 1.npz", "sha256": "ab", "status": "error", "verdict": "ERROR", "error": "ö",
                  "reasons": ["x"]}, np.array([0, 2], np.int32), np.ones((2, len(COLUMNS))))
    path = store.write(rec)
    with np.load(path, allow_pickle=False) as z:
        assert z["meta"].dtype.kind == "U" and json.loads(str(z["meta"]))["error"] == "ö"
        assert z["rows"].tolist() == [0, 2]
    back, why = store.load("ä 1.npz")
    assert why == "" and back.meta == rec.meta


def test_an_input_whose_file_name_is_not_utf8_is_listed_escaped_and_keyed(tmp_path):
    """Kind: a file in an --inputs folder whose name holds bytes that are not UTF-8 (legal on Linux; os.fsdecode
    gives lone surrogates): an ordinary input. Its name (inputs.csv, summary.json, the store) is escaped as
    os.fsencode(name).decode("utf-8", "backslashreplace") shows it, its path opens the file, its result key is a
    safe file name that differs from the other inputs' keys, and its record is written and read back."""
    import os

    from toolkit.dataset.source import list_inputs, read_bytes
    from toolkit.dataset.store import Store, result_key
    from toolkit.dataset.worker import COLUMNS, Record

    np.savez(tmp_path / os.fsdecode(b"\xff\xfe.npz"), x=np.ones((1, 4), np.float32))
    np.savez(tmp_path / "good.npz", x=np.ones((1, 4), np.float32))
    refs = list_inputs(tmp_path)
    assert [r.name for r in refs] == ["good.npz", r"\xff\xfe.npz"]
    odd = refs[1]
    assert read_bytes(odd).startswith(b"PK")
    keys = {result_key(r.name) for r in refs} | {result_key(os.fsdecode(b"\xff\xfe.npz"))}
    assert len(keys) == 3 and all(k.encode("utf-8") and "/" not in k for k in keys)
    store = Store(tmp_path / "run")
    rec = Record({"input": odd.name, "sha256": "ab", "status": "error", "verdict": "ERROR", "error": "x",
                  "reasons": ["x"]}, np.array([0], np.int32), np.ones((1, len(COLUMNS))))
    store.write(rec)
    assert store.load(odd.name)[0].meta == rec.meta
    assert [e["input"] for e in store.log_entries()] == [odd.name]


def _write_report(stage, files: dict) -> None:
    """Write ``files`` ({relative path: text}) under ``stage`` (folders created)."""
    for rel, text in files.items():
        path = stage / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _tree(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


FIRST = {"summary.json": "{}", "keep_dtype.txt": "sq\n", "fixed_config.json": "{}", "repro/model.onnx": "m",
         "repro/README.txt": "r", "index.html": "h", "plotly.min.js": "p"}


@pytest.mark.parametrize("second", [
    {"summary.json": "{\"v\": 2}"},                                              # no fix, no repro, no HTML
    {"summary.json": "{\"v\": 2}", "keep_dtype.txt": "mm\n", "fixed_config.json": "{\"v\": 2}"},  # another fix
    {"summary.json": "{\"v\": 2}", "repro": "now a file"},                       # a folder's name as a file
    {"summary.json": "{\"v\": 2}", "keep_dtype.txt/x": "now a folder"},          # a file's name as a folder
], ids=["nothing_but_summary", "other_fix", "dir_to_file", "file_to_dir"])
@pytest.mark.parametrize("legacy", [False, True], ids=["recorded", "summary_json_of_an_older_version"])
def test_a_report_replaces_the_earlier_report_of_the_folder_whole(tmp_path, second, legacy):
    """Kind: a run folder written twice (a resumed dataset run) whose second report holds fewer or other entries
    than the first. After the second, the folder holds exactly the second report's files next to the store and
    the files the user put there (untouched), also when the first report was written before the record of
    report files existed (its summary.json naming the fix files and repro/)."""
    from toolkit.dataset.store import REPORT_RECORD, staged_report

    folder = tmp_path / "run"
    store = {"manifest.json": "M", "log.jsonl": "L", "results/in0.npz": "R"}
    user = {"notes.txt": "mine", "mine/data.txt": "also mine"}
    _write_report(folder, {**store, **user})
    if legacy:  # what an older version left: the report files and a summary.json naming the conditional ones
        first = {**FIRST, "summary.json": json.dumps({"fix": {"files": {"keep_dtype": "keep_dtype.txt",
                                                                           "config": "fixed_config.json"}},
                                                      "repro": "repro/model.onnx",
                                                      "artifacts": {"report": "index.html", "plotly.js": "plotly.min.js",
                                                                    "manifest": "manifest.json", "results": "results/"}})}
        _write_report(folder, first)
    else:
        with staged_report(folder) as stage:
            _write_report(stage, FIRST)
        assert _tree(folder) == {**store, **user, **FIRST, REPORT_RECORD: (folder / REPORT_RECORD).read_text()}
    with staged_report(folder) as stage:
        _write_report(stage, second)
    got = _tree(folder)
    record = json.loads(got.pop(REPORT_RECORD))
    assert got == {**store, **user, **second}
    assert record["files"] == sorted({rel.split("/")[0] for rel in second})
    assert not any(p.name.startswith(".npuscope-report.tmp") for p in folder.iterdir())


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_report_that_fails_while_written_leaves_the_earlier_report(tmp_path, error):
    """Kind: the report of a run raising (an error, Ctrl-C) while it is written: the earlier report stays as it
    was, no file of the failed one is left in the folder."""
    from toolkit.dataset.store import REPORT_RECORD, staged_report

    folder = tmp_path / "run"
    folder.mkdir()
    with staged_report(folder) as stage:
        _write_report(stage, FIRST)
    before = _tree(folder)
    with pytest.raises(error):
        with staged_report(folder) as stage:
            _write_report(stage, {"summary.json": "half", "new.csv": "x"})
            raise error()
    assert _tree(folder) == before and json.loads(before[REPORT_RECORD])["files"] == sorted(
        {rel.split("/")[0] for rel in FIRST})
