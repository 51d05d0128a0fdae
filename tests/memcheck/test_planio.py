"""Plan files (toolkit/memcheck/planio.py): a hand-edited plan's differences are named field by field, bad
aliases and duplicate tensors are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.core.errors import InputError
from toolkit.memcheck.planio import load_plan


@pytest.fixture(scope="module")
def compiled_resnet():
    from toolkit import samples
    from toolkit.engine import compile_model
    from toolkit.config.schema import Config
    from toolkit.ir.load import load_model

    return compile_model(load_model(samples.sample_path("resnet_small")), Config())


def _edited_plan(compiled, tmp_path: Path, edits: dict) -> tuple[Path, dict, dict]:
    d = json.loads(json.dumps(compiled.plan.to_dict()))
    t = next(t for t in d["tensors"] if t["name"] == "stem_relu")
    assert t["storage"] == "arena" and t["nbytes"] > 2
    before = dict(t)
    t.update(edits)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(d))
    return path, before, t


@pytest.mark.parametrize("edits", [
    {"nbytes": 1}, {"shape": "SHAPE+1"}, {"dtype": "OTHER"}, {"storage": "host"},
    {"nbytes": 1, "storage": "host"}])
def test_plan_tensor_difference_names_each_field_with_both_values(compiled_resnet, tmp_path, edits):
    from toolkit.memcheck.planio import attach_plan, load_plan

    t0 = next(t for t in compiled_resnet.plan.tensors.values() if t.name == "stem_relu")
    resolved = {}
    for k, v in edits.items():
        if v == "SHAPE+1":
            v = list(t0.shape[:-1]) + [t0.shape[-1] + 1]
        elif v == "OTHER":
            v = "float32" if t0.dtype != "float32" else "float16"
        resolved[k] = v
    path, before, after = _edited_plan(compiled_resnet, tmp_path, resolved)
    with pytest.raises(InputError) as err:
        attach_plan(compiled_resnet, load_plan(path), where=f"plan file '{path}'")
    msg = str(err.value)
    assert "tensor 'stem_relu'" in msg and "\n" not in msg
    for key in resolved:
        assert f"{key} {json.dumps(after[key])} but the compiled model has {json.dumps(before[key])}" in msg, msg
    for key in {"dtype", "shape", "nbytes", "storage"} - set(resolved):
        assert f"{key} " not in msg.split("tensor 'stem_relu'", 1)[1].split(";")[0], msg


def test_plan_missing_tensor_is_named(compiled_resnet, tmp_path):
    from toolkit.memcheck.planio import attach_plan, load_plan

    path, _, _ = _edited_plan(compiled_resnet, tmp_path, {})
    d = json.loads(path.read_text())
    d["tensors"] = [t for t in d["tensors"] if t["name"] != "stem_relu"]
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match="tensor 'stem_relu' is missing"):
        attach_plan(compiled_resnet, load_plan(path))


def _cli_with_env(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    """plan.json of resnet_small as `npuscope compile` writes it (parsed dict, path)."""
    out = tmp_path_factory.mktemp("plan") / "c"
    r = _cli_with_env("compile", "resnet_small", "--out", out)
    assert r.returncode == 0, r.stderr
    path = out / "plan.json"
    return json.loads(path.read_text()), path


@pytest.mark.parametrize("edit,msg", [
    (lambda d: d["tensors"][3].update(alias_of="nope"), r"tensor #3 '[^']+': field 'alias_of' names 'nope', which is "
                                                        r"not a tensor of the plan"),
    (lambda d: d["tensors"][3].update(alias_of=d["tensors"][3]["name"]), r"tensor #3 .*names the tensor itself"),
    (lambda d: d["tensors"].append(dict(d["tensors"][2])), r"listed twice \(also tensor #2\)"),
])
def test_plan_validation_refuses_bad_alias_and_duplicate_tensor(plan_json, tmp_path, edit, msg):
    plan, _ = plan_json
    d = json.loads(json.dumps(plan))
    edit(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(InputError, match=msg) as exc:
        load_plan(p)
    assert "\n" not in str(exc.value) and str(p) in str(exc.value)
