"""A zoo model given by its file path (e.g. the cached download) is recognised by its sha256 and keeps its zoo
name, so diagnose finds its registered realistic input instead of failing on the file's stem."""

import dataclasses
import hashlib

from toolkit import samples, source, zoo


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
