"""Build executable kernels from a Plan and its compiled graph.

A kernel is a small ONNX model — the kernel's original nodes, their constants, and Cast nodes at its
boundary — run by a cached onnxruntime session, which realises the numerics contract
(toolkit.precision.contract):

- every kernel computes in FP32: float tensors stored in FP16 enter as ``<name>__h`` graph inputs cast to
  FP32 inside (exact), float tensors stored in FP32 enter as they are, and each float output stored in FP16
  is rounded once (``Cast``; in ``saturation`` overflow mode a ``Clip`` to ±65504 comes first). So an FP16
  kernel reads FP16, computes in FP32 (FP32 accumulation for cube ops, FP32 intermediates for fused kernels)
  and rounds once at its output, whether its tensors are float32 or float16 in the model;
- FP16-origin models (float16 tensors in the ONNX file) are computed in FP32 the same way: the kernel's nodes
  are retyped (:func:`fp32_node`: Cast ``to``/``dtype``/``output_dtype`` float16 → float32, float16 tensor
  attributes and subgraph types widened) and its float16 constants widened to float32 (exact), so an FP16
  kernel on FP16-origin data follows the same contract and an FP32 kernel (force_fp32, keep_dtype, black
  list, CPU) really computes and stores in FP32;
- an FP16 kernel's float32 constants are rounded to FP16 at build time (parameters such as Resize scales
  excepted);
- in ``high_performance`` mode a single-node FP16 reduction/normalisation runs the FP16-accumulating numpy
  kernel of toolkit.runtime.fp16_accum instead;
- FP32 kernels on float32 tensors run the original nodes unchanged (CPU-placed kernels are always FP32,
  reading and writing host memory);
- host-device copy kernels (MemcpyH2D / MemcpyD2H, ``fusion == "copy"``) are numpy copies between host
  storage and the arena (:func:`_copy_exec`).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from toolkit.compiler.passes.check_constants import FP32_PARAMETERS
from toolkit.compiler.plan import KernelSpec, Plan
from toolkit.core.errors import ModelError
from toolkit.ir.graph import node_reads
from toolkit.ir.weights import array_of, has_mapped
from toolkit.ort import ort_values
from toolkit.ort.ort_env import make_session
from toolkit.ort.terminate import run_options
from toolkit.precision.contract import FP16_MAX
from toolkit.runtime import fp16_accum
from toolkit.runtime.canonical import canonical_kernel

_SESSIONS: dict[str, object] = {}


@dataclass
class ExecKernel:
    spec: KernelSpec
    feeds: list[tuple[str, str]]  # (kernel input name, plan tensor)
    fetches: list[tuple[str, str]]  # (kernel output name, plan tensor)
    session: object = None
    numpy_fn: object = None
    attrs: dict = field(default_factory=dict)
    digest: str = ""
    node_names: dict = field(default_factory=dict)  # the session's node names -> the kernel model's (canonical)
    native_fp16: bool = False  # runs on FP16 data without boundary Casts (see NATIVE_FP16_*)
    ortvalues: bool = False  # exchanges bfloat16/float8/int4... tensors through OrtValues (set by NpuRuntime)

    def __call__(self, values: list[np.ndarray]) -> list[np.ndarray]:
        if self.numpy_fn is not None:
            return [self.numpy_fn(values, self.attrs)]
        if self.ortvalues:  # onnxruntime's run() cannot exchange these dtypes as numpy arrays

            return ort_values.run(self.session, [f for f, _ in self.fetches],
                                  {k: v for (k, _), v in zip(self.feeds, values)}, f"kernel '{self.spec.name}'")
        return self.session.run([f for f, _ in self.fetches], {k: v for (k, _), v in zip(self.feeds, values)},
                                run_options())


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _elem(dtype: str) -> int:
    """ONNX element type of a plan dtype name; ``object`` is a string tensor (host values never get here)."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) if dtype != "object" else TensorProto.STRING


def _typed_vi(name: str, tt, typ, output: bool = False) -> onnx.ValueInfoProto:
    """Declaration of a float kernel input/output in its storage dtype ``tt.dtype`` (``tt``: TensorSpec): host
    tensors keep the model's declared type ``typ`` (symbolic dims included) with that element type; device
    inputs take the plan's shape, device outputs no shape."""
    elem = _elem(tt.dtype)
    if tt.storage == "host":
        vi = onnx.ValueInfoProto()
        vi.name = name
        vi.type.CopyFrom(typ)
        vi.type.tensor_type.elem_type = elem
        return vi
    return _vi(name, elem, None if output else tt.shape)


