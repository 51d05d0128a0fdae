"""Device profiles (toolkit/profile/device.py): the built-ins cite every figure, user profiles with a base,
labels, and bad profiles (one-line errors, sanity ranges, duplicate keys, op names)."""

from __future__ import annotations

import json

import pytest

from toolkit.core.errors import ConfigError
from toolkit.profile.device import COST_FIELDS, RATE_FIELDS, builtin_devices, load_device


@pytest.mark.parametrize("text, needle", [
    ('{"base": "atlas300i_pro", "base": "ascend910"}', "field 'base' is given twice"),
    ('{"base": "atlas300i_pro", "launch_overhead_us": 5, "launch_overhead_us": 6}',
     "field 'launch_overhead_us' is given twice"),
    ('{"base": "atlas300i_pro", "source": {"a": "x", "a": "y"}}', "field 'a' is given twice"),
    ('{"base": "atlas300i_pro", "unsupported_ops": ["Reluu"]}', "'Reluu', which is not an ONNX op type (did you "
                                                                "mean 'Relu'?)"),
    ('{"base": "atlas300i_pro", "unsupported_ops": ["Softmax", "matmul"]}', "(did you mean 'MatMul'?)"),
])
def test_bad_device_json_is_refused(tmp_path, text, needle):
    p = tmp_path / "dev.json"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_device(p)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg and str(p) in msg


def test_valid_onnx_ops_are_accepted(tmp_path):
    p = tmp_path / "dev.json"
    p.write_text('{"base": "atlas300i_pro", "unsupported_ops": ["NonMaxSuppression", "TopK"]}')
    assert load_device(p).unsupported_ops == ("NonMaxSuppression", "TopK")


# ---------------------------------------------------------------- device profiles
def test_builtins_load_and_cite_every_figure():
    assert set(builtin_devices()) >= {"atlas300i_pro", "ascend910"}
    for name in builtin_devices():
        dev = load_device(name)
        for f in RATE_FIELDS + COST_FIELDS:
            assert getattr(dev, f) >= 0
            assert dev.source.get(f), f"{name}: no source for {f}"
    assert load_device(None).name == "atlas300i_pro"
    assert load_device("ascend910").cube_fp16_tflops > load_device("atlas300i_pro").cube_fp16_tflops


def test_user_profile_with_base_overrides(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"base": "ascend910", "name": "mine", "launch_overhead_us": 6.5}))
    dev = load_device(str(p))
    assert (dev.name, dev.launch_overhead_us) == ("mine.json", 6.5)  # labelled by its file: name == file stem
    assert dev.memory_bandwidth_gbps == load_device("ascend910").memory_bandwidth_gbps
    assert "overridden" in dev.source["launch_overhead_us"]


@pytest.mark.parametrize("content, needle", [
    ({"base": "atlas300i_pro", "launch_overhead": 3}, "unknown field 'launch_overhead' (did you mean 'launch_overhead_us'"),
    ({"base": "atlas300i_pro", "host_gflops": 0}, "host_gflops = 0; expected a number in 0.01..1e+06 GFLOPS"),
    ({"base": "atlas300i_pro", "launch_overhead_us": -1}, "launch_overhead_us = -1; expected a number in 0..100000 µs"),
    ({"base": "atlas300i_pro", "cube_fp16_tflops": "fast"}, "cube_fp16_tflops = 'fast'"),
    ({"base": "nope"}, "base 'nope' is not a built-in device"),
    ({"name": "x", "cube_fp16_tflops": 1}, "missing field(s)"),
    ([1, 2], "must hold a JSON object"),
])
def test_bad_profiles_one_line_errors(tmp_path, content, needle):
    p = tmp_path / "dev.json"
    p.write_text(json.dumps(content))
    with pytest.raises(ConfigError) as ei:
        load_device(str(p))
    assert needle in str(ei.value) and "\n" not in str(ei.value)


@pytest.mark.parametrize("field", RATE_FIELDS + COST_FIELDS)
@pytest.mark.parametrize("where", ["below", "above"])
def test_every_numeric_field_has_a_sanity_range(tmp_path, field, where):
    # bounds written here from docs/profile.md, not read from the code
    unit = "µs" if field.endswith("_us") else "GFLOPS" if field == "host_gflops" else \
        "TFLOPS" if field.endswith("tflops") else "GB/s"
    lo, hi = {"µs": (0.0, 1e5), "GFLOPS": (0.01, 1e6), "TFLOPS": (0.001, 1e5), "GB/s": (0.01, 1e5)}[unit]
    bad = {"below": lo - 1 if lo == 0 else lo / 10, "above": hi * 10}[where]
    p = tmp_path / "dev.json"
    p.write_text(json.dumps({"base": "atlas300i_pro", field: bad}))
    with pytest.raises(ConfigError) as ei:
        load_device(str(p))
    msg = str(ei.value)
    assert f"{field} = {bad!r}" in msg and f"{lo:g}..{hi:g} {unit}" in msg and "\n" not in msg
    for ok in (lo, hi):  # the bounds themselves are accepted
        p.write_text(json.dumps({"base": "atlas300i_pro", field: ok}))
        assert getattr(load_device(str(p)), field) == ok


@pytest.mark.parametrize("value", [1e-300, 1e300, float("nan"), float("inf")])
def test_absurd_bandwidth_is_refused(tmp_path, value):
    p = tmp_path / "dev.json"
    p.write_text(json.dumps({"base": "atlas300i_pro", "memory_bandwidth_gbps": value}))
    with pytest.raises(ConfigError, match="memory_bandwidth_gbps = .*0.01..100000 GB/s"):
        load_device(str(p))


def test_bad_device_names(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'ascend910'"):
        load_device("ascend91")
    with pytest.raises(ConfigError, match="does not exist"):
        load_device(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_device(str(tmp_path / "bad.json"))


@pytest.mark.parametrize("content, label", [
    ({"base": "atlas300i_pro", "launch_overhead_us": 50.0}, "slow.json (name 'atlas300i_pro')"),  # name kept
    ({"base": "ascend910", "name": "ascend910", "host_gflops": 5}, "slow.json (name 'ascend910')"),
    ({"base": "atlas300i_pro", "name": "lab-card"}, "slow.json (name 'lab-card')"),
    ({"base": "atlas300i_pro", "name": "slow"}, "slow.json"),
])
def test_user_device_files_are_labelled_by_their_file(tmp_path, content, label):
    """The defect: a file changing fields but not `name` was labelled with the built-in's name."""
    p = tmp_path / "slow.json"
    p.write_text(json.dumps(content))
    dev = load_device(str(p))
    assert dev.name == label and dev.name not in builtin_devices()
    assert load_device(content["base"]).name == content["base"]  # built-ins keep their names
