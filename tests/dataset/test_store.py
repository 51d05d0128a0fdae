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