def _source(plan: Plan, tensor: str, cast_src: dict[str, str]) -> str:
    return cast_src.get(tensor, tensor)


def _round_const(c: np.ndarray, overflow_mode: str) -> np.ndarray:
    if overflow_mode == "saturation":
        c = np.clip(c, -FP16_MAX, FP16_MAX)
    # overflow to inf is the contract's inf_nan behaviour (check_constants reports it), not a Python warning
    with np.errstate(over="ignore"):
        return c.astype(np.float16).astype(np.float32)


def _cast_kernel(spec: KernelSpec, plan: Plan, overflow_mode: str):
    src, dst = spec.inputs[0], spec.outputs[0]
    src_t, dst_t = plan.tensors[src], plan.tensors[dst]
    nodes = []
    x = "x"
    if dst_t.dtype == "float16" and overflow_mode == "saturation":
        nodes.append(helper.make_node("Clip", [x, "lo", "hi"], ["xc"]))
        x = "xc"
    nodes.append(helper.make_node("Cast", [x], ["y"], to=_elem(dst_t.dtype)))
    inits = [numpy_helper.from_array(np.array(-FP16_MAX, np.float32), "lo"),
             numpy_helper.from_array(np.array(FP16_MAX, np.float32), "hi")] if len(nodes) == 2 else []
    graph = helper.make_graph(nodes, spec.name, [_vi("x", _elem(src_t.dtype), src_t.shape)],
                              [_vi("y", _elem(dst_t.dtype), None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), [("x", src)], [("y", dst)]


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


#: ONNX element types of the float tensors the precision passes handle (FP32-origin, FP16-origin).
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16)
#: Integer attributes of default-domain ops that name an element type (Cast, EyeLike, Random*, Dequantize...).
_DTYPE_ATTRS = ("to", "dtype", "output_dtype")


def _float_type(types: dict, name: str) -> bool:
    """Whether ``name`` is a float32 or float16 tensor in the model (``types``: name -> TypeProto)."""
    t = types.get(name)
    return t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type in _FLOATS


def _widen_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(array_of(t).astype(np.float32), t.name)


def _retype_graph(g: onnx.GraphProto) -> bool:
    """Widen float16 to float32 in a subgraph's declared types, initializers and nodes (in place)."""
    changed = False
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
            changed = True
    for i, init in enumerate(g.initializer):
        if init.data_type == TensorProto.FLOAT16:
            g.initializer[i].CopyFrom(_widen_tensor(init))
            changed = True
    for node in g.node:
        for a in node.attribute:
            changed |= _retype_attr(a, node.domain in ("", "ai.onnx"))
    return changed


def _retype_attr(a: onnx.AttributeProto, default_domain: bool) -> bool:
    if a.type == onnx.AttributeProto.INT and default_domain and a.name in _DTYPE_ATTRS \
            and a.i == TensorProto.FLOAT16:
        a.i = TensorProto.FLOAT
        return True
    if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
        a.t.CopyFrom(_widen_tensor(a.t))
        return True
    if a.type == onnx.AttributeProto.GRAPH:
        return _retype_graph(a.g)
    if a.type == onnx.AttributeProto.GRAPHS:
        return any([_retype_graph(sub) for sub in a.graphs])
    return False


def fp32_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """``node`` computing in FP32: a copy with every float16 element type in its attributes widened to float32
    (Cast ``to``, ``dtype`` / ``output_dtype`` of default-domain ops, float16 tensor attributes such as
    Constant/ConstantOfShape values, and the types, initializers and nodes of subgraphs); ``node`` itself
    when it has none. Its float16 tensor inputs must be given as float32 too (build_kernel_model does)."""
    if not node.attribute:
        return node
    new = onnx.NodeProto()
    new.CopyFrom(node)
    changed = [_retype_attr(a, node.domain in ("", "ai.onnx")) for a in new.attribute]
    return new if any(changed) else node


#: Ops whose onnxruntime CPU float16 kernel is bit-identical to the contract's "FP16 in, FP32 compute, one
#: rounding" (verified over random FP16 bit patterns by tests/test_native_fp16.py): a single-node FP16 kernel
#: of these runs natively on FP16 data and skips its boundary Casts (about 2 ms per 1.6M elements each).
NATIVE_FP16_ARITH = frozenset({"Add", "Sub", "Mul", "Div", "Sigmoid", "HardSwish", "Tanh", "Exp", "Sqrt"})
#: Data movement and selection: exact on FP16 data, cannot overflow (allowed in saturation mode too).
NATIVE_FP16_MOVE = frozenset({"Relu", "Concat", "Transpose", "Reshape", "Slice", "Squeeze", "Unsqueeze",
                              "Flatten", "Identity", "Split", "MaxPool"})


def _native_fp16_ok(spec, nodes, plan, types, cast_src, overflow_mode) -> bool:
    if spec.precision != "fp16" or len(nodes) != 1 or spec.fusion != "none":
        return False
    op = nodes[0].op_type
    if not (op in NATIVE_FP16_MOVE or (op in NATIVE_FP16_ARITH and overflow_mode != "saturation")):
        return False
    for t in spec.inputs + spec.outputs:
        tt = plan.tensors.get(t)
        orig = _source(plan, t, cast_src)
        if tt is None or tt.storage == "host" or types.get(orig) is None:
            return False
        if not _float_type(types, orig) or tt.dtype != "float16":
            return False  # only FP16-stored float (float32- or float16-origin) tensors in and out
    return True


def _native_fp16_model(spec, nodes, plan, graph_model, consts, cast_src, overflow_mode):
    """The kernel as its single node over FP16 tensors and FP16 constants, no boundary Casts."""
    g_inputs, feeds, inits = [], [], []
    for t in spec.inputs:
        orig = _source(plan, t, cast_src)
        tt = plan.tensors[t]
        g_inputs.append(_vi(orig, TensorProto.FLOAT16, tt.shape if tt.storage == "arena" else None))
        feeds.append((orig, t))
    for i in nodes[0].input:
        if i in consts:
            c = consts[i]
            inits.append(numpy_helper.from_array(_round_const(c, overflow_mode).astype(np.float16)
                                                 if c.dtype == np.float32 else c, i))
    g_outputs = [_vi(t, TensorProto.FLOAT16, None) for t in spec.outputs]
    graph = helper.make_graph(list(nodes), spec.name, g_inputs, g_outputs, inits)
    model = helper.make_model(graph, opset_imports=list(graph_model.opset_import), ir_version=graph_model.ir_version)
    return model, feeds, [(t, t) for t in spec.outputs]


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _without_subgraph_hints(node: onnx.NodeProto) -> onnx.NodeProto:
    """``node`` with the ``value_info`` of its subgraphs (at any depth) removed: a copy, or ``node`` itself when
    it has no subgraph (output shapes of subgraphs are removed too, their element types kept). Compile-time
    shape inference writes inferred shapes into If/Loop/Scan bodies; where it
    merged two branches of different ranks (an If whose branches give [N, 128] and [1, 128, 2]) the hint
    contradicts what a branch computes and onnxruntime refuses the kernel. onnxruntime infers them itself."""
    if not _has_subgraph(node):
        return node
    new = onnx.NodeProto()
    new.CopyFrom(node)

    def clear(g: onnx.GraphProto) -> None:
        del g.value_info[:]
        for o in g.output:  # the element type stays: a subgraph output must be typed
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.ClearField("shape")
        for n in g.node:
            for a in n.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    clear(sub)

    for a in new.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            clear(sub)
    return new


def build_kernel_model(spec: KernelSpec, plan: Plan, graph_model: onnx.ModelProto, by_name: dict,
                       consts: dict, types: dict, cast_src: dict, overflow_mode: str):
    """(ModelProto, feeds, fetches) for one kernel; see module docstring."""
    if spec.fusion == "cast":
        return _cast_kernel(spec, plan, overflow_mode)
    nodes = [_without_subgraph_hints(fp32_node(by_name[n])) for n in spec.exec_nodes]
    fp16 = spec.precision == "fp16"
    g_inputs, pre, post, feeds, fetches, inits = [], [], [], [], [], []
    for t in spec.inputs:
        orig = _source(plan, t, cast_src)
        tt = plan.tensors[t]
        # dynamic tensors keep the rank and the dims shape inference knows (None = symbolic): ops such as
        # Scan need their bodies' output shapes inferable from the kernel's input declarations
        shape = tt.shape
        if _float_type(types, orig) and tt.dtype in ("float16", "float32"):
            name = orig + "__h" if tt.dtype == "float16" else orig
            g_inputs.append(_typed_vi(name, tt, types[orig]))
            if tt.dtype == "float16":  # read in FP16, computed in FP32 (exact)
                pre.append(helper.make_node("Cast", [name], [orig], to=TensorProto.FLOAT))
            feeds.append((name, t))
        elif tt.storage == "host":
            vi = onnx.ValueInfoProto()
            vi.name = orig
            vi.type.CopyFrom(types[orig])
            g_inputs.append(vi)
            feeds.append((orig, t))
        else:
            g_inputs.append(_vi(orig, _elem(tt.dtype), shape))
            feeds.append((orig, t))
    seen = set()
    bind = not any(n.op_type in KEEP_EMBEDDED_OPS or _has_subgraph(n) for n in nodes)
    for node in nodes:
        for idx, i in enumerate(node_reads(node)):
            if i in consts and i not in seen:
                seen.add(i)
                c = consts[i]
                param = idx < len(node.input) and (node.op_type, idx) in FP32_PARAMETERS
                if isinstance(c, np.memmap):  # a weight left on disk: fed from its map at run time, not copied
                    pre += _mapped_weight(i, c, fp16 and c.dtype == np.float32 and not param, overflow_mode,
                                          g_inputs, feeds, inits)
                    continue
                if bind and c.dtype in (np.float32, np.float16) and c.nbytes >= BIND_MIN_BYTES:
                    rounded = fp16 and c.dtype == np.float32 and not param
                    g_inputs.append(_vi(i, TensorProto.FLOAT, list(c.shape)))
                    feeds.append((i, bound_key(i, "f16" if rounded else "f32")))
                    continue
                if c.dtype == np.float16:  # FP16-origin constant: computed in FP32 (exact)
                    c = c.astype(np.float32)
                elif fp16 and c.dtype == np.float32 and not param:
                    c = _round_const(c, overflow_mode)
                inits.append(numpy_helper.from_array(c, i))
    g_outputs = []
    for t in spec.outputs:
        tt = plan.tensors[t]
        if tt.storage == "host" and t not in types:  # backstop: bind_shapes refuses shapes leaving it untyped
            raise ModelError(f"kernel '{spec.name}' ({spec.op_type}): the type of its output '{t}' is unknown "
                             "after shape inference; check the input shapes given for the model")
        if _float_type(types, t) and tt.dtype == "float32":  # computed and stored in FP32
            g_outputs.append(_typed_vi(t, tt, types[t], output=True))
            fetches.append((t, t))
        elif tt.storage == "host" and not _float_type(types, t):
            vi = onnx.ValueInfoProto()
            vi.name = t
            vi.type.CopyFrom(types[t])
            g_outputs.append(vi)
            fetches.append((t, t))
        elif tt.dtype == "float16" and _float_type(types, t):  # computed in FP32, rounded once to FP16
            x = t
            if overflow_mode == "saturation":
                post.append(helper.make_node("Clip", [x, "__sat_lo", "__sat_hi"], [t + "__sat"]))
                x = t + "__sat"
            post.append(helper.make_node("Cast", [x], [t + "__h"], to=TensorProto.FLOAT16))
            g_outputs.append(_typed_vi(t + "__h", tt, types[t], output=True))
            fetches.append((t + "__h", t))
        else:
            g_outputs.append(_vi(t, _elem(tt.dtype), None))
            fetches.append((t, t))
    if overflow_mode == "saturation" and any(n.op_type == "Clip" and "__sat_lo" in n.input for n in post):
        inits += [numpy_helper.from_array(np.array(-FP16_MAX, np.float32), "__sat_lo"),
                  numpy_helper.from_array(np.array(FP16_MAX, np.float32), "__sat_hi")]
    if any(_has_subgraph(n) for n in nodes):
        # control flow: onnxruntime infers the types of every branch from the declared inputs, also of branches
        # that never run for these shapes (silero-vad's 8 kHz path cannot take a 16 kHz frame); declared
        # without shapes, as an exporter's dynamic inputs are, each branch is checked only when it runs
        for vi in g_inputs:
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
    graph = helper.make_graph(pre + list(nodes) + post, spec.name, g_inputs, g_outputs, inits)
    model = helper.make_model(graph, opset_imports=list(graph_model.opset_import),
                              ir_version=graph_model.ir_version)
    model.functions.extend(graph_model.functions)
    return model, feeds, fetches


#: Float constants of at least this many bytes are kernel inputs bound at run time (:func:`bound_values`), not
#: initializers inside the kernel model: kernels of identical layers are then the same bytes and share one session
#: (toolkit.runtime.canonical). Smaller ones (scalars, eps) stay inside.
BIND_MIN_BYTES = 64
#: Kernels holding one of these keep their constants inside: onnxruntime's NCHWc layout and weight pre-packing of
#: a convolution need its weights as initializers (measured on PP-OCRv4 det; convolution layers seldom repeat).
KEEP_EMBEDDED_OPS = frozenset({"Conv", "ConvTranspose", "QLinearConv", "ConvInteger"})
_BOUND = "\x00"


def bound_key(name: str, variant: str) -> str:
    """The runtime's key of constant ``name`` as a kernel reads it: ``variant`` "f32" (float32; float16-origin
    constants widened, exact) or "f16" (float32 rounded to FP16 and back at build time, as constants inside an
    FP16 kernel are). The NUL separator keeps it apart from every plan tensor name."""
    return f"{name}{_BOUND}{variant}"


def bound_values(kernels: list, graph_model: onnx.ModelProto, overflow_mode: str) -> dict:
    """{bound key: float32 array} of every bound constant the ``kernels`` feed (:func:`bound_key`), each computed
    once from the compiled model's initializer: widened (exact) or rounded (:func:`_round_const`)."""
    wanted = {t for ek in kernels for _, t in ek.feeds if _BOUND in t}
    if not wanted:
        return {}
    inits = {i.name: i for i in graph_model.graph.initializer}
    out = {}
    for key in wanted:
        name, variant = key.rsplit(_BOUND, 1)
        c = array_of(inits[name])
        c = _round_const(c, overflow_mode) if variant == "f16" else c.astype(np.float32)
        out[key] = np.ascontiguousarray(c)
    return out


def _mapped_weight(name: str, c: np.memmap, round_fp16: bool, overflow_mode: str, g_inputs: list, feeds: list,
                   inits: list) -> list:
    """Declare the memory-mapped constant ``name`` (toolkit.ir.weights) as a kernel input ``<name>__w`` fed with
    the map itself (the runtime reads feeds it does not hold as tensors from the model's mapped weights), and
    return the nodes that give the kernel its value as a built-in constant would: float16 widened to float32
    (exact); ``round_fp16``: rounded to FP16 and back, after a Clip to +-65504 in saturation mode, as
    :func:`_round_const` does at build time for constants held in the kernel."""
    src = name + "__w"
    g_inputs.append(_vi(src, _elem(str(c.dtype)), list(c.shape)))
    feeds.append((src, name))
    if c.dtype == np.float16:
        return [helper.make_node("Cast", [src], [name], to=TensorProto.FLOAT)]
    if not round_fp16:
        return [helper.make_node("Identity", [src], [name])]
    nodes, x = [], src
    if overflow_mode == "saturation":
        lo, hi = name + "__w_lo", name + "__w_hi"
        inits += [numpy_helper.from_array(np.array(-FP16_MAX, np.float32), lo),
                  numpy_helper.from_array(np.array(FP16_MAX, np.float32), hi)]
        nodes.append(helper.make_node("Clip", [x, lo, hi], [name + "__w_sat"]))
        x = name + "__w_sat"
    return nodes + [helper.make_node("Cast", [x], [name + "__w_h"], to=TensorProto.FLOAT16),
                    helper.make_node("Cast", [name + "__w_h"], [name], to=TensorProto.FLOAT)]


def _numpy_kernel(spec: KernelSpec, by_name, consts, opset: int):
    if not (spec.precision == "fp16" and spec.implmode == "high_performance" and len(spec.exec_nodes) == 1
            and spec.fusion != "cast"):
        return None
    node = by_name[spec.exec_nodes[0]]
    fn = fp16_accum.KERNELS.get(node.op_type)
    if fn is None or opset < 13 or len([o for o in node.output if o]) != 1:
        return None
    return fn, _attrs(node)


class SessionSource(Protocol):
    """Where :func:`build_kernels` gets its onnxruntime sessions besides this process' own (the compile cache's
    kernel entries: toolkit.cache.kernel_entries.Build; passed in by toolkit.engine)."""

    def from_recipe(self, i: int, spec: KernelSpec, sessions: dict) -> tuple | None:
        """(session, feeds, fetches, native_fp16, digest) of kernel ``i`` without building its model, or None."""

    def session(self, data: bytes, key: str, optimize) -> object:
        """The session of kernel model ``data`` (sha256 hex ``key``), loaded or built."""

    def reused(self, sess, key: str, optimize) -> None:
        """``sess`` came from this process' sessions."""

    def made(self, sess, key: str, optimize) -> None:
        """``sess`` came from :meth:`session`."""

    def finish(self, kernels: list) -> None:
        """Every kernel is built."""

    def close(self) -> None:
        """The build is over (also after an error)."""


def _cached_session(data: bytes, optimize, key: str | None = None, source: SessionSource | None = None) -> object:
    """The session of kernel model ``data`` (``key``: its sha256 hex digest when the caller has it): from this
    process' sessions, else from ``source`` (the compile cache's kernel entries), else built."""
    key = key or hashlib.sha256(data).hexdigest()
    sess = _SESSIONS.get(key)
    if sess is None:
        sess = source.session(data, key, optimize) if source is not None else make_session(data, optimize=optimize)
        _SESSIONS[key] = sess
        if source is not None:
            source.made(sess, key, optimize)
    elif source is not None:
        source.reused(sess, key, optimize)
    return sess


def _numpy_exec(spec, by_name, consts, opset, overflow_mode) -> ExecKernel | None:
    """The FP16-accumulating numpy kernel (high_performance reductions), or None if it does not apply."""
    npk = _numpy_kernel(spec, by_name, consts, opset)
    if npk is None:
        return None
    base, attrs = npk
    node = by_name[spec.exec_nodes[0]]
    input_order = [idx for idx, i in enumerate(node.input) if i and i not in consts]
    # constants (axes, scale, bias) are converted once, here, as the ONNX-session kernels do (saturation
    # clamps them); they fill the node's constant input slots at every call
    const_inputs = [(idx, _round_const(consts[i], overflow_mode).astype(np.float16)
                     if spec.precision == "fp16" and consts[i].dtype == np.float32 else consts[i])
                    for idx, i in enumerate(node.input) if i in consts]
    saturate = overflow_mode == "saturation"

    def call(values, attrs):
        full = [None] * len(node.input)
        for idx, v in zip(input_order, values):
            full[idx] = v
        for idx, c in const_inputs:
            full[idx] = c
        out = base(full, attrs)
        # saturation mode clamps the kernel's FP16 result to +-65504 (NaN stays NaN)
        return np.clip(out, -FP16_MAX, FP16_MAX).astype(out.dtype) if saturate else out

    return ExecKernel(spec, [(t, t) for t in spec.inputs], [(t, t) for t in spec.outputs], numpy_fn=call,
                      attrs=attrs)


def _native_exec(spec, plan, graph_model, by_name, consts, types, cast_src, overflow_mode,
                 source: SessionSource | None = None) -> ExecKernel | None:
    """The kernel on FP16 data without boundary Casts (see NATIVE_FP16_*), or None if it does not apply."""
    nodes = [by_name[n] for n in spec.exec_nodes]
    if any(isinstance(consts.get(i), np.memmap) for n in nodes for i in n.input):
        return None  # weights left on disk are fed as inputs: the Cast-bounded kernel handles them
    if not _native_fp16_ok(spec, nodes, plan, types, cast_src, overflow_mode):
        return None
    model, feeds, fetches = _native_fp16_model(spec, nodes, plan, graph_model, consts, cast_src, overflow_mode)
    try:
        sess = _cached_session(model.SerializeToString(), "all", source=source)
    except Exception:  # no FP16 kernel for these attributes: the Cast version is used instead
        return None
    return ExecKernel(spec, feeds, fetches, session=sess, native_fp16=True)


def _copy_exec(spec: KernelSpec, plan: Plan) -> ExecKernel | None:
    """A host-device copy kernel (``fusion == "copy"``, MemcpyH2D / MemcpyD2H), or None for other kernels.

    It returns its input as a new buffer: the runtime then stores it in the destination (an arena view: the
    runtime's write is the copy; host or dynamic storage: this fresh copy, never a view of the source).
    Sequences (lists) are copied element by element; an empty optional (None) stays None."""
    if spec.fusion != "copy":
        return None
    dst = plan.tensors.get(spec.outputs[0])
    into_arena = dst is not None and dst.storage == "arena"

    def copy(values, attrs):
        x = values[0]
        if x is None or isinstance(x, list):
            return None if x is None else [np.array(v, copy=True) for v in x]
        return np.asarray(x) if into_arena else np.array(x, copy=True)

    return ExecKernel(spec, [(spec.inputs[0], spec.inputs[0])], [(spec.outputs[0], spec.outputs[0])],
                      numpy_fn=copy)


def _session_exec(spec, plan, graph_model, by_name, consts, types, cast_src, overflow_mode,
                  source: SessionSource | None = None) -> ExecKernel:
    """The kernel as its ONNX subgraph with FP16 Casts at its edges (module docstring). Raises ModelError."""
    model, feeds, fetches = build_kernel_model(spec, plan, graph_model, by_name, consts, types, cast_src,
                                               overflow_mode)
    before = [n.name for n in model.graph.node]
    model, feeds, fetches = canonical_kernel(model, feeds, fetches)  # identical layers: one session
    node_names = {n.name: b for n, b in zip(model.graph.node, before) if n.name != b}
    data = model.SerializeToString()
    # FP16 kernels: ORT_ENABLE_ALL (NCHWc); FP32 kernels: basic (the reference's summation order); graph-fused
    # kernels: none (onnxruntime's own norm fusions match across our FP16 Casts and break typing)
    level = False if spec.fusion == "graph" else ("all" if spec.precision == "fp16" else "basic")
    digest = hashlib.sha256(data).hexdigest()
    try:
        sess = _cached_session(data, level, digest, source)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"kernel '{spec.name}' ({spec.op_type}, nodes {spec.nodes}) cannot be built "
                         f"by onnxruntime: {msg}; the op or its attributes are not supported") from None
    return ExecKernel(spec, feeds, fetches, session=sess, digest=digest, node_names=node_names)


