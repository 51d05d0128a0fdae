"""The streamed diagnosis (toolkit.stream): the reference segment by segment and the plan kernel by kernel give,
tensor by tensor, the all-in-memory diagnosis; tensors it did not keep are computed again bit for bit; its memory
stays bounded when the model's tensors are far larger than a segment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest

from tests.graphs import residual_model
from toolkit.compare.subset import Subset
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare

SEQ, WIDTH = 32, 64


def _model(tmp_path, rng_seed=0, **kw):
    path, inits = residual_model(tmp_path, np.random.default_rng(rng_seed), seq=SEQ, width=WIDTH, **kw)
    x = np.random.default_rng(rng_seed + 1).standard_normal((1, SEQ, WIDTH)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    return path, inits, x


def _both(path, inputs, cfg, segment_bytes, subset=None):
    prep = prepare(str(path), str(inputs))
    mem = diagnose(prep, cfg, stream=False, subset=subset)
    streamed = diagnose(prep, cfg, stream=True, segment_bytes=segment_bytes, subset=subset)
    return mem, streamed


def _same_values(a, b, what):
    assert set(a) == set(b), what
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype and x.shape == y.shape, (what, k)
        assert x.tobytes() == y.tobytes(), (what, k)


@pytest.mark.parametrize("precision_mode,fusion_level,blowup", [
    ("force_fp16", None, None), ("force_fp16", 0, 2), ("allow_mix_precision", None, 3), ("force_fp32", None, None)])
@pytest.mark.parametrize("segment_bytes", [1, 40_000, 1 << 30])
@pytest.mark.parametrize("dynamic", [False, True])
def test_streamed_diagnosis_equals_the_all_in_memory_one(tmp_path, precision_mode, fusion_level, blowup,
                                                         segment_bytes, dynamic):
    """Every precision mode, fused and unfused, with and without a planted FP16 overflow, segments of one node,
    of a few layers and of the whole model, static and symbolic shapes: the layer table, verdict, reasons,
    findings, triage and every reference and device tensor are those of the all-in-memory diagnosis."""
    path, _, _ = _model(tmp_path, dynamic=dynamic, blowup_layer=blowup)
    cfg = Config(precision_mode=precision_mode, op_compiler_cache_mode="disable",
                 **({"fusion_level": fusion_level} if fusion_level is not None else {}))
    (dm, em), (ds, es) = _both(path, tmp_path / "in.npz", cfg, segment_bytes)
    nodes = len(prepare(str(path), str(tmp_path / "in.npz")).model.graph.node)
    segs = ds.summary["streamed"]["segments"]
    # one byte: a cut after every node whose outputs have a known size (a Reshape to -1 under a symbolic axis
    # has none); the whole model: one segment; 40 kB: a few nodes each
    assert (segs > nodes // 2) if segment_bytes == 1 else (segs == 1) if segment_bytes == 1 << 30 else \
        (1 < segs < nodes // 2)
    assert dm.summary["streamed"]["segments"] == 0
    pd.testing.assert_frame_equal(dm.table, ds.table)
    for key in ("verdict", "reasons", "stage", "first_divergence", "origin_nodes", "counts"):
        assert dm.summary[key] == ds.summary[key], key
    assert [(f.kind, f.subject, f.severity, f.recommendation) for f in dm.findings] == \
        [(f.kind, f.subject, f.severity, f.recommendation) for f in ds.findings]
    assert dm.triage == ds.triage
    _same_values(em["golden"], es["golden"], "golden")
    _same_values(em["device"], es["device"], "device")
    _same_values(em["npu_outputs"], es["npu_outputs"], "outputs")
    if blowup is not None and precision_mode == "force_fp16":
        assert dm.summary["verdict"] != "PASS"  # the planted fault is seen (both ways)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("layer", [0, 2])
@pytest.mark.parametrize("segment_bytes", [1, 40_000, 1 << 30])
@pytest.mark.parametrize("subset", [None, Subset(layers="1-2")])
def test_streamed_triage_runs_in_the_pass_and_finds_the_compile_stage_fault(tmp_path, monkeypatch, layer,
                                                                           segment_bytes, subset):
    """A compile-time rewrite planted in a layer (early or late, inside a subset or before it): the streamed
    diagnosis screens its force_fp32 run inside the pass and finds the same fp32 first divergence (or none,
    as the in-memory one) without running any reference segment a second time."""
    from tests.faultkinds.builders import planted_pass
    from toolkit import diagnose as dg
    from toolkit.stream import stores

    path, _, _ = _model(tmp_path)
    cfg = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")
    with planted_pass(f"/layers.{layer}/MatMul_1", 1.5):
        prep = prepare(str(path), str(tmp_path / "in.npz"))
        mem, _ = diagnose(prep, cfg, stream=False, subset=subset)
        computed, screening = [], []
        real, see = stores.GoldenStore._compute, dg._TriageScreen.see

        def spy_see(self, *a):
            screening.append(True)
            try:
                return see(self, *a)
            finally:
                screening.pop()
        monkeypatch.setattr(dg._TriageScreen, "see", spy_see)
        monkeypatch.setattr(stores.GoldenStore, "_compute",
                            lambda self, s, *a, **k: computed.append((s, bool(screening))) or real(self, s, *a, **k))
        st, _ = diagnose(prep, cfg, stream=True, segment_bytes=segment_bytes, subset=subset)
    assert st.triage == mem.triage
    first = mem.triage["fp32_first_divergence"]
    if subset is None or layer >= 1:  # the rescaled MatMul's kernel (fused with the residual Add)
        assert first["kernel"] == f"/layers.{layer}/MatMul_1"
    else:  # before the subset: the first compared tensor it changes, in layer 1
        assert first["node"].startswith("/layers.1/")
    assert st.summary["stage"] == mem.summary["stage"] == "compile"
    # the triage screen read the pass's values: no segment computed again for it
    assert not [seg for seg, by_triage in computed if by_triage]


def test_streamed_reference_is_onnxruntimes_whole_model_run(tmp_path):
    """Independently of our runner: each streamed reference tensor equals onnxruntime's own run of the whole
    model file with that tensor as an output."""
    path, _, x = _model(tmp_path)
    prep = prepare(str(path), str(tmp_path / "in.npz"))
    _, extras = diagnose(prep, Config(precision_mode="force_fp16", op_compiler_cache_mode="disable"),
                         stream=True, segment_bytes=1)
    import onnx

    m = onnx.load(str(path))
    names = ["mm1", "res3", "y5", "sh2"]
    del m.graph.output[:]
    m.graph.output.extend([onnx.helper.make_empty_tensor_value_info(n) for n in names])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    # the model's external data files are found beside it only from a path
    onnx.save(m, str(tmp_path / "probe.onnx"))
    sess = ort.InferenceSession(str(tmp_path / "probe.onnx"), so, providers=["CPUExecutionProvider"])
    for name, want in zip(names, sess.run(names, {"x": x})):
        np.testing.assert_array_equal(np.asarray(extras["golden"][name]), want, err_msg=name)


def test_tensors_not_kept_are_computed_again_from_the_stored_boundaries(tmp_path):
    """A passing model keeps no intermediate array; reading one computes its segment again (reference and
    device), bit for bit the values of the all-in-memory run."""
    path, _, _ = _model(tmp_path)
    cfg = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")
    (_, em), (ds, es) = _both(path, tmp_path / "in.npz", cfg, 40_000)
    golden, device = es["golden"], es["device"]
    assert "res2" not in golden.kept and "res2" not in device.kept
    before = (golden.recomputed, device.recomputed)
    assert np.asarray(golden["res2"]).tobytes() == np.asarray(em["golden"]["res2"]).tobytes()
    assert np.asarray(device["res2"]).tobytes() == np.asarray(em["device"]["res2"]).tobytes()
    assert golden.recomputed > before[0] and device.recomputed > before[1]
    assert ds.summary["streamed"]["boundary_bytes"] > 0 and ds.summary["streamed"]["checkpoint_bytes"] > 0


@pytest.mark.parametrize("segment_bytes", [1, 40_000])
@pytest.mark.parametrize("subset", [Subset(layers="1-2"), Subset(nodes="/layers.2/*"), Subset(outputs_only=True)],
                         ids=str)
def test_streamed_subset_equals_the_all_in_memory_subset(tmp_path, segment_bytes, subset):
    """--layers / --nodes / --outputs-only with streaming compares and keeps what the all-in-memory run with the
    same subset does, also with segments of one node, many of which then expose nothing and hand nothing on
    (they are not run: onnxruntime refuses a graph asked for no output)."""
    path, _, _ = _model(tmp_path, blowup_layer=1)
    cfg = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")
    (dm, em), (ds, es) = _both(path, tmp_path / "in.npz", cfg, segment_bytes, subset=subset)
    pd.testing.assert_frame_equal(dm.table, ds.table)
    assert dm.summary["subset"] == ds.summary["subset"] and dm.summary["verdict"] == ds.summary["verdict"]
    _same_values(em["golden"], es["golden"], "golden")
    _same_values(em["device"], es["device"], "device")


PEAK = r"""
import json, resource, sys
from toolkit.ort.ort_env import enable_global_thread_pool
enable_global_thread_pool()
from toolkit.config.schema import Config
from toolkit.diagnose import diagnose, prepare
from toolkit.stream.streamed import rss_bytes

