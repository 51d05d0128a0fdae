"""Model loading (toolkit/ir/load.py): external data outside the model folder, checker messages, declared
extents, and the sha256 of the bytes parsed."""

from __future__ import annotations

import builtins
import hashlib
import io
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.faultkinds import builders as fk
from toolkit.core.errors import ModelError
from toolkit.ir import load as ld
from toolkit.samples import SAMPLES


@pytest.fixture()
def ws(tmp_path):
    """A working folder with a valid model (softplus) and a valid feed."""
    b = fk.softplus(width=16, xmax=5.0)
    b.save(tmp_path, "model")
    return tmp_path


# ------------------------------------------------------------------ external data
def _external_model(folder: Path, location: str, name: str = "ext.onnx") -> Path:
    """The softplus model with its constant 'one' stored as external data at ``location``."""
    m = fk.softplus(width=16, xmax=5.0).model
    t = numpy_helper.from_array(np.ones((), np.float32), "one")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    del m.graph.initializer[:]
    m.graph.initializer.append(t)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(m.SerializeToString())
    return path


@pytest.fixture()
def ext_ws(ws):
    """ws/model/ holds the models; ws/outside.bin is a real (readable) data file outside that folder."""
    (ws / "outside.bin").write_bytes(np.ones((), np.float32).tobytes())
    (ws / "model").mkdir()
    return ws


def _spy_reads(monkeypatch, target: Path) -> list:
    """Record every attempt to open ``target``: Python opens, os.open and onnx's external-data reader (which
    opens files in C++)."""
    import onnx.external_data_helper as edh

    target = target.resolve()
    opened: list = []

    def hits(base, loc=None) -> bool:
        try:
            p = Path(os.fsdecode(base)) if loc is None else Path(os.fsdecode(base)) / os.fsdecode(loc)
            return p.resolve() == target
        except (TypeError, ValueError, OSError):
            return False

    def wrap_path(real):
        def wrapper(file, *a, **kw):
            if hits(file):
                opened.append(("open", file))
            return real(file, *a, **kw)
        return wrapper

    real_fd = edh._open_external_data_fd

    def open_fd(base_dir, location, tensor_name, read_only):
        if hits(base_dir, location):
            opened.append(("onnx", location))
        return real_fd(base_dir, location, tensor_name, read_only)

    monkeypatch.setattr(builtins, "open", wrap_path(builtins.open))
    monkeypatch.setattr(io, "open", wrap_path(io.open))
    monkeypatch.setattr(os, "open", wrap_path(os.open))
    monkeypatch.setattr(edh, "_open_external_data_fd", open_fd)
    return opened


def test_read_spy_sees_an_inside_read(ext_ws, monkeypatch):
    """The spy below is not vacuous: it records the read of an accepted (inside) data file."""
    from toolkit.ir.load import load_model

    inside = ext_ws / "model" / "inside.bin"
    inside.write_bytes(np.ones((), np.float32).tobytes())
    path = _external_model(ext_ws / "model", "inside.bin")
    opened = _spy_reads(monkeypatch, inside)
    load_model(path)
    assert opened


@pytest.mark.parametrize("loc_kind", ["dotdot", "absolute", "symlink"])
def test_external_data_outside_is_refused_before_reading(ext_ws, monkeypatch, loc_kind):
    """In process: the loader refuses the path without opening the outside file."""
    from toolkit.core.errors import ModelError
    from toolkit.ir.load import load_model

    outside = (ext_ws / "outside.bin").resolve()
    if loc_kind == "symlink":
        (ext_ws / "model" / "link.bin").symlink_to(outside)
    loc = {"dotdot": "../outside.bin", "absolute": str(outside), "symlink": "link.bin"}[loc_kind]
    path = _external_model(ext_ws / "model", loc)
    opened = _spy_reads(monkeypatch, outside)
    with pytest.raises(ModelError, match="'one'"):
        load_model(path)
    assert not opened, f"the outside file was opened: {opened}"


@pytest.mark.parametrize("loc, said", [(".", "is a folder, not a data file"), ("sub", "is a folder, not a data file"),
                                        ("sub/", "is a folder, not a data file"), ("fifo", "not a regular file"),
                                        ("gone.bin", "is missing; copy it next to the model")])
