"""Gear and input-shape validation, one test per fault kind: a symbolic dim shared by several inputs given two
sizes (config, --input-shape, gears, data), -1 on a dim the model keeps static (compile and run agree), padding
leaks reaching an output (run exits 1), numbers in lengths files, config snippets `gears` emits, pad_value and
input_shape config gaps."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit import samples
from toolkit.compiler.passes.bind_shapes import check_input_shapes
from toolkit.engine import compile_model
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError, UsageError
from toolkit.gears import dp
from toolkit.gears.padding import padding_sensitivity
from toolkit.gears.session import GearSession, pad_feeds
from toolkit.gears.spec import MAX_GEARS, MIN_GEARS, parse_gears
from toolkit.commands.gears import config_snippet, read_lengths, recommend

FP32 = {"precision_mode": "force_fp32"}


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def _error_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("npuscope: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# ------------------------------------------------------------------------------ shared symbolic dims (kind)
def _random_shared_model(rs):
    """2-3 inputs of rank 2-3 whose dims are static ints or the symbols 's'/'t' (one Relu per input), with one
    symbol used at least twice; returns (model, {input: declared dims}, the shared symbol)."""
    while True:
        choices = ["s", "t", 3, 1, 2]
        decl = {f"in{i}": [choices[rs.randint(5)] for _ in range(rs.randint(2, 4))] for i in range(rs.randint(2, 4))}
        uses = [d for v in decl.values() for d in v if isinstance(d, str)]
        shared = [s for s in ("s", "t") if uses.count(s) >= 2 and sum(s in v for v in decl.values()) >= 2]
        if shared:
            break
    nodes = [helper.make_node("Relu", [k], [f"out_{k}"], name=f"relu_{k}") for k in decl]
    m = _model(nodes, list(decl.items()), [(f"out_{k}", v) for k, v in decl.items()])
    return m, decl, shared[0]


@pytest.mark.parametrize("seed", range(8))
def test_shared_symbol_given_two_sizes_is_refused_everywhere(seed):
    rs = np.random.RandomState(seed)
    m, decl, sym = _random_shared_model(rs)
    size = {"s": int(rs.randint(2, 6)), "t": int(rs.randint(6, 9))}
    good = {k: tuple(size[d] if isinstance(d, str) else d for d in v) for k, v in decl.items()}
    # consistent sizes compile and run (independent check: Relu by numpy)
    text = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in good.items())
    feeds = {k: rs.randn(*v).astype(np.float32) for k, v in good.items()}
    from toolkit.engine import Session
    out = Session(m, Config.from_dict({"input_shape": text, **FP32})).run(feeds).outputs
    for k in decl:
        np.testing.assert_array_equal(out[f"out_{k}"], np.maximum(feeds[k], 0))
    # the last use of the shared symbol gets another size
    holders = [k for k, v in decl.items() if sym in v]
    first, last = holders[0], holders[-1]
    bad = {k: list(v) for k, v in good.items()}
    bad[last][max(i for i, d in enumerate(decl[last]) if d == sym)] = size[sym] + 1
    text = ";".join(f"{k}:{','.join(map(str, v))}" for k, v in bad.items())
    want = f"dim '{sym}' is {size[sym]} in {first} but {size[sym] + 1} in {last}; give every input the same size"
    with pytest.raises(ConfigError, match=want) as exc:  # compile (input_shape / --input-shape)
        compile_model(m, Config.from_dict({"input_shape": text}))
    _one_line(exc)
    with pytest.raises(InputError, match=want):  # data given by the user
        check_input_shapes(m, {k: tuple(v) for k, v in bad.items()}, where="inputs", error=InputError)
    # gears: -1 on every use of the symbol, one gear gives them two sizes -> refused before compiling anything
    tmpl = ";".join(f"{k}:{','.join('-1' if d == sym else str(x) for d, x in zip(decl[k], good[k]))}"
                    for k in decl)
    n_slots = sum(d == sym for v in decl.values() for d in v)
    ok = ",".join(["4"] * n_slots)
    skew = ",".join(["5"] * (n_slots - 1) + ["6"])
    with pytest.raises(ConfigError, match=f"dynamic_dims gear 2 '{skew}': dim '{sym}' is 5 in {first} but 6 in "
                                          f"{last}") as exc:
        GearSession(m, Config.from_dict({"input_shape": tmpl, "dynamic_dims": f"{ok};{skew}"}))
    _one_line(exc)
    gs = GearSession(m, Config.from_dict({"input_shape": tmpl, "dynamic_dims": f"{ok};{ok.replace('4', '8')}"}))
    skewed = {k: np.zeros([3 if d == sym and k == last else 2 if d == sym else x for d, x in zip(decl[k], good[k])],
                          np.float32) for k in decl}
    with pytest.raises(InputError, match=f"dim '{sym}' is 2 in {first} but 3 in {last}"):
        gs.run(skewed)
    assert not gs.sessions


def test_shared_dim_cli_paths(tmp_path):
    """The tester's cases: a gear giving x[1] and mask[1] (both 'seq') two sizes, and --input-shape doing the same,
    refused with exit 2 before anything compiles; mismatched data exit 1."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,32;32,16"}))
    feeds = samples.transformer_seq_masked_inputs(0, 16)
    np.savez(tmp_path / "b16.npz", **feeds)
    for cmd in (["compile"], ["run", "--inputs", tmp_path / "b16.npz"]):
        r = _cli(cmd[0], "transformer_seq_masked", "--config", cfg, *cmd[1:], "--out", tmp_path / cmd[0])
        assert r.returncode == 2 and "dim 'seq' is 16 in x but 32 in mask" in _error_line(r)
        assert not (tmp_path / cmd[0]).exists()
    for cmd in ("compile", "run"):
        r = _cli(cmd, "transformer_seq_masked", "--input-shape", "x:1,16,64;mask:1,32", "--out", tmp_path / f"s{cmd}")
        assert r.returncode == 2 and "dim 'seq' is 16 in x but 32 in mask" in _error_line(r)
    np.savez(tmp_path / "skew.npz", x=feeds["x"], mask=np.ones((1, 8), np.float32))
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}))
    r = _cli("run", "transformer_seq_masked", "--config", cfg, "--inputs", tmp_path / "skew.npz", "--out", tmp_path / "k")
    assert r.returncode == 2 and "'seq' is 16 in input 'x' but 8 in input 'mask'" in _error_line(r)