def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

prep = prepare(sys.argv[1], sys.argv[2])
base = rss_bytes()
# the peak so far is forgotten (Linux >= 4.0): a forked child starts with its parent's peak (a pytest worker's)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
assert hwm() <= base + (16 << 20), (hwm(), base)
diag, _ = diagnose(prep, Config(precision_mode="force_fp16", op_compiler_cache_mode="disable"),
                   stream=sys.argv[3] == "stream", segment_bytes=int(sys.argv[4]))
peak = hwm()
print(json.dumps({"base": base, "peak": peak, "verdict": diag.summary["verdict"], "table": len(diag.table)}))
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="resets and reads the peak RSS in /proc")
def test_streamed_memory_stays_bounded_when_tensors_exceed_the_budget(tmp_path):
    """12 layers whose tensors (about 200 MiB of FP32 reference values, 2 MiB each) and weights (24 MiB, one
    file per initializer) are far larger than a 4 MiB segment: in a child process, the streamed diagnosis grows
    by at most the weights plus 40 segments, while the all-in-memory one holds every tensor; both give the same
    verdict and table size."""
    width, seq, layers, segment = 512, 1024, 12, 4 << 20
    path, inits = residual_model(tmp_path, np.random.default_rng(3), layers=layers, width=width, seq=seq)
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(4).standard_normal((1, seq, width)).astype(np.float32))
    weights = sum(v.nbytes for v in inits.values())
    tensor = seq * width * 4
    runs = {}
    for how in ("stream", "memory"):
        out = subprocess.run([sys.executable, "-c", PEAK, str(path), str(tmp_path / "in.npz"), how, str(segment)],
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
        runs[how] = json.loads(out.stdout.strip().splitlines()[-1])
    grew = {k: v["peak"] - v["base"] for k, v in runs.items()}
    assert runs["stream"]["verdict"] == runs["memory"]["verdict"] and runs["stream"]["table"] == runs["memory"]["table"]
    assert grew["stream"] <= weights + 40 * segment, (grew, weights)
    # the all-in-memory run holds the FP32 reference of every tensor (8 per layer) at least
    assert grew["memory"] >= grew["stream"] + 0.5 * 8 * layers * tensor, grew