def build_kernels(plan: Plan, graph_model: onnx.ModelProto, overflow_mode: str = "inf_nan",
                  source: SessionSource | None = None) -> list[ExecKernel]:
    """Executable kernels for every KernelSpec of ``plan`` (sessions cached by model digest): the numpy
    FP16-accumulation kernel where it applies, else the native-FP16 session, else the Cast-bounded session.

    ``source``: where sessions come from besides this process' own (:class:`SessionSource`; its recipes give a
    session kernel without building its ONNX model); its ``finish`` is called once every kernel is built, its
    ``close`` always."""

    mapped = has_mapped(graph_model)  # recipes hold no weight feeds: kernels reading mapped weights are built

    @functools.cache
    def prep():
        by_name = {n.name: n for n in graph_model.graph.node}
        consts = {i.name: array_of(i) for i in graph_model.graph.initializer}
        types = {v.name: v.type for v in list(graph_model.graph.input) + list(graph_model.graph.value_info)
                 + list(graph_model.graph.output)}
        cast_src = {k.outputs[0]: k.cast_of for k in plan.kernels if k.cast_of}  # Casts and copies: ONNX names
        opset = next((o.version for o in graph_model.opset_import if o.domain in ("", "ai.onnx")), 0)
        return (plan, graph_model, by_name, consts, types, cast_src, overflow_mode), opset

    def make(i, spec):
        got = source.from_recipe(i, spec, _SESSIONS) if source is not None and not mapped else None
        if got is not None:
            sess, feeds, fetches, native, digest = got
            return ExecKernel(spec, feeds, fetches, session=sess, digest="" if native else digest, native_fp16=native)
        args, opset = prep()
        return (_copy_exec(spec, plan) or _numpy_exec(spec, args[2], args[3], opset, overflow_mode)
                or _native_exec(spec, *args, source=source) or _session_exec(spec, *args, source=source))

    try:
        kernels = [make(i, spec) for i, spec in enumerate(plan.kernels)]
        if source is not None:
            source.finish(kernels)
    finally:
        if source is not None:
            source.close()
    return kernels