# ------------------------------------------------------------------------------ -1 on a static dim (kind)
def test_gear_dim_on_a_static_model_dim_is_refused_before_any_gear_compiles():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", [1, 3])], [("y", [1, 3])])
    with pytest.raises(ConfigError, match=r"-1 marks dim 0 of 'x' as a gear dim, but that dim is static \(1\)") as exc:
        GearSession(m, Config.from_dict({"input_shape": "x:-1,3", "dynamic_batch_size": "1,2,4"}))
    _one_line(exc)
    dyn = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", ["N", 3])], [("y", ["N", 3])])
    GearSession(dyn, Config.from_dict({"input_shape": "x:-1,3", "dynamic_batch_size": "1,2,4"}))  # fine: N is dynamic
    with pytest.raises(ConfigError, match="input 'x' dim 1 is 3 in the model but 4 was given"):
        GearSession(dyn, Config.from_dict({"input_shape": "x:-1,4", "dynamic_batch_size": "1,2"}))


def test_compile_and_run_agree_on_a_static_batch(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:-1,3,32,32", "dynamic_batch_size": "1,2,4"}))
    for cmd in ("compile", "run"):
        r = _cli(cmd, "resnet_small", "--config", cfg, "--out", tmp_path / cmd)
        assert r.returncode == 2, r.stderr
        assert "-1 marks dim 0 of 'x' as a gear dim, but that dim is static (1)" in _error_line(r)


# ------------------------------------------------------------------------------ padding leaks and exit code (kind)
def _batch_sum_model():
    ax0 = numpy_helper.from_array(np.array([0], np.int64), "ax0")
    return _model([helper.make_node("ReduceSum", ["x", "ax0"], ["s"], name="bsum", keepdims=1),
                   helper.make_node("Add", ["x", "s"], ["y"], name="add")], [("x", ["N", 3])], [("y", ["N", 3])], [ax0])


def _dead_leak_model():
    """ReduceMean over the padded axis whose result is multiplied by 0 before the output: a leak that dies."""
    zero = numpy_helper.from_array(np.zeros((1, 1, 1), np.float32), "zero")
    return _model([helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[1], keepdims=1),
                   helper.make_node("Mul", ["mu", "zero"], ["z0"], name="mul0"),
                   helper.make_node("Add", ["x", "z0"], ["y"], name="add")],
                  [("x", [1, "seq", 4])], [("y", [1, "seq", 4])], [zero])


