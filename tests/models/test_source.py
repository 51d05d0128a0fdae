"""Model sources (toolkit/source.py): path kinds, and a zoo model given by its file path (e.g. the cached
download) is recognised by its sha256 and keeps its zoo name."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from toolkit import samples, source, zoo
from toolkit.core.errors import ModelError, UserError


def save_model(path: Path, elem: int, op: str = "Neg", shape=(1, 8)) -> Path:
    """x -> op -> y with x, y of ONNX element type ``elem``."""
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n")], "g",
                          [helper.make_tensor_value_info("x", elem, list(shape))],
                          [helper.make_tensor_value_info("y", elem, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _model_path_cases(tmp_path: Path) -> list[tuple[str, str]]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "withmodels").mkdir()
    save_model(tmp_path / "withmodels" / "a.onnx", TensorProto.FLOAT)
    os.mkfifo(tmp_path / "fifo.onnx")
    os.symlink("loop_b", tmp_path / "loop_a")
    os.symlink("loop_a", tmp_path / "loop_b")
    os.symlink(tmp_path / "nowhere.onnx", tmp_path / "dangling.onnx")
    return [(str(tmp_path / "folder"), "is a directory (it holds no .onnx file)"),
            (str(tmp_path / "withmodels"), "is a directory (it holds a.onnx)"),
            (str(tmp_path / "fifo.onnx"), "is not a regular file but a FIFO"),
            (str(tmp_path / "loop_a"), "is a symlink loop"),
            (str(tmp_path / "dangling.onnx"), "which does not exist"),
            ("/dev/null", "is not a regular file but a character device"),
            ("/proc/self/mem", "cannot be read"),
            ("/proc/self/status", "is not an ONNX model")]


def test_model_path_kinds_in_process(tmp_path):
    from toolkit.source import resolve_model

    for arg, text in _model_path_cases(tmp_path):
        with pytest.raises(UserError) as err:
            resolve_model(arg)
        assert text in str(err.value) and arg in str(err.value), (arg, str(err.value))
        assert err.value.exit_code == 2
    with pytest.raises(ModelError, match="is not an ONNX model"):
        resolve_model("/proc/self/status")


def test_zoo_file_given_by_path_gets_its_zoo_name(tmp_path, monkeypatch):
    data = samples.sample_path("resnet_small").read_bytes()
    path = tmp_path / "some_download_name.onnx"
    path.write_bytes(data)
    fake = dataclasses.replace(zoo.MODELS["ppocr_cls"], sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(zoo.MODELS, "ppocr_cls", fake)
    src = source.resolve_model(str(path))
    assert (src.name, src.kind, src.path) == ("ppocr_cls", "zoo", path)


def test_other_files_keep_their_stem(tmp_path):
    path = tmp_path / "mine.onnx"
    path.write_bytes(samples.sample_path("resnet_small").read_bytes())
    src = source.resolve_model(str(path))
    assert (src.name, src.kind) == ("mine", "file")
