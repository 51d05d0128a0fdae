"""Per-kernel cache entries (toolkit/cache/kernel_entries.py): a corrupted kernel entry is rebuilt, the scratch
file reused across kernels holds each whole model, and an entry of every optimisation level loads and computes
the same."""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cache.helpers import _entry, build, cfg, make_model, n_sessions, run
from toolkit.cache import keys, store
from toolkit.cache.store import EntryStore


def test_corrupted_kernel_entry_is_rebuilt(tmp_path, caplog):
    c = cfg(tmp_path)
    _, rt_cold = build(make_model(), c)
    for p in _entry(tmp_path, "bundle") + _entry(tmp_path, "kernel"):
        p.write_bytes(p.read_bytes()[:40])
    with caplog.at_level(logging.WARNING, logger="npuscope.cache"):
        got, rt = build(make_model(), c)
    assert sum("corrupted" in r.getMessage() for r in caplog.records) == 1 + n_sessions(rt)
    assert got.cache["kernel_misses"] == n_sessions(rt)
    np.testing.assert_array_equal(run(rt), run(rt_cold))


def test_scratch_file_reused_across_kernels_holds_each_whole_model(tmp_path):
    """One build writes every optimised kernel model to the same scratch file: a short model written after a
    long one must be stored whole and alone (onnxruntime truncates the file), and the file is gone at the end."""
    from toolkit.cache.kernel_entries import KernelCache

    def chain(n):
        nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [4])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    kc = KernelCache(EntryStore(tmp_path, 10**9), reads=True, writes=True)
    x = np.array([-1.0, 0.5, -2.0, 3.0], np.float32)
    for n in (40, 2):
        data = chain(n)
        sess = kc.session(data, keys.hashlib.sha256(data).hexdigest(), "all")  # written out, read back
        np.testing.assert_array_equal(sess.run(None, {"t0": x})[0], np.maximum(x, 0))
        optimised, payload = kc.payloads[keys.hashlib.sha256(data).hexdigest()]
        stored = onnx.load_from_string(payload)  # a whole model: parses, and runs like the original
        got = ort.InferenceSession(stored.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"t0": x})
        np.testing.assert_array_equal(got[0], np.maximum(x, 0))
    scratch = kc._scratch
    assert scratch is not None and os.path.exists(scratch)
    kc.close()
    assert not os.path.exists(scratch)


@pytest.mark.parametrize("level", [False, "basic", "all"])
def test_kernel_entry_of_every_level_loads_and_computes_the_same(tmp_path, level):
    """Levels in STORED_AS_IS get no entry of their own (a hit would cost what building costs): only the
    kernel model itself, kept for the bundle; the others an entry holding onnxruntime's optimised model, which a
    later build loads and which computes what onnxruntime computes."""
    from toolkit.cache.kernel_entries import STORED_AS_IS, KernelCache

    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(np.full((1, 4), 3.0, np.float32), "k"),
                           numpy_helper.from_array(np.full((1, 4), 0.5, np.float32), "b")])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    digest = keys.hashlib.sha256(data).hexdigest()
    x = np.array([[-1.0, 0.0, 2.0, 4.0]], np.float32)
    kc = KernelCache(EntryStore(tmp_path, 10**9), reads=True, writes=True)
    kc.session(data, digest, level)
    kc.close()
    store.flush()
    assert kc.payloads[digest] == (level not in STORED_AS_IS, kc.payloads[digest][1])
    got = EntryStore(tmp_path, 10**9).get("kernel", keys.kernel_key(digest, level))
    if level in STORED_AS_IS:
        assert got is None and kc.payloads[digest][1] == data
        return
    meta, payload = got
    assert meta["optimized"] is True and payload != data
    again = KernelCache(EntryStore(tmp_path, 10**9), reads=True, writes=False)
    sess = again.session(data, digest, level)
    assert (again.hits, again.misses) == (1, 0)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 3.0 + 0.5)