@pytest.mark.parametrize("case", ["batch_sum", "dead", "softmax"])
def test_finding_severity_follows_whether_the_leak_reaches_an_output(case):
    if case == "batch_sum":
        m, feeds, target = _batch_sum_model(), {"x": np.arange(9, dtype=np.float32).reshape(3, 3)}, {"x": (4, 3)}
        pads = {"x": 1.0}
    elif case == "dead":
        m, feeds, target = _dead_leak_model(), {"x": np.random.RandomState(0).rand(1, 5, 4).astype(np.float32)}, \
            {"x": (1, 8, 4)}
        pads = {}
    else:
        m, feeds = samples.build_transformer_seq(), samples.transformer_seq_inputs(0, 24)
        target, pads = {"x": (1, 32, 64)}, {}
    rep = padding_sensitivity(m, feeds, target, pads)
    assert rep.findings
    for f in rep.findings:
        assert (f.severity == "error") == bool(f.evidence["reaches_outputs"])
        assert set(f.evidence["reaches_outputs"]) <= set(rep.summary["outputs_leak"])
    # independent: does padding change an output? (onnxruntime, padded vs exact, valid region)
    import onnxruntime as ort
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    exact = sess.run(None, feeds)[0]
    padded = sess.run(None, pad_feeds(feeds, target, pads))[0][tuple(slice(0, n) for n in exact.shape)]
    changed = not np.allclose(padded, exact, rtol=1e-4, atol=1e-6)
    assert bool(rep.summary["outputs_leak"]) == changed == (case != "dead")


