"""Tiny ONNX graph builders shared by the tests (not a test module)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, inits=(), opset=17, name="test"):
    """inputs: [(name, shape[, elem type])] (float32 by default); outputs: [name or (name, elem type)];
    inits: {name: array}. Output shapes are left to inference."""
    ins = [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else TensorProto.FLOAT, i[1]) for i in inputs]
    outs = [helper.make_tensor_value_info(*((o, TensorProto.FLOAT) if isinstance(o, str) else o), None)
            for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()]
    return helper.make_model(helper.make_graph(nodes, name, ins, outs, init),
                             opset_imports=[helper.make_opsetid("", opset)])


def N(op, ins, outs, name, **attrs):
    """A node with an explicit name."""
    return helper.make_node(op, ins, outs, name=name, **attrs)


def affine_and(op: str = "Exp", name: str = "m1"):
    """The testers' m1 family: x float32[4, 8] -> y = 3x + 1 (Mul 'mul', Add 'add'), z = op(x) (node named
    ``op.lower()``); two float outputs, opset 17, IR version 8."""
    nodes = [N("Mul", ["x", "three"], ["t"], "mul"), N("Add", ["t", "one"], ["y"], "add"),
             N(op, ["x"], ["z"], op.lower())]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8])],
                          [numpy_helper.from_array(np.array(3.0, np.float32), "three"),
                           numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def conv_relu(batch=1):
    """x float32[batch, 3, 8, 8] -> Conv (4 filters 3x3, pad 1, seeded weights) 'conv' -> Relu 'relu' -> y
    float32[batch, 4, 8, 8]; ``batch`` an int or a symbolic dim name ("N"). Opset 17, IR version 8."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    g = helper.make_graph([N("Conv", ["x", "W", "B"], ["c"], "conv", pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"], "relu")],
                          "cr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def mlp_model(folder, rng, widths=(64, 1024, 512, 256), one_file=False, seq=16, vocab=600):
    """An embedding + MatMul/Relu chain saved with every tensor as external data (one file per tensor unless
    ``one_file``); returns (path, {initializer: array})."""
    inits = {"E": rng.standard_normal((vocab, widths[0])).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["E", "ids"], ["x0"], name="gather")]
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        inits[f"W{i}"] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", [f"x{i}", f"W{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"x{i + 1}"], name=f"relu{i}"))
    last = f"x{len(widths) - 1}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])],
                          [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, seq, widths[-1]])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file,
              location="model.data" if one_file else None, size_threshold=0)
    return path, inits


LAYERS = 4


