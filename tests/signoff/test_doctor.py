"""``npuscope doctor``'s checks (toolkit/signoff/doctor.py): the environment passes here; a faked out-of-range
version is named with its range."""

from __future__ import annotations

import onnx
from onnx import helper

import toolkit.signoff.doctor as doctor_mod
from toolkit.signoff.doctor import doctor, in_range, model_checks, version_tuple


def test_doctor_passes_here():
    rep = doctor()
    assert rep["ok"], [c for c in rep["checks"] if not c["passed"]]
    names = {c["name"] for c in rep["checks"]}
    assert {"onnx", "onnxruntime", "numpy", "opsets", "ir_versions"} <= names
    assert rep["compatibility"]["opsets"][0] == 7


def test_out_of_range_version_is_named_with_its_range(monkeypatch):
    real = doctor_mod.environment()

    def fake():
        env = dict(real, packages=dict(real["packages"], onnxruntime="1.2.0"))
        return env

    monkeypatch.setattr(doctor_mod, "environment", fake)
    rep = doctor()
    assert not rep["ok"]
    (bad,) = [c for c in rep["checks"] if not c["passed"]]
    assert bad["name"] == "onnxruntime" and bad["found"] == "1.2.0"
    assert ">=1.18, <2" in bad["message"] and "outside the supported range" in bad["message"]


def test_missing_package_is_a_mismatch(monkeypatch):
    real = doctor_mod.environment()
    monkeypatch.setattr(doctor_mod, "environment", lambda: dict(real, packages=dict(real["packages"], numpy=None)))
    assert not doctor()["ok"]


def test_model_opset_out_of_range():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 5)])
    checks = {c.name: c for c in model_checks(m, "tiny")}
    assert not checks["tiny opset"].passed and "outside 7.." in checks["tiny opset"].message
    assert checks["tiny ir_version"].passed


def test_versions():
    assert version_tuple("2.0.0rc1") == (2, 0, 0)
    assert in_range("1.18.0", "1.18", "2") and not in_range("2.0", "1.18", "2")
