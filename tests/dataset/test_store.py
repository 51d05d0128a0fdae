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