def layered_model(layers: int = LAYERS, style: str = "/layers.{i}/"):
    """x -> per layer: MatMul, Add, Relu (named ``{style}MatMul`` ...) -> a final Identity ``out``."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        p = style.format(i=i)
        inits += [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"{p}MatMul"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"{p}Add"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"{p}Relu")]
        x = f"r{i}"
    nodes.append(helper.make_node("Identity", [x], ["out"], name="final"))
    g = helper.make_graph(nodes, "layered", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def residual_model(folder, rng, layers: int = 6, width: int = 64, seq: int = 32, dynamic: bool = False,
                   blowup_layer: int | None = None):
    """A residual MLP stack saved with every initializer as its own external data file: per layer ``i``
    (nodes ``/layers.{i}/...``) h = Relu(x·W + b), y = LayerNormalization(x + h·V) (a skip connection, so two
    tensors cross most cuts), with a shape computation feeding a Reshape on the way (integer tensors). With
    ``blowup_layer`` that layer scales h by 4e4 before V (its FP16 values overflow; the LayerNormalization brings
    the FP32 result back). ``dynamic``: the sequence axis is the symbol ``seq``. Input ``x`` (1, seq, width)
    float32; output ``out``. Returns (path, {initializer: array})."""
    inits = {"shape": np.array([1, -1, width], np.int64)}
    nodes = []
    x = "x"
    for i in range(layers):
        p = f"/layers.{i}/"
        inits[f"W{i}"] = (rng.standard_normal((width, 2 * width)) / np.sqrt(width)).astype(np.float32)
        inits[f"b{i}"] = (0.1 * rng.standard_normal(2 * width)).astype(np.float32)
        inits[f"V{i}"] = (rng.standard_normal((2 * width, width)) / np.sqrt(2 * width)).astype(np.float32)
        inits[f"g{i}"] = (1 + 0.1 * rng.standard_normal(width)).astype(np.float32)
        inits[f"beta{i}"] = (0.1 * rng.standard_normal(width)).astype(np.float32)
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"mm{i}"], name=f"{p}MatMul"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"{p}Add"),
                  helper.make_node("Relu", [f"add{i}"], [f"h{i}"], name=f"{p}Relu")]
        h = f"h{i}"
        if i == blowup_layer:
            inits[f"big{i}"] = np.array(4e4, np.float32)
            nodes.append(helper.make_node("Mul", [h, f"big{i}"], [f"hb{i}"], name=f"{p}Scale"))
            h = f"hb{i}"
        nodes += [helper.make_node("MatMul", [h, f"V{i}"], [f"v{i}"], name=f"{p}MatMul_1"),
                  helper.make_node("Add", [x, f"v{i}"], [f"res{i}"], name=f"{p}Residual"),
                  helper.make_node("Shape", [f"res{i}"], [f"sh{i}"], name=f"{p}Shape"),
                  helper.make_node("Reshape", [f"res{i}", "shape"], [f"rs{i}"], name=f"{p}Reshape"),
                  helper.make_node("LayerNormalization", [f"rs{i}", f"g{i}", f"beta{i}"], [f"y{i}"],
                                   name=f"{p}LayerNorm", axis=-1, epsilon=1e-5)]
        x = f"y{i}"
    nodes.append(helper.make_node("Identity", [x], ["out"], name="final"))
    dim = "seq" if dynamic else seq
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim, width])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, dim, width])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
    return path, inits


def nested_control_flow(depth: int, kind: str = "If") -> onnx.ModelProto:
    """x[2, 4] → ``depth`` levels of control flow nested in each other's body (kind "If": then-branches, the
    condition sum(x) > -1e9, computed from the input so no compiler folds it; "Loop": a body run twice that holds the next level) → y = x * 2 + 1 at the innermost
    level, through named nodes 'inner_mul' and 'inner_add'. Level i's node is 'cf_{i}' (cf_{depth-1} is the
    top-level node); returns the model (onnx.checker full_check passes)."""
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4])
    body_nodes = [helper.make_node("Mul", ["x", "two"], ["m"], name="inner_mul"),
                  helper.make_node("Add", ["m", "one"], ["t"], name="inner_add")]
    out = "t"
    for level in range(depth):
        name, res = f"cf_{level}", f"o{level}"
        if kind == "If":
            then = helper.make_graph(body_nodes, f"then_{level}", [], [vi(out)])
            other = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{level}"], name=f"else_id_{level}")],
                                      f"else_{level}", [], [vi(f"e{level}")])
            node = helper.make_node("If", ["c"], [res], name=name, then_branch=then, else_branch=other)
        else:
            body = helper.make_graph(
                body_nodes + [helper.make_node("Identity", ["cond_in"], [f"cond_out{level}"], name=f"cond_{level}"),
                              helper.make_node("Identity", [out], [f"v{level}"], name=f"carry_{level}")],
                f"body_{level}",
                [helper.make_tensor_value_info(f"i{level}", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), vi(f"acc{level}")],
                [helper.make_tensor_value_info(f"cond_out{level}", TensorProto.BOOL, []), vi(f"v{level}")])
            node = helper.make_node("Loop", ["trips", "", "x"], [res], name=name, body=body)
        body_nodes, out = [node], res
    cond = [helper.make_node("ReduceSum", ["x"], ["s"], name="cond_sum", keepdims=0),
            helper.make_node("Greater", ["s", "lo"], ["c"], name="cond_gt")] if kind == "If" else []
    nodes = [*cond, *body_nodes, helper.make_node("Relu", [out], ["y"], name="relu")]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    inits.append(helper.make_tensor("lo", TensorProto.FLOAT, [], [-1e9]) if kind == "If" else
                 helper.make_tensor("trips", TensorProto.INT64, [], [2]))
    g = helper.make_graph(nodes, "nested", [vi("x")], [vi("y")], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m
