"""The compile cache (toolkit.cache): hits give what a fresh compile gives, every key ingredient invalidates,
corrupted entries are rebuilt with a warning, two processes can share one folder, LRU eviction, modes, CLI."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.cache import keys, store
from toolkit.cache.settings import default_dir, from_config
from toolkit.cache.store import LAYOUT, EntryStore, unpack
from toolkit.compiler.pipeline import compile_model, recompile_precision
from toolkit.config import Config
from toolkit.errors import ConfigError
from toolkit.runtime import kernels
from toolkit.runtime.npu import NpuRuntime

RNG = np.random.default_rng(7)
W1 = RNG.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
B1 = RNG.normal(0, 0.1, (4,)).astype(np.float32)
W2 = RNG.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)
X = RNG.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)


def make_model(w1=W1, w2=W2, alpha=0.2, dil2=(1, 1)) -> onnx.ModelProto:
    """x -> Conv(w1 initializer, pads 1) -> Relu -> Conv(w2 from a Constant node, 1x1) -> HardSigmoid -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Constant", [], ["w2"], name="w2_const", value=numpy_helper.from_array(w2, "w2")),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", dilations=list(dil2)),
             helper.make_node("HardSigmoid", ["c2"], ["y"], name="hsig", alpha=alpha)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(B1, "b1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cfg(folder, **kw) -> Config:
    base = {"precision_mode": "force_fp16", "op_compiler_cache_mode": "enable", "op_compiler_cache_dir": str(folder)}
    base.update(kw)
    return Config(**base)


def build(model, config, shape=(1, 3, 8, 8)):
    """(CompileResult, NpuRuntime) as a new process would get them (in-memory kernel sessions dropped)."""
    kernels._SESSIONS.clear()
    cr = compile_model(model, config, input_shapes={"x": shape})
    rt = NpuRuntime(cr)
    store.flush()
    return cr, rt


def n_sessions(rt) -> int:
    return sum(1 for ek in rt.kernels if ek.session is not None)


def plan_dict(cr) -> dict:
    d = cr.plan.to_dict()
    d["config"] = {k: v for k, v in d["config"].items() if k not in keys.NON_CODE_FIELDS}
    return d


def run(rt, shape=(1, 3, 8, 8)):
    x = np.resize(X, shape).astype(np.float32)
    return rt.run({"x": x}).outputs["y"]


def fresh(model, config, shape=(1, 3, 8, 8)):
    """A compile with the cache disabled (what every cached result must equal)."""
    return build(model, dataclasses.replace(config, op_compiler_cache_mode="disable"), shape)


# ---------------------------------------------------------------------------------------------- hits
def test_warm_compile_hits_and_equals_a_fresh_compile(tmp_path):
    c = cfg(tmp_path)
    cold, rt_cold = build(make_model(), c)
    assert cold.cache["status"] == "miss"
    assert cold.cache["kernel_misses"] == n_sessions(rt_cold) > 0
    warm, rt_warm = build(make_model(), c)
    assert warm.cache["status"] == "hit" and warm.cache["key"] == cold.cache["key"]
    assert (warm.cache["kernel_hits"], warm.cache["kernel_misses"]) == (n_sessions(rt_warm), 0)
    ref, rt_ref = fresh(make_model(), c)
    assert plan_dict(warm) == plan_dict(ref)
    assert onnx.load_from_string(warm.model.SerializeToString()) == onnx.load_from_string(ref.model.SerializeToString())
    np.testing.assert_array_equal(run(rt_warm), run(rt_ref))
    assert any("compile entry hit" in ln for ln in warm.log_lines())
    assert any(f"kernels: {n_sessions(rt_warm)} hits, 0 misses" in ln for ln in warm.log_lines())


def test_fp32_hit_matches_onnxruntime(tmp_path):
    """The numbers of a cached compile, against onnxruntime on the original model (independent)."""
    c = cfg(tmp_path, precision_mode="force_fp32")
    build(make_model(), c)
    warm, rt = build(make_model(), c)
    assert warm.cache["status"] == "hit"
    want = ort.InferenceSession(make_model().SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": X})[0]
    np.testing.assert_allclose(run(rt), want, rtol=1e-5, atol=1e-6)


def test_stage_of_a_hit_serves_recompile_precision(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    warm, _ = build(make_model(), c)
    fp32 = dataclasses.replace(c, precision_mode="force_fp32")
    again = recompile_precision(warm, fp32)
    ref = recompile_precision(fresh(make_model(), c)[0], fp32)
    assert [k.precision for k in again.plan.kernels] == [k.precision for k in ref.plan.kernels] == \
        ["fp32"] * len(ref.plan.kernels)
    np.testing.assert_array_equal(run(NpuRuntime(again)), run(NpuRuntime(ref)))


def test_cache_settings_are_not_key_ingredients(tmp_path):
    c = cfg(tmp_path)
    cold, _ = build(make_model(), c)
    other_path = compile_model(make_model(), c, input_shapes={"x": (1, 3, 8, 8)}, model_path="elsewhere.onnx")
    assert other_path.cache["status"] == "hit" and other_path.plan.model == "elsewhere.onnx"


# ---------------------------------------------------------------------------------------------- key ingredients
def _orig_versions():
    return dict(keys._versions())


INGREDIENTS = {
    "weights": lambda: (make_model(w1=W1 * 1.5), {}, (1, 3, 8, 8), None),
    "attribute": lambda: (make_model(alpha=0.25), {}, (1, 3, 8, 8), None),
    "shape": lambda: (make_model(), {}, (1, 3, 16, 16), None),
    "precision_mode": lambda: (make_model(), {"precision_mode": "force_fp32"}, (1, 3, 8, 8), None),
    "op_select_implmode": lambda: (make_model(), {"op_select_implmode": "high_precision"}, (1, 3, 8, 8), None),
    "overflow_mode": lambda: (make_model(), {"overflow_mode": "saturation"}, (1, 3, 8, 8), None),
    "fusion_level": lambda: (make_model(), {"fusion_level": 0}, (1, 3, 8, 8), None),
    "fusion_switch_file": lambda: (make_model(), {"fusion_switch_file": {"Switch": {"UBFusion": {
        "TbeCubeElemwiseFusionPass": "off"}}}}, (1, 3, 8, 8), None),
    "toolkit_version": lambda: (make_model(), {}, (1, 3, 8, 8), {"npuscope": "9.9.9+other"}),
    "onnxruntime_version": lambda: (make_model(), {}, (1, 3, 8, 8), {"onnxruntime": "0.0.1"}),
}


@pytest.mark.parametrize("ingredient", sorted(INGREDIENTS))
def test_each_key_ingredient_invalidates(tmp_path, monkeypatch, ingredient):
    c = cfg(tmp_path)
    base, _ = build(make_model(), c)
    model, overrides, shape, versions = INGREDIENTS[ingredient]()
    if versions:
        monkeypatch.setattr(keys, "versions", lambda: {**_orig_versions(), **versions})
    c2 = dataclasses.replace(c, **overrides)
    got, rt = build(model, c2, shape)
    assert got.cache["key"] != base.cache["key"]
    assert got.cache["status"] in ("miss", "patched")
    if versions:  # kernel entries are keyed by the versions too
        assert got.cache["kernel_misses"] == n_sessions(rt)
    ref, rt_ref = fresh(model, c2, shape)
    assert plan_dict(got) == plan_dict(ref)
    np.testing.assert_array_equal(run(rt, shape), run(rt_ref, shape))


@pytest.mark.parametrize("change", ["rule_registered", "pass_replaced"])
def test_rules_and_passes_changed_at_run_time_invalidate(tmp_path, monkeypatch, change):
    """A fusion rule registered (or a pass replaced) in this process after import, as a test or a plugin
    does, must not be served an entry compiled without it: the registry is a key ingredient."""
    from toolkit.compiler import pipeline, rules

    c = cfg(tmp_path)
    base, _ = build(make_model(), c)
    if change == "rule_registered":
        rules.load_rules()
        monkeypatch.setattr(rules, "RULES", rules.RULES + [rules.Rule("TestOnlyFusionPass", frozenset({"Relu"}),
                                                                      lambda g, n: None)])
    else:
        info = pipeline.PASSES["check_constants"]
        monkeypatch.setitem(pipeline.PASSES, "check_constants",
                            dataclasses.replace(info, fn=lambda ctx: pipeline.PassResult(0, ["replaced"])))
    got, _ = build(make_model(), c)
    assert got.cache["key"] != base.cache["key"]
    assert got.cache["status"] == "miss"


# ---------------------------------------------------------------------------------------------- one-node edits
#: a value edit that makes a weight overflow FP16 (and one that flushes every weight to zero) must give the
#: findings a fresh compile gives (only check_constants reads values after a value-only patch)
_OVER = W1.copy()
_OVER[0, 0, 0, 0] = 7e4


@pytest.mark.parametrize("edit", ["initializer", "constant_node", "conv_attribute", "fp16_overflow",
                                  "fp16_underflow", "overflow_fixed"])
def test_value_edit_is_patched_and_rebuilds_one_kernel(tmp_path, edit):
    c = cfg(tmp_path)
    build(make_model(w1=_OVER) if edit == "overflow_fixed" else make_model(), c)
    model = {"initializer": lambda: make_model(w1=W1 * 1.01), "constant_node": lambda: make_model(w2=W2 * 1.01),
             "conv_attribute": lambda: make_model(dil2=(2, 2)),  # 1x1 kernel: dilation keeps shapes
             "fp16_overflow": lambda: make_model(w1=_OVER), "fp16_underflow": lambda: make_model(w2=W2 * 1e-9),
             "overflow_fixed": lambda: make_model()}[edit]()
    got, rt = build(model, c)
    assert got.cache["status"] == "patched"
    assert (got.cache["kernel_hits"], got.cache["kernel_misses"]) == (n_sessions(rt) - 1, 1)
    ref, rt_ref = fresh(model, c)
    assert plan_dict(got) == plan_dict(ref)
    assert [f.to_dict() for f in got.findings] == [f.to_dict() for f in ref.findings]
    weights = {"w1": {"fp16_overflow": _OVER}.get(edit, W1 * 1.01 if edit == "initializer" else W1),
               "w2": {"fp16_underflow": W2 * 1e-9}.get(edit, W2 * 1.01 if edit == "constant_node" else W2)}
    with np.errstate(over="ignore"):  # expected from numpy: a value overflows or a non-zero value flushes to 0
        expected = {n for n, w in weights.items()
                    if np.isinf(w.astype(np.float16)).any() or ((w != 0) & (w.astype(np.float16) == 0)).any()}
    assert expected == {"fp16_overflow": {"w1"}, "fp16_underflow": {"w2"}}.get(edit, set())
    assert {f.subject for f in got.findings if f.kind == "fp16_constant"} == expected
    log = {p.name: p.log for p in got.passes}["check_constants"]
    assert log == {p.name: p.log for p in ref.passes}["check_constants"]
    assert onnx.load_from_string(got.model.SerializeToString()) == onnx.load_from_string(ref.model.SerializeToString())
    np.testing.assert_array_equal(run(rt), run(rt_ref))
    again, _ = build(model, c)  # the patched compile is an entry of its own
    assert again.cache["status"] == "hit"


def test_edit_outside_patchable_ops_recompiles_and_reuses_kernels(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    got, rt = build(make_model(alpha=0.3), c)
    assert got.cache["status"] == "miss"
    assert got.cache["kernel_hits"] == n_sessions(rt) - 1 and got.cache["kernel_misses"] == 1
    np.testing.assert_array_equal(run(rt), run(fresh(make_model(alpha=0.3), c)[1]))


# ---------------------------------------------------------------------------------------------- corruption
def _entry(tmp_path, ns) -> list:
    return sorted((tmp_path / LAYOUT / ns).iterdir())


@pytest.mark.parametrize("damage", ["truncate", "flip"])
@pytest.mark.parametrize("ns", ["compile", "bundle"])
def test_corrupted_entry_is_warned_rebuilt_and_rewritten(tmp_path, caplog, damage, ns):
    c = cfg(tmp_path)
    _, rt_cold = build(make_model(), c)
    path = _entry(tmp_path, ns)[0]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate"
                     else data[:-7] + bytes([data[-7] ^ 0x40]) + data[-6:])
    with pytest.raises(store.CorruptEntry):
        unpack(path.read_bytes())
    with caplog.at_level(logging.WARNING, logger="npuscope.cache"):
        got, rt = build(make_model(), c)
    assert any("corrupted" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    assert got.cache["status"] == ("miss" if ns == "compile" else "hit")
    np.testing.assert_array_equal(run(rt), run(rt_cold))
    meta, _ = unpack(path.read_bytes())  # rebuilt and written again, whole
    assert meta


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


# ---------------------------------------------------------------------------------------------- concurrency
WORKER = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np, onnx
    from toolkit.compiler.pipeline import compile_model
    from toolkit.config import Config
    from toolkit.runtime.npu import NpuRuntime
    model = onnx.load(sys.argv[1])
    c = Config(precision_mode="force_fp16", op_compiler_cache_mode="enable", op_compiler_cache_dir=sys.argv[2])
    x = np.load(sys.argv[3])
    outs = []
    for _ in range(3):
        cr = compile_model(model, c, input_shapes={"x": x.shape})
        y = NpuRuntime(cr).run({"x": x}).outputs["y"]
        outs.append(hashlib.sha256(y.tobytes()).hexdigest())
    print(json.dumps({"status": cr.cache["status"], "out": outs}))
""")


def test_two_processes_compile_into_one_cache(tmp_path):
    folder = tmp_path / "cache"
    onnx.save(make_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", X)
    cmd = [sys.executable, "-c", WORKER, str(tmp_path / "m.onnx"), str(folder), str(tmp_path / "x.npy")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for ns in ("compile", "bundle", "kernel", "family"):
        for f in _entry(folder, ns):
            assert not f.name.startswith(".tmp-")
            unpack(f.read_bytes())  # every entry whole and valid
    c = cfg(folder)
    got, rt = build(make_model(), c)
    assert got.cache["status"] == "hit"
    import hashlib

    want = hashlib.sha256(run(fresh(make_model(), c)[1]).tobytes()).hexdigest()
    assert hashlib.sha256(run(rt).tobytes()).hexdigest() == want
    assert all(o == want for r in results for o in r["out"])


# ---------------------------------------------------------------------------------------------- store, modes
def test_lru_eviction_keeps_recently_used_entries(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    a, b, c = (ch * 64 for ch in "abc")  # keys are sha256 hex digests
    for i, key in enumerate((a, b, c)):
        s.put("kernel", key, {"i": i}, bytes(1000))
    store.flush()
    for i, key in enumerate((a, b, c)):
        os.utime(s.path("kernel", key), (1000 + i, 1000 + i))
    assert s.get("kernel", a)[0] == {"i": 0}  # a hit makes "a" the most recently used
    size = s.path("kernel", a).stat().st_size
    s.limit = 2 * size
    assert s.evict() == 1
    assert not s.path("kernel", b).exists() and s.path("kernel", a).exists() and s.path("kernel", c).exists()


def _foreign_tree(root):
    """Files a user keeps under a folder mistaken for a cache: names that are not keys, keys outside the kind
    folders, a key-named folder and symlink, an upper-case key. Returns their paths."""
    v1 = root / LAYOUT
    (v1 / "compile").mkdir(parents=True, exist_ok=True)
    (v1 / "other").mkdir(parents=True, exist_ok=True)
    (v1 / "kernel" / ("d" * 64)).mkdir(parents=True)           # a folder named like a key
    target = root / "outside.txt"
    target.write_text("keep me")
    files = [v1 / "compile" / "notes.txt", v1 / "other" / "c.txt", v1 / "other" / ("e" * 64),
             v1 / "compile" / ("F" * 64), v1 / "compile" / (("0" * 63) + ".bak"), v1 / "kernel" / ("d" * 64) / "x",
             v1 / "readme", target]
    for f in files:
        f.write_text("user data")
    (v1 / "bundle").mkdir(exist_ok=True)
    os.symlink(target, v1 / "bundle" / ("9" * 64))               # a key-named symlink to a user file
    return files


def test_clear_and_info_touch_only_cache_entries(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    keys_ = [ch * 64 for ch in "0123"]
    for k, ns in zip(keys_, ("compile", "family", "kernel", "bundle")):
        s.put(ns, k, {"k": k}, bytes(100))
    store.flush()
    tmp = s.base / "kernel" / ".tmp-ab_12cd3"
    tmp.write_bytes(bytes(7))
    foreign = _foreign_tree(tmp_path)
    want_bytes = sum(s.path(ns, k).stat().st_size for k, ns in zip(keys_, ("compile", "family", "kernel", "bundle"))) + 7
    info = s.info()
    assert info["entries"] == {"compile": 1, "family": 1, "kernel": 1, "bundle": 1}
    assert info["bytes"] == want_bytes
    assert info["foreign_files"] == 8  # the 7 files under v1 + the symlink; outside.txt is not under v1
    assert s.clear() == want_bytes
    assert all(f.read_text() == "user data" for f in foreign) and (s.base / "bundle" / ("9" * 64)).is_symlink()
    assert not any(s.path(ns, k).exists() for k, ns in zip(keys_, ("compile", "family", "kernel", "bundle")))
    assert not tmp.exists()
    s.limit = 0
    assert s.evict() == 0 and all(f.exists() for f in foreign)


def test_cli_clear_leaves_and_reports_foreign_files(tmp_path):
    folder = tmp_path / "myfiles"
    build(make_model(), cfg(folder))
    foreign = _foreign_tree(folder)

    def run_(*a):
        return subprocess.run([sys.executable, "-m", "toolkit", "cache", *a, "--dir", str(folder)],
                              capture_output=True, text=True, check=False)
    info = run_("info")
    assert info.returncode == 0, info.stderr
    assert "1 compile" in info.stdout and "ignored 8 file(s)" in info.stdout
    clear = run_("clear")
    assert clear.returncode == 0, clear.stderr
    assert "no entries; 0 B" in clear.stdout and "left 8 file(s)" in clear.stdout and "not cache entries" in clear.stdout
    assert all(f.read_text() == "user data" for f in foreign)


@pytest.mark.parametrize("under", [False, True])
def test_cache_folder_that_is_a_file_is_an_error(tmp_path, monkeypatch, under):
    f = tmp_path / "notes.txt"
    f.write_text("not a cache")
    where = f / "sub" if under else f
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(where))
    res = subprocess.run([sys.executable, "-m", "toolkit", "cache", "info"], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "NPUSCOPE_COMPILE_CACHE" in res.stderr and str(where) in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "no entries" not in res.stdout
    # a compile stops with the same error instead of running without a cache
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE", str(where))
    with pytest.raises(ConfigError, match="environment variable NPUSCOPE_COMPILE_CACHE = .* not a folder"):
        compile_model(make_model(), Config(op_compiler_cache_mode="enable"), input_shapes={"x": (1, 3, 8, 8)})
    with pytest.raises(ConfigError, match="op_compiler_cache_dir = .* not a folder"):
        from_config(Config(op_compiler_cache_mode="enable", op_compiler_cache_dir=str(where)))
    assert from_config(Config(op_compiler_cache_mode="disable")).mode == "disable"  # a disabled cache is not checked
    assert f.read_text() == "not a cache"


def test_bad_mode_variable_is_attributed_to_the_variable(tmp_path):
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE_MODE="bogus")
    res = subprocess.run([sys.executable, "-m", "toolkit", "compile", "resnet_small", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 2
    assert "NPUSCOPE_COMPILE_CACHE_MODE='bogus'" in res.stderr and "command line" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_cache_size_limit_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "20000")
    build(make_model(), cfg(tmp_path))
    total = sum(f.stat().st_size for f in (tmp_path / "v1").rglob("*") if f.is_file())
    assert total <= 20000


def test_force_rebuilds_and_disable_touches_nothing(tmp_path):
    c = cfg(tmp_path)
    build(make_model(), c)
    forced, rt = build(make_model(), dataclasses.replace(c, op_compiler_cache_mode="force"))
    assert forced.cache["status"] == "miss" and forced.cache["kernel_misses"] == n_sessions(rt)
    empty = tmp_path / "off"
    off, _ = build(make_model(), cfg(empty, op_compiler_cache_mode="disable"))
    assert off.cache is None and not empty.exists()
    assert "compile_cache" not in [p.name for p in off.passes]


def test_settings_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("NPUSCOPE_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == tmp_path / "xdg" / "npuscope" / "compile"
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE", str(tmp_path / "moved"))
    assert default_dir() == tmp_path / "moved"
    assert from_config(Config(op_compiler_cache_dir=str(tmp_path / "cfg"))).root == tmp_path / "cfg"
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MODE", "force")
    assert Config().op_compiler_cache_mode == "force"


def test_bad_cache_options_are_clear_errors(monkeypatch):
    with pytest.raises(ConfigError, match="op_compiler_cache_mode = 'enabled'.*did you mean 'enable'"):
        Config.from_dict({"op_compiler_cache_mode": "enabled"})
    monkeypatch.setenv("NPUSCOPE_COMPILE_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ConfigError, match="NPUSCOPE_COMPILE_CACHE_MAX_BYTES = 'lots'"):
        from_config(Config())


def test_cli_cache_info_and_clear(tmp_path):
    build(make_model(), cfg(tmp_path))
    env = dict(os.environ, NPUSCOPE_COMPILE_CACHE=str(tmp_path))
    info = subprocess.run([sys.executable, "-m", "toolkit", "cache", "info"], capture_output=True, text=True, env=env)
    assert info.returncode == 0, info.stderr
    assert str(tmp_path) in info.stdout and "1 compile" in info.stdout
    clear = subprocess.run([sys.executable, "-m", "toolkit", "cache", "clear"], capture_output=True, text=True, env=env)
    assert clear.returncode == 0 and "no entries; 0 B" in clear.stdout
    assert not (tmp_path / "v1").exists()
    bad = subprocess.run([sys.executable, "-m", "toolkit", "cache", "purge"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2


def test_lazy_payload_is_made_once_and_read_before_its_write(tmp_path):
    """A LazyPayload entry reads back (from memory before the writer thread ran, then from disk) as the bytes
    its maker returns, and the maker runs exactly once however many readers and the writer ask."""
    calls = []

    def make():
        calls.append(1)
        return b"payload-" + bytes(range(256)) * 100

    s = EntryStore(tmp_path, 10**9)
    key = "ab" * 32
    s.put("compile", key, {"k": 1}, store.LazyPayload(make))
    assert s.get("compile", key) == ({"k": 1}, b"payload-" + bytes(range(256)) * 100)
    store.flush()
    assert EntryStore(tmp_path, 10**9).get("compile", key) == ({"k": 1}, b"payload-" + bytes(range(256)) * 100)
    assert len(calls) == 1


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


