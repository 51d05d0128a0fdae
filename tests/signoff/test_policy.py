"""Signoff policies (toolkit/signoff/policy.py): validation with one-line errors, the documented examples,
devices, output limits ('*' and named), names checked against the model, and count keys."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.core.errors import ConfigError
from toolkit.signoff.policy import check_policy_model, load_policy, policy_from_dict
from toolkit.signoff.limits import output_limits


def _policy(tmp_path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_policy_allowed_cpu_ops_typo_suggests(tmp_path):
    from toolkit.signoff.policy import load_policy

    with pytest.raises(ConfigError) as exc:
        load_policy(_policy(tmp_path, '[placement]\nallowed_cpu_ops = ["Sofmax"]\n'))
    msg = str(exc.value)
    assert "p.toml" in msg and "[placement] allowed_cpu_ops" in msg and "did you mean 'Softmax'" in msg
    known = {s.name for s in onnx.defs.get_all_schemas()}
    assert "NonMaxSuppression" in known
    assert load_policy(_policy(tmp_path, '[placement]\nallowed_cpu_ops = ["NonMaxSuppression"]\n')) is not None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_policy_task_metric_names_the_policy_not_the_option(tmp_path):
    from toolkit.signoff.policy import load_policy

    for spec, expect in (("nomod_xyz:fn", "cannot be loaded"), ("nocolon", "is not 'module:function'"),
                         ("json:JSONDecoder.nope", "cannot be loaded"), ("json:__doc__", "is not callable")):
        with pytest.raises(ConfigError) as exc:
            load_policy(_policy(tmp_path, f'[tasks]\nmetrics = ["{spec}"]\n'))
        msg = str(exc.value)
        assert "p.toml" in msg and "[tasks] metrics" in msg and spec in msg and expect in msg
        assert "--task-metric" not in msg
    assert load_policy(_policy(tmp_path, '[tasks]\nmetrics = ["json:dumps"]\n')) is not None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("metric,value", [("CosineSimilarity", '">=0.99"'), ("MaxAbsoluteError", "0.1")])
def test_policy_outputs_metric_key_explained(tmp_path, metric, value):
    from toolkit.signoff.policy import load_policy

    with pytest.raises(ConfigError) as exc:
        load_policy(_policy(tmp_path, f"[outputs]\n{metric} = {value}\n"))
    msg = str(exc.value)
    assert f"'{metric}' was read as an output name" in msg and '[outputs."*"]' in msg and "p.toml" in msg


def save_checked(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def mixed(path: Path) -> Path:
    """x [2,16] -> MatMul -> y float32 [2,8] -> ArgMax -> idx int64 [2]: one float and one integer output."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
                           helper.make_node("ArgMax", ["y"], ["idx"], name="am", axis=-1, keepdims=0)], "mix",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
                           helper.make_tensor_value_info("idx", TensorProto.INT64, [2])], [w])
    return save_checked(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_output_limits_named_overrides_star_per_metric():
    section = {"*": {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05}, "y": {"CosineSimilarity": 0.5}}
    assert output_limits(section, ["y", "z"]) == {
        "y": {"CosineSimilarity": 0.5, "RelativeEuclideanDistance": 0.05},
        "z": {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05}}
    # a stricter named limit overrides a lenient "*" just as well (the policy order does not matter)
    section = {"y": {"CosineSimilarity": 0.999}, "*": {"CosineSimilarity": 0.5}}
    assert output_limits(section, ["y"]) == {"y": {"CosineSimilarity": 0.999}}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_policy_doc_example_of_the_override_rule():
    import re

    doc = Path(__file__).resolve().parents[2] / "docs" / "signoff-example.md"
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S) if "[outputs.boxes]" in b]
    assert len(blocks) == 1
    section = policy_from_dict(tomllib.loads(blocks[0])).section("outputs")
    assert output_limits(section, ["boxes", "scores"]) == {
        "boxes": {"CosineSimilarity": 0.999, "RelativeEuclideanDistance": 0.05},
        "scores": {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05}}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("text,parts", [
    ('[outputs.y]\nExactMatchRate = 0.9\n', ['[outputs."y"] ExactMatchRate', "output 'y' is float32",
                                              "integer/bool tensors only"]),
    ('[outputs.idx]\nCosineSimilarity = 0.9\n', ['[outputs."idx"] CosineSimilarity', "output 'idx' is int64",
                                                 "float tensors only"]),
    ('[outputs.idx]\nMaxAbsoluteError = 0\n', ["output 'idx' is int64", "MaxAbsoluteError"]),
])
def test_metric_of_wrong_dtype_is_refused_against_the_model(tmp_path, text, parts):
    model = onnx.load(mixed(tmp_path / "mix.onnx"))
    with pytest.raises(ConfigError) as exc:
        check_policy_model(policy_from_dict(tomllib.loads(text)), model)
    for part in parts:
        assert part in str(exc.value), str(exc.value)


