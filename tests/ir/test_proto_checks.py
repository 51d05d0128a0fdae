"""The model-loading boundary (toolkit.ir.load, toolkit.ir.proto_checks) through the CLI.

Each malformed kind is built with onnx.helper and run through ``npuscope compile`` (some also ``diagnose``):
exit 1 and one ``npuscope: error:`` line naming the field, no traceback. Each kind onnxruntime accepts
(sparse initializers, duplicate opset entries, ir_version 0 and 3, value_info without a type, external data
without a length in a longer file, a non-UTF-8 doc_string) is checked to load in onnxruntime here, and
``npuscope run`` must succeed with the outputs onnxruntime computes.

The commands run in process (toolkit.cli._main, the CLI's own error boundary), all of them in one child
process: the CLI switches onnxruntime to one global thread pool, after which sessions other tests make in
the pytest process would be refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.ir.load import load_model
from toolkit.ir.proto_checks import NOTES_KEY

X = np.array([[0.5, -1.0, 2.0, 3.5]], np.float32)
W = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)


RUNNER = """
import contextlib, io, json, sys
from toolkit.cli import _main

results = {}
for case, argv in json.loads(open(sys.argv[1]).read()).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            _main(["-q", *argv])
            code = 0
        except SystemExit as exc:
            code = exc.code
    results[case] = [code, err.getvalue()]