def test_external_data_location_that_is_no_data_file_says_what_it_is(ext_ws, loc, said):
    """A location naming the model's own folder ('.'), a subfolder or a FIFO is not "missing": the message says
    what it is; only an absent file is missing. One line, naming the tensor."""
    from toolkit.core.errors import ModelError
    from toolkit.ir.load import load_model

    (ext_ws / "model" / "sub").mkdir()
    os.mkfifo(ext_ws / "model" / "fifo")
    path = _external_model(ext_ws / "model", loc)
    with pytest.raises(ModelError) as info:
        load_model(path)
    msg = str(info.value)
    assert said in msg and "'one'" in msg and f"'{loc}'" in msg and "\n" not in msg


@pytest.mark.parametrize("rows", [4, 512])  # a weight read in (16 kB), one left on disk, memory-mapped (2 MiB)
def test_a_hugging_face_cache_layout_loads_and_runs_as_onnxruntime_runs_it(tmp_path, rows):
    """snapshots/<rev>/model.onnx and model.onnx_data are symbolic links into blobs/ (the Hugging Face hub cache):
    the data lies next to the model's real file, which onnxruntime accepts. It loads, and the simulated FP32 run
    equals onnxruntime's; a link from the model's folder to a file outside both folders is still refused."""
    import onnxruntime as ort

    from toolkit.config.schema import Config
    from toolkit.engine import Session
    from toolkit.ir.load import load_model

    w = np.random.default_rng(0).standard_normal((rows, 1024)).astype(np.float32)
    t = numpy_helper.from_array(w, "W")
    raw = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "model.onnx_data"), ("offset", "0"), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, rows])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1024])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    blobs, snap = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "rev1"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    onnx.save(m, blobs / "aaa111")
    (blobs / "bbb222").write_bytes(raw)
    (snap / "model.onnx").symlink_to("../../blobs/aaa111")
    (snap / "model.onnx_data").symlink_to("../../blobs/bbb222")
    x = np.random.default_rng(1).standard_normal((2, rows)).astype(np.float32)
    want = ort.InferenceSession(str(snap / "model.onnx")).run(None, {"x": x})[0]
    loaded = load_model(snap / "model.onnx")
    got = Session(loaded, Config(precision_mode="force_fp32", op_compiler_cache_mode="disable")).runtime.run(
        {"x": x}).outputs["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # FP32, another summation order
    np.testing.assert_allclose(want, x @ w, rtol=1e-4, atol=1e-4)
    (tmp_path / "elsewhere.bin").write_bytes(raw)
    (snap / "model.onnx_data").unlink()
    (snap / "model.onnx_data").symlink_to(tmp_path / "elsewhere.bin")
    with pytest.raises(ModelError, match="a symbolic link to"):
        load_model(snap / "model.onnx")


@pytest.mark.parametrize("length", [1, 2, 4])
def test_a_cycle_is_refused_naming_its_nodes(tmp_path, length):
    """n0 reads the output of the last node of a chain of ``length`` nodes that starts from n0's output (a node
    reading its own output when ``length`` is 1), beside a node that is not on the cycle: the nodes on the cycle
    are named with their op types, in one line."""
    from toolkit.ir.load import load_model

    nodes = [helper.make_node("Add", ["a", f"t{length - 1}"], ["t0"], name="n0_add")]
    nodes += [helper.make_node("Relu", [f"t{i - 1}"], [f"t{i}"], name=f"n{i}_relu") for i in range(1, length)]
    nodes.append(helper.make_node("Neg", ["a"], ["side"], name="off_cycle"))
    graph = helper.make_graph(nodes, "cycle", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("side", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "cycle.onnx")
    with pytest.raises(ModelError) as info:
        load_model(tmp_path / "cycle.onnx")
    msg = str(info.value)
    assert "form a cycle" in msg and "'n0_add' (Add)" in msg and "off_cycle" not in msg and "\n" not in msg
    assert all(f"'n{i}_relu' (Relu)" in msg for i in range(1, length))


@pytest.mark.parametrize("order", [[1, 0, 2], [2, 1, 0], [2, 0, 1], [1, 2, 0]])
@pytest.mark.parametrize("nested", [False, True])
def test_nodes_out_of_order_are_sorted_as_onnxruntime_runs_them(tmp_path, order, nested):
    """A chain Relu -> Sigmoid -> Neg listed in ``order`` (``nested``: the last step is an If whose branch reads
    the outer value, so the If depends on its producer through the subgraph): loaded in topological order, with a
    note, and it runs to onnxruntime's values; the caller's file and a ModelProto passed in are left as they were."""
    from toolkit.engine import Session, shapes_of
    from toolkit.ir.load import check_model_proto, load_model
    from toolkit.config.schema import Config

    x = helper.make_tensor_value_info
    chain = [helper.make_node("Relu", ["a"], ["b"], name="relu"), helper.make_node("Sigmoid", ["b"], ["c"], name="sig")]
    if nested:
        branch = lambda n: helper.make_graph([helper.make_node("Neg", ["c"], [n], name=f"neg_{n}")], n, [],  # noqa: E731
                                             [x(n, TensorProto.FLOAT, [2])])
        chain.append(helper.make_node("If", ["flag"], ["y"], name="iff", then_branch=branch("t"),
                                      else_branch=branch("e")))
        inits = [numpy_helper.from_array(np.array(True), "flag")]
    else:
        chain.append(helper.make_node("Neg", ["c"], ["y"], name="neg"))
        inits = []
    graph = helper.make_graph([chain[i] for i in order], "unsorted", [x("a", TensorProto.FLOAT, [2])],
                              [x("y", TensorProto.FLOAT, [2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "unsorted.onnx"
    onnx.save(model, path)
    before = path.read_bytes()
    loaded = load_model(path)
    assert [n.name for n in loaded.graph.node] == [n.name for n in chain]
    assert path.read_bytes() == before
    feed = {"a": np.array([-1.0, 2.0], np.float32)}
    ref = -1.0 / (1.0 + np.exp(-np.maximum(feed["a"], 0)))  # numpy
    got = Session(loaded, Config(), input_shapes=shapes_of(feed)).run(feed).outputs["y"]
    np.testing.assert_allclose(got, ref, rtol=2e-3)
    kept = onnx.ModelProto()
    kept.CopyFrom(model)
    assert [n.name for n in check_model_proto(model).graph.node] == [n.name for n in chain]
    assert model == kept  # the caller's proto is not sorted in place


@pytest.mark.parametrize("dims", [[-1, 4], [4, -4], [-2, -8], [0, -1], [-16]])
@pytest.mark.parametrize("extent", [(None, None), (0, 64), (0, None)])
def test_external_data_with_negative_dims_is_refused_before_any_read(tmp_path, dims, extent):
    """An external initializer with a negative dim (also where the product is positive, and with or without a
    declared length): one-line ModelError naming the tensor and its dims, as for an embedded one."""
    from toolkit.ir.load import load_model

    (tmp_path / "w.bin").write_bytes(np.ones(16, np.float32).tobytes())
    init = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=dims, data_location=TensorProto.EXTERNAL)
    for key, val in (("location", "w.bin"), ("offset", extent[0]), ("length", extent[1])):
        if val is not None:
            init.external_data.add(key=key, value=str(val))
    graph = helper.make_graph([helper.make_node("Add", ["x", "W"], ["y"], name="add")], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelError) as info:
        load_model(tmp_path / "m.onnx")
    assert "'W'" in str(info.value) and f"negative dims {dims}" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("offset, length, expected", [
    (10**15, None, "declares offset 1000000000000000, beyond the end of the data file (64 bytes)"),
    (0, 10**15, "declares 1000000000000000 bytes at offset 0, ending at byte 1000000000000000, beyond the end of "
                "the data file (64 bytes)"),
    (8, None, "the 56 bytes from there to the end of the file (64 bytes) are fewer than the 64 bytes"),
    (0, 32, "declares length 32 bytes, fewer than the 64 bytes the tensor needs"),
])
def test_external_data_extent_is_reported_as_declared(tmp_path, offset, length, expected):
    from toolkit.ir.load import load_model

    w = np.ones((4, 4), np.float32)  # 64 bytes
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    init = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 4],
                            data_location=TensorProto.EXTERNAL)
    for key, val in (("location", "w.bin"), ("offset", offset), ("length", length)):
        if val is not None:
            init.external_data.add(key=key, value=str(val))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelError) as info:
        load_model(tmp_path / "m.onnx")
    assert expected in str(info.value) and "-99" not in str(info.value)


def test_loaded_sha256_names_the_bytes_parsed_even_after_the_file_changes(tmp_path):
    a, b = SAMPLES["resnet_small"].path, SAMPLES["transformer_block"].path
    live = tmp_path / "live.onnx"
    shutil.copyfile(a, live)
    model = ld.load_model(live)
    want = hashlib.sha256(a.read_bytes()).hexdigest()
    shutil.copyfile(b, live)  # replaced after loading
    os.utime(live, ns=(1, 1))
    assert ld.loaded_sha256(live) == want
    assert ld.file_sha256(live) == hashlib.sha256(b.read_bytes()).hexdigest()  # the file as it is now
    assert model.graph.name == onnx.load(a).graph.name
    assert ld.loaded_sha256(tmp_path / "never-loaded.onnx") is None


@pytest.mark.parametrize("edit", ["none", "ir_version_3", "duplicate_opset", "bad_doc_string", "sparse"])
def test_the_checker_sees_the_model_as_loaded(tmp_path, monkeypatch, edit):
    """The ONNX checker is given the bytes read when the loaded proto still equals them, and the repaired proto
    when a load step changed it (an old IR version, a duplicate opset entry, a doc_string repaired, a sparse
    initializer made dense); either way a valid model loads."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(np.ones((2, 3), np.float32), "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    if edit == "ir_version_3":
        model.ir_version = 3
    elif edit == "duplicate_opset":
        model.opset_import.append(helper.make_opsetid("", 13))
    elif edit == "sparse":
        del model.graph.initializer[:]
        values = numpy_helper.from_array(np.ones(1, np.float32), "b")
        sp = helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([4], np.int64)), [2, 3])
        model.graph.sparse_initializer.append(sp)
    data = model.SerializeToString()
    if edit == "bad_doc_string":  # invalid UTF-8 in the graph's doc_string, written into the bytes by hand
        model.graph.doc_string = "DOCMARK"
        data = model.SerializeToString().replace(b"DOCMARK", b"DOC\xffARK")
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    seen = []
    real = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda m, *a, **k: seen.append(m) or real(m, *a, **k))
    loaded = ld.load_model(path)
    assert len(seen) == 1
    if edit == "none":
        assert seen[0] == data
    else:
        assert isinstance(seen[0], onnx.ModelProto) and seen[0] is loaded
    assert [n.op_type for n in loaded.graph.node] == ["Add"]


@pytest.mark.parametrize("where", [0, 1])
def test_an_input_nothing_provides_is_named_as_missing(tmp_path, where):
    """A node reading a tensor that no node, graph input or initializer provides: the error names the node and
    the tensor as missing (the checker calls it an ordering problem); a graph merely out of order is sorted and
    loads (test_nodes_out_of_order_are_sorted_as_onnxruntime_runs_them)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "Wmissing"], ["y"], name="add")]
    if where == 0:
        nodes = [helper.make_node("Add", ["x", "Wmissing"], ["r"], name="add"), helper.make_node("Relu", ["r"], ["y"], name="relu")]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match="node 'add' \\(Add\\) reads 'Wmissing', which no node, graph input or initializer"):
        ld.load_model(tmp_path / "m.onnx")
    unordered = [helper.make_node("Relu", ["r"], ["y"], name="relu2"), helper.make_node("Relu", ["x"], ["r"], name="relu1")]
    m2 = helper.make_model(helper.make_graph(unordered, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    m2.ir_version = 8
    onnx.save(m2, str(tmp_path / "u.onnx"))
    assert [n.name for n in ld.load_model(tmp_path / "u.onnx").graph.node] == ["relu1", "relu2"]


@pytest.mark.parametrize("names", [
    ["a", "a__2", "a__3", "b", "b__x", "a__2__2", "c__", "__4", "d__10"],
    ["dense", "dense__2", "dense"],  # a real 'dense__2' is not a twin, and the repeat does not take its name
    ["", "Relu_1", "", "x", "x", "x__2"],  # an unnamed node's made name never takes a real one
    ["x"],
    [f"n{i % 5}" + (f"__{i}" if i % 3 else "") for i in range(40)],
    [("" if i % 4 == 0 else f"m{i % 3}") for i in range(30)],
])
def test_loader_names_are_unique_never_a_file_name_and_map_back_to_the_file(names):
    """normalise_node_names: every node ends with a unique name; a name it makes is never one the file gives
    another node; twins_index / file_names_of / renamed_twins map exactly the renamed repeats back to the
    file's name (computed here from the list), unnamed nodes map to "" in loader_names, and nothing when the
    file's names are unique."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=n) for i, n in enumerate(names)]
    model = helper.make_model(helper.make_graph(nodes, "g", [], []))
    renamed = ld.normalise_node_names(model)
    got = [n.name for n in model.graph.node]
    assert len(set(got)) == len(got) and all(got)
    first = {n: names.index(n) for n in names if n}
    for i, (old, new) in enumerate(zip(names, got)):
        if old and first[old] == i:
            assert new == old  # the first node of a name keeps it
        else:
            assert new not in set(names)  # a made name never takes one the file gives
    expected_back = {new: old for i, (old, new) in enumerate(zip(names, got)) if old and first[old] != i}
    assert ld.file_names_of(model) == expected_back
    assert ld.loader_names(model) == {new: old for new, old in zip(got, names) if new != old}
    assert renamed == len(ld.loader_names(model))
    index = ld.twins_index(model, got)
    for name in set(names) | {"a", "b", "c", "n1"}:
        assert index.get(name, []) == ld.renamed_twins(model, got, name)
        assert sorted(index.get(name, [])) == sorted(k for k, v in expected_back.items() if v == name)
    assert ld.normalise_node_names(model) == 0 and ld.loader_names(model) == {new: old for new, old in zip(got, names)
                                                                             if new != old}  # idempotent


@pytest.mark.parametrize("op,unknown", [("Relu", "output"), ("Sigmoid", "output"), ("Relu", "input"),
                                        ("Relu", "both")])
def test_main_graph_io_of_unknown_rank_loads_and_runs_as_onnxruntime_runs_it(tmp_path, op, unknown):
    """A main-graph input or output declared without a shape (unknown rank: the ONNX checker wants the field,
    onnxruntime runs the model): it loads with its rank still unknown, and runs to onnxruntime's values."""
    from toolkit.config.schema import Config
    from toolkit.engine import Session, shapes_of
    from toolkit.ir.load import load_model

    shaped = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])  # noqa: E731
    bare = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)  # noqa: E731
    x = bare("x") if unknown in ("input", "both") else shaped("x")
    y = bare("y") if unknown in ("output", "both") else shaped("y")
    model = helper.make_model(helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n")], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    loaded = load_model(tmp_path / "m.onnx")
    assert loaded.graph.output[0].type.tensor_type.HasField("shape") == (unknown == "input")  # rank left unknown
    feed = {"x": np.array([[-1.0, 0.5, 2.0], [3.0, -4.0, 0.0]], np.float32)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = Session(loaded, Config(), input_shapes=shapes_of(feed)).run(feed).outputs["y"]
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-3)


def test_an_unsorted_subgraph_is_refused_as_onnxruntime_refuses_it(tmp_path):
    """The main graph lists the If before its producer (sorted, as onnxruntime sorts it), and the If's branch lists
    a node before its producer, which onnxruntime refuses (checked here): refused in one line naming the node."""
    from toolkit.ir.load import load_model

    vi = lambda n, s=(2,): helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))  # noqa: E731
    then = helper.make_graph([helper.make_node("Neg", ["t1"], ["t"], name="then_neg"),
                              helper.make_node("Relu", ["b"], ["t1"], name="then_relu")], "then", [], [vi("t")])
    other = helper.make_graph([helper.make_node("Identity", ["b"], ["e"], name="else_id")], "else", [], [vi("e")])
    nodes = [helper.make_node("If", ["flag"], ["y"], name="iff", then_branch=then, else_branch=other),
             helper.make_node("Relu", ["a"], ["b"], name="relu")]
    g = helper.make_graph(nodes, "g", [vi("a")], [vi("y")], [numpy_helper.from_array(np.array(True), "flag")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(Exception, match="topologically sorted"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ModelError) as info:
        load_model(tmp_path / "m.onnx")
    assert "then_neg" in str(info.value) and "\n" not in str(info.value)