def test_no_criteria_message_lists_every_criterion_section():
    from toolkit.core.errors import ConfigError
    from toolkit.signoff.criteria import CRITERIA
    from toolkit.signoff.policy import SECTIONS, policy_from_dict

    with pytest.raises(ConfigError) as exc:
        policy_from_dict({"policy": {"name": "x"}})
    msg = str(exc.value)
    listed = re.findall(r"\[(\w+)\]", msg.split("add at least one of", 1)[1])
    assert listed == list(CRITERIA)
    assert set(listed) == set(SECTIONS) - {"policy"} and "placement" in listed
    for sec in listed:  # each named section is one a policy may hold as its only criterion section
        assert sec in SECTIONS


def _minimal(sec: str) -> dict:
    """A valid body of ``sec`` to add a key to (latency needs a budget)."""
    return {"latency": {"max_ms": 5.0}}.get(sec, {})


def test_count_keys_refuse_fractions_saying_whole_number():
    """Every integer-typed policy key (read from the schema, so a new one is covered): 1.5 and -1 are refused
    with 'a whole number', never 'count >= 0' (which 1.5 satisfies)."""
    from toolkit.core.errors import ConfigError
    from toolkit.signoff.policy import SCHEMA, policy_from_dict

    count_keys = [(sec, key) for sec, keys in SCHEMA.items() for key, (types, _) in keys.items() if types == (int,)]
    assert ("layers", "max_abnormal") in count_keys and ("latency", "requests") in count_keys
    for sec, key in count_keys:
        for bad in (1.5, -1):
            with pytest.raises(ConfigError) as exc:
                policy_from_dict({sec: {**_minimal(sec), key: bad}})
            msg = str(exc.value)
            assert f"{key} = {bad!r}" in msg and "a whole number" in msg and "count" not in msg, msg