print(json.dumps(results))
"""


def run_commands(commands: dict[str, list], folder: Path) -> dict[str, tuple[int, str]]:
    """{case: (exit code, stderr)} of ``npuscope -q ARGV`` for each case, run in process in one child."""
    spec = folder / "commands.json"
    spec.write_text(json.dumps({k: [str(a) for a in v] for k, v in commands.items()}))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(spec)], capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {k: (code, err) for k, (code, err) in json.loads(proc.stdout.splitlines()[-1]).items()}


def assert_one_line_error(code: int, err: str, *mentions: str) -> str:
    assert code == 2, (code, err)  # bad input (toolkit.core.errors.EXIT_USAGE)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("npuscope: error: "), err
    for m in mentions:
        assert m in lines[0], (m, lines[0])
    return lines[0]


def model(nodes=None, inits=(), inputs=None, ir=8, opsets=(("", 17),), value_info=()) -> onnx.ModelProto:
    """y = x + w (x, y float32[1, 4]) unless told otherwise."""
    nodes = nodes or [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = ir
    return m


def w_init() -> TensorProto:
    return numpy_helper.from_array(W, "w")


def save(m: onnx.ModelProto, folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    path.write_bytes(m.SerializeToString())
    return path


def external(folder: Path, data: bytes = W.tobytes(), **fields) -> onnx.ModelProto:
    """The y = x + w model with w as external data in w.bin (``fields`` override location/offset/length)."""
    (folder / "w.bin").write_bytes(data)
    m = model(inits=[w_init()])
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", "offset": "0", "length": str(len(W.tobytes())), **fields}.items():
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, value
    return m


def not_utf8(m: onnx.ModelProto, marker: str) -> bytes:
    """The serialised model with the first two bytes of ``marker`` (a string set in some field) replaced by
    0xFF 0xFE, which no UTF-8 text holds (same length: the protobuf framing stays valid)."""
    data = m.SerializeToString()
    assert data.count(marker.encode()) == 1
    return data.replace(marker.encode(), b"\xff\xfe" + marker.encode()[2:])


# ----------------------------------------------------------------------------------- malformed: refused
def _raw(n_bytes: int) -> TensorProto:
    t = w_init()
    t.raw_data = (W.tobytes() + bytes(64))[:n_bytes]
    return t


def _typed(values) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type = "w", TensorProto.FLOAT
    t.dims.extend([1, 4])
    t.float_data.extend(values)
    return t


def _constant_with(tensor: TensorProto) -> onnx.ModelProto:
    return model(nodes=[helper.make_node("Constant", [], ["w"], name="const", value=tensor),
                        helper.make_node("Add", ["x", "w"], ["y"], name="add")])


def _sparse(indices, dims=(1, 4)) -> onnx.SparseTensorProto:
    values = numpy_helper.from_array(np.array([7.0, 9.0], np.float32), "w")
    return helper.make_sparse_tensor(values, numpy_helper.from_array(np.array(indices, np.int64), "w_idx"), list(dims))


def _with_sparse(sp) -> onnx.ModelProto:
    m = model()
    m.graph.sparse_initializer.append(sp)
    return m


REFUSED = {
    # kind: (build(folder) -> model or bytes, words the error line names)
    "external offset not an integer": (lambda f: external(f, offset="abc"), ["tensor 'w'", "offset 'abc'"]),
    "external length not an integer": (lambda f: external(f, length="1.5"), ["tensor 'w'", "length '1.5'"]),
    "external location with NUL": (lambda f: external(f, location="w\x00.bin"), ["tensor 'w'", "NUL byte"]),
    "external length over the dims": (lambda f: external(f, data=bytes(24), length="24"),
                                      ["tensor 'w'", "length 24 bytes, more than the 16"]),
    "external tensor data_type 0": (lambda f: _set(external(f), "dtype0"), ["initializer 'w'", "data_type 0"]),
    "initializer data_type 99": (lambda f: _set(model(inits=[w_init()]), "dtype99"), ["initializer 'w'", "data_type 99"]),
    "Cast to=0": (lambda f: model(nodes=[helper.make_node("Cast", ["x"], ["c"], name="cast", to=0),
                                         helper.make_node("Identity", ["c"], ["y"], name="id")]),
                  ["node 'cast' (Cast)", "attribute 'to' is 0"]),
    "Cast to=77": (lambda f: model(nodes=[helper.make_node("Cast", ["x"], ["y"], name="cast", to=77)]),
                   ["node 'cast' (Cast)", "attribute 'to' is 77"]),
    "input elem_type -1": (lambda f: model(nodes=[helper.make_node("Identity", ["x"], ["y"], name="id")],
                                           inputs=[helper.make_tensor_value_info("x", -1, [1, 4])]),
                           ["input 'x'", "elem_type -1"]),
    "raw_data longer than dims": (lambda f: model(inits=[_raw(24)]), ["initializer 'w'", "24 bytes of raw_data", "need 16"]),
    "raw_data shorter than dims": (lambda f: model(inits=[_raw(8)]), ["initializer 'w'", "8 bytes of raw_data", "need 16"]),
    "float_data count over dims": (lambda f: model(inits=[_typed([1, 2, 3, 4, 5, 6])]),
                                   ["initializer 'w'", "6 values in float_data", "need 4"]),
    "no data at all": (lambda f: model(inits=[_typed([])]), ["initializer 'w'", "0 values in float_data"]),
    "Constant value with short raw_data": (lambda f: _constant_with(_raw(12)),
                                           ["attribute 'value' of node 'const' (Constant)", "12 bytes of raw_data"]),
    "sparse indices outside dims": (lambda f: _with_sparse(_sparse([1, 4])), ["sparse initializer 'w'", "indices"]),
    "node name not UTF-8": (lambda f: not_utf8(_named(model(inits=[w_init()]), "node", "ZZaddZZ"), "ZZaddZZ"),
                            ["graph.node[0].name", "not UTF-8"]),
    "op_type not UTF-8": (lambda f: not_utf8(_named(model(inits=[w_init()]), "op_type", "ZZAddZZ"), "ZZAddZZ"),
                          ["graph.node[0].op_type", "not UTF-8"]),
    "producer not UTF-8": (lambda f: not_utf8(_named(model(inits=[w_init()]), "producer", "ZZprodZZ"), "ZZprodZZ"),
                           ["producer_name", "not UTF-8"]),
    "graph name not UTF-8": (lambda f: not_utf8(_named(model(inits=[w_init()]), "graph", "ZZgraphZZ"), "ZZgraphZZ"),
                             ["graph.name", "not UTF-8"]),
    "metadata value not UTF-8": (lambda f: not_utf8(_named(model(inits=[w_init()]), "meta", "ZZmetaZZ"), "ZZmetaZZ"),
                                 ["metadata_props[0].value", "not UTF-8"]),
    # a NUL character in a name (or any ONNX string), wherever it is: refused at load, never split downstream
    "graph input name with NUL": (lambda f: _renamed(model(inits=[w_init()]), "x", "a\x00b"),
                                  ["graph.input[0].name", "NUL character"]),
    "initializer name with NUL": (lambda f: _renamed(model(inits=[w_init()]), "w", "\x00w"),
                                  ["NUL character", "'\\x00w'"]),
    "node output name with NUL": (lambda f: _renamed(model(inits=[w_init()]), "y", "y\x00"),
                                  ["graph.output[0].name", "NUL character"]),
    "node name with NUL": (lambda f: _named(model(inits=[w_init()]), "node", "层\u202e\x00z"),
                           ["graph.node[0].name", "NUL character"]),
}


def _renamed(m: onnx.ModelProto, old: str, new: str) -> onnx.ModelProto:
    """Tensor ``old`` renamed ``new`` everywhere in the graph (inputs, outputs, initializers, node edges)."""
    for v in [*m.graph.input, *m.graph.output, *m.graph.initializer]:
        if v.name == old:
            v.name = new
    for n in m.graph.node:
        n.input[:] = [new if i == old else i for i in n.input]
        n.output[:] = [new if o == old else o for o in n.output]
    return m


def _set(m: onnx.ModelProto, what: str) -> onnx.ModelProto:
    m.graph.initializer[0].data_type = {"dtype0": 0, "dtype99": 99}[what]
    return m


def _named(m: onnx.ModelProto, field: str, value: str) -> onnx.ModelProto:
    if field == "node":
        m.graph.node[0].name = value
    elif field == "op_type":
        m.graph.node[0].op_type = value
    elif field == "producer":
        m.producer_name = value
    elif field == "graph":
        m.graph.name = value
    else:
        helper.set_model_props(m, {"note": value})
    return m


def _write(tmp_path: Path, built) -> Path:
    path = tmp_path / "m.onnx"
    path.write_bytes(built if isinstance(built, bytes) else built.SerializeToString())
    return path


DIAGNOSED = ["external offset not an integer", "input elem_type -1", "raw_data longer than dims", "node name not UTF-8",
             "Cast to=0", "sparse indices outside dims"]


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict:
    """{(command, kind): (exit code, stderr, output folder)} for every kind of REFUSED."""
    commands, outs = {}, {}
    for i, kind in enumerate(sorted(REFUSED)):
        folder = tmp_path_factory.mktemp(f"refused{i}")
        path = _write(folder, REFUSED[kind][0](folder))
        for command in ["compile"] + (["diagnose"] if kind in DIAGNOSED else []):
            outs[f"{command}|{kind}"] = folder / f"out-{command}"
            commands[f"{command}|{kind}"] = [command, path, "--out", outs[f"{command}|{kind}"]]
    results = run_commands(commands, tmp_path_factory.mktemp("refused-run"))
    return {tuple(k.split("|")): (*v, outs[k]) for k, v in results.items()}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_malformed_model_is_one_line_exit_1_in_compile(refused, kind):
    code, err, out = refused[("compile", kind)]
    assert_one_line_error(code, err, "m.onnx", *REFUSED[kind][1])
    assert not out.exists()


@pytest.mark.parametrize("kind", DIAGNOSED)
def test_malformed_model_is_one_line_exit_1_in_diagnose(refused, kind):
    code, err, out = refused[("diagnose", kind)]
    assert_one_line_error(code, err, "m.onnx", *REFUSED[kind][1])
    assert not out.exists() or not any(out.iterdir())


# ----------------------------------------------------------------------------------- accepted, as onnxruntime
def _value_info_without_type() -> onnx.ModelProto:
    vi = onnx.ValueInfoProto()
    vi.name = "t"
    return model(nodes=[helper.make_node("Relu", ["x"], ["t"], name="relu"),
                        helper.make_node("Add", ["t", "w"], ["y"], name="add")], inits=[w_init()], value_info=[vi])


def _ir3() -> onnx.ModelProto:
    m = model(inits=[w_init()], ir=3)
    m.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 4]))  # IR 3: initializers are inputs
    return m


ACCEPTED = {
    # kind: (build(folder) -> model or bytes, note expected in the loaded model's metadata or None)
    "sparse initializer": (lambda f: _with_sparse(_sparse([1, 3])), "made dense"),
    "sparse initializer with [NNZ, rank] indices": (lambda f: _with_sparse(_sparse([[0, 0], [0, 2]])), "made dense"),
    "duplicate opset_import": (lambda f: model(inits=[w_init()], opsets=(("", 13), ("", 17))), "the last, 17"),
    "ir_version 0": (lambda f: model(inits=[w_init()], ir=0), "ir_version 0 read as IR version"),
    "ir_version 3": (lambda f: _ir3(), "ir_version 3 read as IR version"),
    "value_info without a type": (lambda f: _value_info_without_type(), None),
    "external data without length, file longer": (lambda f: external(f, data=W.tobytes() + bytes(8), length=None), None),
    "doc_string not UTF-8": (lambda f: not_utf8(_doc(model(inits=[w_init()])), "ZZdocZZ"), "doc_string"),
}


def _doc(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.node[0].doc_string = "ZZdocZZ"
    return m


DIAGNOSED_OK = ["sparse initializer", "ir_version 3", "duplicate opset_import"]


@pytest.fixture(scope="module")
def accepted(tmp_path_factory) -> dict:
    """{(command, kind): (exit code, stderr, model path, output folder)} for every kind of ACCEPTED."""
    commands, info = {}, {}
    for i, kind in enumerate(sorted(ACCEPTED)):
        folder = tmp_path_factory.mktemp(f"accepted{i}")
        path = _write(folder, ACCEPTED[kind][0](folder))
        np.savez(folder / "x.npz", x=X)
        for command in ["run"] + (["diagnose"] if kind in DIAGNOSED_OK else []):
            key = f"{command}|{kind}"
            info[key] = (path, folder / f"out-{command}")
            extra = ["--inputs", folder / "x.npz"] if command == "run" else []
            commands[key] = [command, path, *extra, "--precision-mode", "force_fp32", "--out", info[key][1]]
    results = run_commands(commands, tmp_path_factory.mktemp("accepted-run"))
    return {tuple(k.split("|")): (*v, *info[k]) for k, v in results.items()}


@pytest.mark.parametrize("kind", sorted(ACCEPTED))
def test_model_onnxruntime_accepts_runs_with_its_outputs(accepted, kind):
    code, err, path, out = accepted[("run", kind)]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # onnxruntime accepts it
    want = session.run(None, {"x": X})[0]
    assert code == 0, err
    with np.load(out / "outputs.npz") as got:
        np.testing.assert_allclose(got["y"], want, rtol=1e-6)
    notes = {p.key: p.value for p in load_model(path).metadata_props}.get(NOTES_KEY)
    note = ACCEPTED[kind][1]
    if note is None:
        assert notes is None
    else:
        assert note in notes, notes


@pytest.mark.parametrize("kind", DIAGNOSED_OK)
def test_accepted_kind_diagnoses(accepted, kind):
    code, err, _, out = accepted[("diagnose", kind)]
    assert code == 0, err
    assert (out / "summary.json").is_file()


def test_sparse_initializer_becomes_the_dense_tensor():
    m = load_model_from(_with_sparse(_sparse([[0, 1], [0, 3]])))
    (w,) = [t for t in m.graph.initializer if t.name == "w"]
    np.testing.assert_array_equal(numpy_helper.to_array(w), [[0.0, 7.0, 0.0, 9.0]])
    assert not m.graph.sparse_initializer


def test_duplicate_opsets_keep_the_last_entry_once():
    m = load_model_from(model(inits=[w_init()], opsets=(("", 17), ("ai.onnx", 13), ("com.x", 1), ("com.x", 2))))
    assert sorted((o.domain, o.version) for o in m.opset_import) == [("ai.onnx", 13), ("com.x", 2)]


def load_model_from(m: onnx.ModelProto) -> onnx.ModelProto:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return load_model(save(m, Path(tmp)))


def test_python_api_checks_a_model_proto_and_leaves_it_as_it_was():
    """toolkit.engine.Session(ModelProto): the same field checks; a sparse initializer is made dense in a copy."""
    from toolkit.engine import Session
    from toolkit.core.errors import ModelError

    m = _with_sparse(_sparse([1, 3]))
    before = m.SerializeToString()
    y = Session(m).run({"x": X}).outputs["y"]
    np.testing.assert_allclose(y, X + np.array([[0.0, 7.0, 0.0, 9.0]], np.float32), rtol=1e-3)
    assert m.SerializeToString() == before and len(m.graph.sparse_initializer) == 1
    with pytest.raises(ModelError, match=r"initializer 'w' holds 24 bytes of raw_data but its dims \[1, 4\]"):
        Session(model(inits=[_raw(24)]))


def test_compile_model_of_an_in_memory_sparse_model():
    """toolkit.compiler.pipeline.compile_model(ModelProto) makes its copy's sparse initializers dense too
    (bind_shapes read a sparse initializer's name from .name, which SparseTensorProto does not have)."""
    from toolkit.engine import compile_model
    from toolkit.runtime.npu import NpuRuntime

    y = NpuRuntime(compile_model(_with_sparse(_sparse([0, 2])))).run({"x": X}).outputs["y"]
    np.testing.assert_allclose(y, X + np.array([[7.0, 0.0, 9.0, 0.0]], np.float32), rtol=1e-3)
