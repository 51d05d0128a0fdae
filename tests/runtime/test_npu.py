"""The NPU runtime (toolkit/runtime/npu.py) checks the arena against this machine's memory before allocating it:
a model whose declared sizes cannot fit is a one-line ModelError, and a small model still runs."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.graphs import mlp_model
from toolkit.config.schema import Config
from toolkit.engine import Session, compile_model
from toolkit.ir.load import load_model
from toolkit.ir.weights import has_mapped
from toolkit.core.errors import ModelError
from toolkit.runtime.host_memory import host_memory_bytes
from toolkit.runtime.npu import NpuRuntime


def huge_model(elems: int) -> onnx.ModelProto:
    """y = x + ReduceSum(ConstantOfShape([elems])): the constant's size is only known at compile time."""
    shape = numpy_helper.from_array(np.array([elems], np.int64), "shp")
    nodes = [helper.make_node("ConstantOfShape", ["shp"], ["big"], name="cos"),
             helper.make_node("ReduceSum", ["big"], ["s"], name="rs", keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture()
def too_big() -> int:
    total = host_memory_bytes()
    if not total:
        pytest.skip("this machine does not report its memory size")
    return total // 4 + 1  # float32 elements: the constant alone is the machine's whole memory


def test_runtime_refuses_an_arena_larger_than_the_machine(too_big):
    plan = compile_model(huge_model(too_big)).plan
    assert plan.arena_bytes >= too_big * 4  # the plan really holds the constant
    with pytest.raises(ModelError, match=r"arena needs .* more than 80% of this machine's .*'big'"):
        NpuRuntime(compile_model(huge_model(too_big)))


def test_a_small_model_still_runs():
    y = NpuRuntime(compile_model(huge_model(8))).run({"x": np.ones((1, 4), np.float32)}).outputs["y"]
    np.testing.assert_allclose(y, np.ones((1, 4)) * 0 + 1)  # ConstantOfShape's default value is 0


# ---------------------------------------------------------------- weights left on disk (toolkit.ir.weights)
@pytest.mark.parametrize("precision_mode,overflow_mode", [("force_fp16", "inf_nan"), ("force_fp16", "saturation"),
                                                          ("force_fp32", "inf_nan"),
                                                          ("allow_mix_precision", "inf_nan")])
@pytest.mark.parametrize("scale", [1.0, 3e4])  # 3e4: FP16 overflow inside the MatMuls and in the weights' rounding
def test_mapped_weights_give_the_in_memory_results(tmp_path, precision_mode, overflow_mode, scale):
    """Kernels fed the memory-mapped weights compute what kernels holding them as constants compute (the
    in-memory side: onnx.load with its external data, all in the proto): every dumped tensor equal up to the
    summation order of onnxruntime's GEMM (a constant B is prepacked, an input B is not): FP32 tensors within
    1e-5 relative or 1e-4 of the tensor's largest magnitude, FP16 tensors within one FP16 step, FP16 overflow (inf) at the same positions."""
    rng = np.random.default_rng(7)
    path, _ = mlp_model(tmp_path, rng)
    m = onnx.load(str(path))  # every weight in memory
    for t in m.graph.initializer:
        if t.name.startswith("W"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(scale), t.name))
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
    mapped = load_model(path)
    assert has_mapped(mapped)
    whole = onnx.load(str(path))
    cfg = Config(precision_mode=precision_mode, overflow_mode=overflow_mode, op_compiler_cache_mode="disable")
    feeds = {"ids": rng.integers(0, 600, (1, 16))}
    a = Session(mapped, cfg, input_shapes={"ids": (1, 16)}).run(feeds, dump=True)
    b = Session(whole, cfg, input_shapes={"ids": (1, 16)}).run(feeds, dump=True)
    assert a.dumps.keys() == b.dumps.keys()
    for k in b.dumps:
        x, y = a.dumps[k], b.dumps[k]
        assert x.dtype == y.dtype and x.shape == y.shape, k
        if x.dtype.kind != "f":
            np.testing.assert_array_equal(x, y, err_msg=k)
            continue
        np.testing.assert_array_equal(np.isinf(x), np.isinf(y), err_msg=k)
        step = 2.0 ** -10 if x.dtype == np.float16 else 1e-5
        fin = np.isfinite(y)
        scale = float(np.abs(y[fin]).max()) if fin.any() else 0.0
        np.testing.assert_allclose(x[fin].astype(np.float64), y[fin].astype(np.float64), rtol=step,
                                   atol=(1e-2 if x.dtype == np.float16 else 10) * step * scale, err_msg=k)


@pytest.mark.parametrize("declared", [0, 5, 1000])
def test_a_declared_output_shape_the_ops_contradict_is_a_model_error(declared):
    """Kind: a graph output declared with a static shape its producer does not write (onnxruntime runs such a
    model: it checks declared output shapes only as a warning). The plan takes the declaration; the runtime
    finds the kernel's write differs and names the output, both shapes and the fix (exit 1, not 3)."""
    import onnxruntime as ort

    from toolkit import samples
    from toolkit.engine import Session

    model = samples.build_detector_head()
    feeds = samples.detector_head_inputs()
    out = next(o for o in model.graph.output if o.type.tensor_type.shape.dim)
    real = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        [out.name], feeds)[0].shape  # independent: what the model really writes
    assert real[0] != declared
    out.type.tensor_type.shape.dim[0].Clear()
    out.type.tensor_type.shape.dim[0].dim_value = declared
    with pytest.raises(ModelError) as exc:
        Session(model).run(feeds)
    text = str(exc.value)
    assert "\n" not in text and f"declares output '{out.name}' as [{declared}, " in text
    assert f"[{real[0]}, " in text and "fix or remove the declared shape" in text


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("precision_mode", ["force_fp16", "force_fp32", "allow_mix_precision"])
def test_kernels_rounding_a_large_mapped_weight_shrink_the_arena_and_compute_the_same(tmp_path, precision_mode,
                                                                                       monkeypatch):
    """FP16 kernels that read a weight left on disk of at least SHRINK_MIN_BYTES run with the shrinking
    RunOptions (their FP16 rounding buffers go back after the run); they are exactly those, and the outputs are
    bit for bit those of runs without it."""
    from toolkit.ort import terminate
    from toolkit.runtime import npu

    rng = np.random.default_rng(3)
    path, _ = mlp_model(tmp_path, rng)
    m = onnx.load(str(path))
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, size_threshold=0)
    model = load_model(path)
    cfg = Config(precision_mode=precision_mode, op_compiler_cache_mode="disable")
    feeds = {"ids": rng.integers(0, 600, (1, 16))}
    plain = Session(model, cfg, input_shapes={"ids": (1, 16)}).run(feeds).outputs
    limit = 2048  # small enough that this model's weights count as large
    monkeypatch.setattr(npu, "SHRINK_MIN_BYTES", limit)
    compiled = compile_model(model, cfg, input_shapes={"ids": (1, 16)})
    rt = NpuRuntime(compiled)
    want = {i for i, ek in enumerate(rt.kernels) if ek.spec.precision == "fp16"
            and any(isinstance(rt.weights.get(t), np.memmap) and rt.weights[t].nbytes >= limit for _, t in ek.feeds)}
    assert rt.shrink == want
    assert bool(want) == (precision_mode != "force_fp32")
    seen = []
    real = terminate.run_options
    monkeypatch.setattr(npu, "run_options", lambda shrink=False: seen.append(shrink) or real(shrink))
    for _ in range(2):
        got = rt.run(feeds).outputs
        assert got.keys() == plain.keys()
        for k in got:
            np.testing.assert_array_equal(got[k].view(np.uint8), plain[k].view(np.uint8), err_msg=k)
    assert seen.count(True) == 2 * len(want)
    opts = real(True)
    assert opts.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    terminate.terminate_runs()
    try:
        assert opts.terminate and real().terminate  # a signal stops both shared options
    finally:
        terminate.reset()
    assert not opts.terminate