C08 = Path("/work/shared/cases/fp16/c08_softplus_exp_overflow")


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("text, words", [
    ("[layer]\nmax_abnormal = 1\n", ["unknown section [layer]", "did you mean 'layers'"]),
    ("[layers]\nmax_abnormals = 1\n", ["unknown key 'max_abnormals'", "did you mean 'max_abnormal'"]),
    ("[layers]\nmin_cosine = 2\n", ["min_cosine = 2", "0..1"]),
    ("[outputs.y]\nCosin = 0.9\n", ["unknown metric 'Cosin'", "did you mean 'CosineSimilarity'"]),  # Cosine: a short form
    ("[latency]\nstatistic = 'p50'\n", ["needs max_ms"]),
    ("[latency]\nmax_ms = 5\nstatistic = 'p5'\n", ["statistic = 'p5'"]),
    ("[latency]\nmax_ms = 5\nsource = 'device'\n", ["source = 'device'"]),
    ("[latency]\nmin_throughput = 5\nsource = 'host'\n", ["min_throughput is a simulated-schedule figure",
                                                         "omit source (the default) or set source = 'schedule'"]),
    ("[latency]\nmin_throughput = -5\n", ["min_throughput = -5", "requests/s > 0"]),
    ("[latency]\nmax_ms = 5\nrequests = 0\n", ["requests = 0"]),
    ("[memory]\nallow_conflicts = 1\n", ["allow_conflicts = 1", "true/false"]),
    ("[policy]\nname = 'x'\n", ["no criteria"]),
    ("[layers\n", ["not valid TOML"]),
])
def test_policy_validation_one_line_errors(tmp_path, text, words):
    p = write(tmp_path, "bad.toml", text)
    with pytest.raises(ConfigError) as exc:
        load_policy(p)
    msg = str(exc.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_policy_from_dict_accepts_the_documented_example():
    import tomllib

    import toolkit.signoff.policy as mod

    doc = mod.__doc__.split("Example::", 1)[1]
    pol = policy_from_dict(tomllib.loads("\n".join(line[4:] for line in doc.splitlines())))
    assert set(pol.sections) == {"outputs", "layers", "tasks", "fp16_overflow", "memory", "latency", "placement"}


# ------------------------------------------------------------------ the worked example (docs/signoff-example.md)
DOC = Path(__file__).resolve().parents[2] / "docs" / "signoff-example.md"


def doc_policy(index: int) -> str:
    import re

    return re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[index]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_doc_policies_are_valid():
    import tomllib

    for i in range(3):
        assert policy_from_dict(tomllib.loads(doc_policy(i))) is not None


# ------------------------------------------------------------------ [latency] on every input shape
SEQ = "transformer_seq"


# ------------------------------------------------------------------ policy validation: device, ranges, model names
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("device, words", [
    ("atlas300", ["device = 'atlas300'", "did you mean 'atlas300i_pro'"]),
    ("missing.json", ["device = 'missing.json'", "does not exist"]),
    ("", ["device = ''", "omit device"]),
    ("bad.json", ["device = 'bad.json'", "unknown field 'launch_overhead'"]),
])
def test_bad_policy_device_is_refused_when_the_policy_loads(tmp_path, device, words):
    (tmp_path / "bad.json").write_text(json.dumps({"base": "atlas300i_pro", "launch_overhead": 1}))
    p = write(tmp_path, "pol.toml", f"[latency]\nmax_ms = 1\ndevice = {device!r}\n")
    with pytest.raises(ConfigError) as exc:
        load_policy(p)
    msg = str(exc.value)
    assert "\n" not in msg and f"policy '{p}'" in msg and "[latency] device" in msg and "--device" not in msg
    assert all(w in msg for w in words), msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_policy_device_file_is_relative_to_the_policy(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "card.json").write_text(json.dumps({"base": "ascend910", "launch_overhead_us": 9.0}))
    monkeypatch.chdir(tmp_path)
    pol = load_policy(write(tmp_path / "sub", "pol.toml", "[latency]\nmax_ms = 1\ndevice = 'card.json'\n"))
    assert Path(pol.section("latency")["device"]) == tmp_path / "sub" / "card.json"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("metric, value, ok", [
    ("CosineSimilarity", 1.5, False), ("CosineSimilarity", -1.5, False), ("CosineSimilarity", 1.0, True),
    ("CosineSimilarity", -1.0, True), ("ExactMatchRate", 1.2, False), ("ExactMatchRate", -0.1, False),
    ("ExactMatchRate", 0.0, True), ("RelativeEuclideanDistance", -0.01, False), ("RelativeEuclideanDistance", 0.0, True),
    ("MaxAbsoluteError", float("inf"), False), ("CosineSimilarity", float("nan"), False),
    ("KullbackLeiblerDivergence", 1e9, True),
])
def test_output_limits_must_lie_in_the_metric_range(metric, value, ok):
    data = {"outputs": {"*": {metric: value}}}
    if ok:
        assert policy_from_dict(data) is not None
        return
    with pytest.raises(ConfigError) as exc:
        policy_from_dict(data)
    assert f"{metric} = {value!r}" in str(exc.value) and "outside the metric's range" in str(exc.value)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("text, words", [
    ('[outputs.yy]\nCosineSimilarity = 0.9\n', ['[outputs."yy"] names no output', "did you mean 'y'"]),
    ("[layers]\nmin_cosine = 0.9\nignore = ['attn_softmx']\n", ["ignore names 'attn_softmx'",
                                                                 "did you mean 'attn_softmax'"]),
    ("[fp16_overflow]\nallow = ['attn_probs']\n", ["allow names 'attn_probs'", "not a tensor of the model"]),
    ("[layers]\nmin_cosine = 0.9\nignore = [1]\n", ["ignore = [1]", "list of node names"]),
])
def test_policy_names_are_checked_against_the_model(tmp_path, text, words):
    """Validated once the model is loaded, before any input runs: the in-memory run and the conclusion of a
    dataset run both refuse the policy (exit 2), instead of a FAIL criterion (exit 1) or silence."""
    from toolkit.ir.load import load_model
    from toolkit.signoff.policy import check_policy_model
    from toolkit.source import resolve_model

    model = load_model(resolve_model(SEQ).path)
    real_nodes = [n.name for n in model.graph.node]
    assert "attn_softmax" in real_nodes and "attn_softmx" not in real_nodes and "yy" not in real_nodes
    with pytest.raises(ConfigError) as exc:
        check_policy_model(load_policy(write(tmp_path, "p.toml", text)), model)
    msg = str(exc.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_policy_names_that_exist_are_accepted():
    from toolkit.ir.load import load_model
    from toolkit.signoff.policy import check_policy_model
    from toolkit.source import resolve_model

    model = load_model(resolve_model(SEQ).path)
    node, tensor = model.graph.node[3].name, model.graph.node[3].output[0]
    check_policy_model(policy_from_dict({"outputs": {"y": {"CosineSimilarity": 0.9}, "*": {"CosineSimilarity": 0.9}},
                                         "layers": {"ignore": [node], "max_abnormal": 0}, "fp16_overflow": {"allow": [tensor, "x"]}}),
                       model)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
@pytest.mark.parametrize("extra", ["device = 'ascend910'", "requests = 8"])
def test_host_latency_refuses_schedule_only_keys(extra):
    import tomllib

    with pytest.raises(ConfigError) as exc:
        policy_from_dict(tomllib.loads(f"[latency]\nmax_ms = 5\nsource = 'host'\n{extra}\n"))
    key = extra.split()[0]
    assert f"{key} would be ignored" in str(exc.value) and "omit source" in str(exc.value)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(not C08.is_dir(), reason="shared case c08 not available")
def test_doc_documents_latency_source():
    text = DOC.read_text(encoding="utf-8")
    assert "`source`" in text and 'source = "host"' in text and "omit `source`" in text.lower()


@pytest.mark.parametrize("data, section", [
    ({"outputs": {}}, "outputs"),
    ({"outputs": {"*": "CosineSimilarity=off,MaxAbsoluteError=off"}}, "outputs"),
    ({"layers": {}}, "layers"),
    ({"layers": {"ignore": ["n0"]}}, "layers"),
    ({"memory": {"allow_conflicts": True}}, "memory"),
    ({"memory": {"max_arena_bytes": 1 << 20}, "layers": {"ignore": ["n0"]}}, "layers"),
])
def test_a_section_that_holds_no_criterion_is_refused(data, section):
    """A criterion section that would be judged on nothing (no limit in it) is refused when the policy loads,
    naming the section and what to add; it must not pass as '0/0 criteria pass'."""
    with pytest.raises(ConfigError, match=rf"\[{section}\] holds no criterion; add .*or remove the section"):
        policy_from_dict(data)


@pytest.mark.parametrize("data", [{"outputs": {"*": "CosineSimilarity>=0.99", "y": "CosineSimilarity=off"}},
                                  {"layers": {"ignore": ["n0"], "min_cosine": 0.9}}, {"memory": {}},
                                  {"memory": {"allow_conflicts": True, "max_arena_bytes": 64}}])
def test_a_section_with_one_criterion_is_accepted(data):
    assert policy_from_dict(data).sections == list(data)
