"""Weights left on disk (toolkit.ir.weights): the loader maps external initializers of MAP_MIN_BYTES or more
instead of reading them, keeps its safety checks, and every reader gets the file's values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.graphs import mlp_model
from toolkit.core.errors import ModelError
from toolkit.ir import weights
from toolkit.ir.load import load_model


@pytest.mark.parametrize("one_file", [False, True])
def test_large_initializers_stay_mapped_with_the_files_values(tmp_path, one_file):
    path, inits = mlp_model(tmp_path, np.random.default_rng(0), one_file=one_file)
    model = load_model(path)
    for t in model.graph.initializer:
        big = inits[t.name].nbytes >= weights.MAP_MIN_BYTES
        assert weights.is_mapped(t) == big, t.name
        arr = weights.array_of(t)
        assert isinstance(arr, np.memmap) == big
        np.testing.assert_array_equal(arr, inits[t.name])
        if big:
            assert not t.raw_data  # never read into the proto
            assert not arr.flags.writeable


def test_mapped_path_is_the_checked_file_inside_the_folder(tmp_path):
    path, _ = mlp_model(tmp_path, np.random.default_rng(1))
    model = load_model(path)
    for t in model.graph.initializer:
        if weights.is_mapped(t):
            f = {e.key: e.value for e in t.external_data}
            assert f[weights.PATH_KEY] == str((tmp_path / f["location"]).resolve())


def test_short_mapped_data_file_refused_before_reading(tmp_path):
    path, inits = mlp_model(tmp_path, np.random.default_rng(2))
    big = next(k for k, v in inits.items() if v.nbytes >= weights.MAP_MIN_BYTES)
    data = tmp_path / big
    data.write_bytes(data.read_bytes()[:-4])
    with pytest.raises(ModelError, match="fewer than|beyond the end"):
        load_model(path)


def test_mapped_data_outside_the_folder_refused(tmp_path):
    inner = tmp_path / "m"
    inner.mkdir()
    path, inits = mlp_model(inner, np.random.default_rng(3))
    big = next(k for k, v in inits.items() if v.nbytes >= weights.MAP_MIN_BYTES)
    (inner / big).rename(tmp_path / big)
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        if t.name == big:
            for e in t.external_data:
                if e.key == "location":
                    e.value = f"../{big}"
    onnx.save(m, str(path))
    with pytest.raises(ModelError, match="outside the model's folder"):
        load_model(path)


def test_data_digest_follows_the_file_contents(tmp_path):
    path, inits = mlp_model(tmp_path, np.random.default_rng(4), one_file=True)
    before = weights.data_digest(load_model(path))
    raw = bytearray((tmp_path / "model.data").read_bytes())
    raw[-1] ^= 1  # same size, same offsets: only the bytes differ
    (tmp_path / "model.data").write_bytes(bytes(raw))
    assert weights.data_digest(load_model(path)) != before