def test_run_exits_1_when_a_leak_reaches_an_output_and_still_writes_everything(tmp_path):
    onnx.save(_batch_sum_model(), tmp_path / "bsum.onnx")
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.savez(tmp_path / "in.npz", x=x)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "x:-1,3", "dynamic_batch_size": "2,4", "pad_value": "x:1", **FP32}))
    r = _cli("run", tmp_path / "bsum.onnx", "--config", cfg, "--inputs", tmp_path / "in.npz", "--out", tmp_path / "r")
    assert r.returncode == 1, r.stderr
    assert "FAILED: padding to gear 4 changes output(s) y" in r.stdout and "ERROR   padding_leak: bsum" in r.stdout
    with np.load(tmp_path / "r" / "outputs.npz") as z:
        y = z["y"]
    np.testing.assert_allclose(y, x + x.sum(0) + 1)  # by hand: the padded row of ones joins the batch sum
    assert not np.allclose(y, x + x.sum(0))
    rep = json.loads((tmp_path / "r" / "padding.json").read_text())
    assert rep["outputs_leak"] == ["y"] and (tmp_path / "r" / "padding.csv").is_file()
    # a leak that dies before the output: warning, exit 0, outputs exact
    onnx.save(_dead_leak_model(), tmp_path / "dead.onnx")
    x = np.random.RandomState(1).rand(1, 5, 4).astype(np.float32)
    np.savez(tmp_path / "s.npz", x=x)
    cfg.write_text(json.dumps({"input_shape": "x:1,-1,4", "dynamic_dims": "4;8", **FP32}))
    r = _cli("run", tmp_path / "dead.onnx", "--config", cfg, "--inputs", tmp_path / "s.npz", "--out", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    assert "WARNING padding_leak: mean" in r.stdout and "FAILED" not in r.stdout
    with np.load(tmp_path / "d" / "outputs.npz") as z:
        np.testing.assert_array_equal(z["y"], x)


# ------------------------------------------------------------------------------ lengths file numbers (kind)
BAD_LENGTHS = ["99999999999999999999999", "1" * 5000, "2147483648", "1e400", "-1e400", "inf", "-inf", "nan", "NaN",
               "-3", "0", "0.0", "4.5", "1e-3", "abc", "0x10", "1_000", "12abc", "--5", "1e", "."]
GOOD_LENGTHS = {"7": 7, "+7": 7, "007": 7, "12.0": 12, "1e3": 1000, "2147483647": 2147483647}


@pytest.mark.parametrize("form", ["lines", "csv"])
@pytest.mark.parametrize("value", BAD_LENGTHS)
def test_every_bad_number_in_a_lengths_file_is_one_line_naming_the_line(tmp_path, form, value):
    p = tmp_path / "l.txt"
    if form == "lines":
        p.write_text(f"5\n# c\n{value}\n")
        where = "line 3"
    else:
        p.write_text(f"id,len\na,5\nb,{value}\n")
        where = "line 3 column 'len'"
    with pytest.raises(InputError, match=f"lengths file '.*l.txt' {where}: ") as exc:
        read_lengths(p, "len" if form == "csv" else None)
    assert len(_one_line(exc)) < 400


@pytest.mark.parametrize("form", ["lines", "csv"])
def test_good_numbers_in_a_lengths_file(tmp_path, form):
    p = tmp_path / "l.txt"
    texts = list(GOOD_LENGTHS)
    p.write_text("\n".join(texts) if form == "lines" else "len\n" + "\n".join(texts))
    assert read_lengths(p, "len" if form == "csv" else None).tolist() == list(GOOD_LENGTHS.values())


@pytest.mark.parametrize("bad", [[10**30], [float("inf")], [float("nan")], [2**31], ["a"], [0], [1.5]])
def test_lengths_given_in_python_are_usage_errors(bad):
    with pytest.raises(UsageError):
        dp.LengthHistogram.of(bad)


def test_gears_cli_bad_number_exit_1(tmp_path):
    (tmp_path / "l.txt").write_text("5\n99999999999999999999999\n")
    r = _cli("gears", "--lengths", tmp_path / "l.txt", "-k", "2", "--out", tmp_path / "o")
    assert r.returncode == 2 and "line 2" in _error_line(r) and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------ config snippets of `gears` (kind)
def _random_lengths(rs):
    kind = rs.randint(4)
    if kind == 0:
        return [int(rs.randint(1, 300))] * int(rs.randint(1, 6))  # one distinct length
    if kind == 1:
        return list(rs.randint(1, 400, size=rs.randint(1, 400)))
    if kind == 2:
        return list(range(1, int(rs.randint(2, 220))))  # many distinct lengths
    return list(np.clip(rs.lognormal(3, 0.7, 300).astype(int), 1, 500))


@pytest.mark.parametrize("seed", range(40))
def test_every_snippet_gears_emits_is_a_valid_config(seed):
    rs = np.random.RandomState(seed)
    lengths = _random_lengths(rs)
    k = int(rs.choice([1, 2, 3, 8, 100, 101, 200, 1000]))
    batch = bool(rs.rand() < 0.3)
    dim = "batch" if batch else "seq"
    tmpl = rs.choice(["x:-1,3,8,8"] if batch else ["x:1,-1,64;mask:1,-1", "x:1,-1,64", "x:1,3,48,-1"])
    for input_shape in (None, str(tmpl)):
        s = recommend(lengths, k, dim=dim, input_shape=input_shape)["summary"]
        snip, gears = s["config_snippet"], s["optimal"]["Gears"]
        assert s["k_used"] == min(k, MAX_GEARS) and len(gears) == min(k, MAX_GEARS, len(set(lengths)))
        assert gears[-1] == max(lengths)
        full = snip if input_shape else ({**snip, "input_shape": "x:-1" if batch else "x:1,-1"} if len(gears) > 1
                                         else snip)
        cfg = Config.from_dict(full)  # accepted by validation
        spec = parse_gears(cfg)
        if len(gears) == 1:  # the converter takes 2..100 gears: a static shape instead
            assert spec is None and any("no gears needed" in n for n in s["notes"])
            if input_shape:
                assert all(d != -1 for v in cfg.input_shapes().values() for d in v)
                assert gears[0] in [d for v in cfg.input_shapes().values() for d in v]
        else:
            assert MIN_GEARS <= len(spec.gears) <= MAX_GEARS
            assert sorted({v for g in spec.gears for v in g}) == gears
        assert any("above the 100 gears" in n for n in s["notes"]) == (k > MAX_GEARS)



def test_dims_snippet_fits_the_masked_sample():
    s = recommend([5, 9, 9, 30, 31], 3, input_shape="x:1,-1,64;mask:1,-1")["summary"]
    assert s["config_snippet"] == {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "5,5;9,9;31,31"}
    GearSession(samples.build_transformer_seq_masked(), Config.from_dict(s["config_snippet"]))  # checked vs model
    with pytest.raises(ConfigError, match="has no -1"):
        config_snippet([4, 8], "seq", "x:1,8,64")


def test_gears_cli_single_length_and_too_many_gears(tmp_path):
    (tmp_path / "five.txt").write_text("5\n5\n5\n")
    r = _cli("gears", "--lengths", tmp_path / "five.txt", "-k", "3", "--no-html", "--input-shape",
             "x:1,-1,64;mask:1,-1", "--out", tmp_path / "g")
    assert r.returncode == 0, r.stderr
    assert "no gears needed" in r.stdout and 'config: input_shape = "x:1,5,64;mask:1,5"' in r.stdout
    snip = json.loads((tmp_path / "g" / "gears.json").read_text())["config_snippet"]
    (tmp_path / "c.json").write_text(json.dumps(snip))
    r = _cli("compile", "transformer_seq_masked", "--config", tmp_path / "c.json", "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr  # compile takes the snippet
    (tmp_path / "many.txt").write_text("\n".join(str(i) for i in range(1, 160)))
    r = _cli("gears", "--lengths", tmp_path / "many.txt", "-k", "200", "--no-html", "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert "-k 200 is above the 100 gears the converter takes; chose 100" in r.stdout
    data = json.loads((tmp_path / "m" / "gears.json").read_text())
    assert len(data["config_snippet"]["dynamic_dims"].split(";")) == 100 and data["k_used"] == 100


# ------------------------------------------------------------------------------ config gaps (kind)
GEARS = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}


@pytest.mark.parametrize("pad,msg", [
    ("mask:1e400", "'1e400', which is not finite"), ("mask:inf", "not finite"), ("x:-inf", "not finite"),
    ({"mask": math.inf}, "not finite"), ({"mask": float("nan")}, "NaN"), ("mask:nan", "NaN"),
    ({"mask": 10**400}, "expected a number"), ("mask:0;mask:1", "gives 'mask' twice"),
    ("mask:0;x:0;mask:0", "gives 'mask' twice"), ({"mask": True}, "is True; expected a number"),
    ({"mask": [1]}, r"is \[1\]; expected a number"), ({"mask": None}, "expected a number"),
    ({"mask": "abc"}, "expected a number"), ({"mask": {}}, "expected a number"),
    ("maks:0", "did you mean 'mask'"),
])
def test_bad_pad_values(pad, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        Config.from_dict({**GEARS, "pad_value": pad})
    _one_line(exc)


@pytest.mark.parametrize("shape,msg", [
    ("x:1,-1,64;mask:1,-1;x:1,-1,64", "gives input 'x' twice"),
    ("x:1,16,64;x:1,16,64", "gives input 'x' twice"),
    ("x:1,99999999999999999999999,64", "<= 9223372036854775807"),
])
def test_bad_input_shapes(shape, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        Config.from_dict({"input_shape": shape}).input_shapes(dynamic=True)
    _one_line(exc)


def test_unknown_input_in_input_shape_is_a_config_error_with_did_you_mean(tmp_path):
    m = samples.build_transformer_seq_masked()
    with pytest.raises(ConfigError, match="input_shape names 'xx', which is not a model input \\(did you mean 'x'"):
        GearSession(m, Config.from_dict({"input_shape": "xx:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}))
    with pytest.raises(ConfigError, match="names 'mask_', which is not a model input \\(did you mean 'mask'"):
        compile_model(m, Config.from_dict({"input_shape": "x:1,8,64;mask_:1,8"}))
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"input_shape": "y:1,-1,64", "dynamic_dims": "16;32"}))
    for args in (["run", "transformer_seq", "--config", cfg], ["compile", "transformer_seq", "--input-shape", "xx:1,8,64"],
                 ["run", "transformer_seq", "--input-shape", "xx:1,8,64"]):
        r = _cli(*args, "--out", tmp_path / "o")
        assert r.returncode == 2, r.stderr
        assert "which is not a model input" in _error_line(r)


@pytest.mark.parametrize("dtype,fill,msg", [(np.float32, 1e39, "outside the float32 range"),
                                            (np.float16, 7e4, "outside the float16 range"),
                                            (np.int64, 0.5, "not an integer"), (np.int8, 300, "not an integer"),
                                            (np.bool_, 2, "not an integer")])
def test_pad_value_the_input_type_cannot_hold(dtype, fill, msg):
    with pytest.raises(InputError, match=msg):
        pad_feeds({"x": np.zeros((1, 2), dtype)}, {"x": (1, 4)}, {"x": fill})
