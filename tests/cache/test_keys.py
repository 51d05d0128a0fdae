"""Compile-cache keys (toolkit/cache/keys.py): every key ingredient invalidates, cache settings are not
ingredients, and fusion rules or passes changed at run time invalidate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.cache.helpers import INGREDIENTS, _orig_versions, build, cfg, fresh, make_model, n_sessions, plan_dict, run
from toolkit.cache import keys
from toolkit.engine import compile_model


def test_cache_settings_are_not_key_ingredients(tmp_path):
    c = cfg(tmp_path)
    cold, _ = build(make_model(), c)
    other_path = compile_model(make_model(), c, input_shapes={"x": (1, 3, 8, 8)}, model_path="elsewhere.onnx")
    assert other_path.cache["status"] == "hit" and other_path.plan.model == "elsewhere.onnx"


@pytest.mark.parametrize("ingredient", sorted(INGREDIENTS))
def test_each_key_ingredient_invalidates(tmp_path, monkeypatch, ingredient):
    c = cfg(tmp_path)
    base, _ = build(make_model(), c)
    model, overrides, shape, versions = INGREDIENTS[ingredient]()
    if versions:
        monkeypatch.setattr(keys, "versions", lambda: {**_orig_versions(), **versions})
    c2 = dataclasses.replace(c, **overrides)
    got, rt = build(model, c2, shape)
    assert got.cache["key"] != base.cache["key"]
    assert got.cache["status"] in ("miss", "patched")
    if versions:  # kernel entries are keyed by the versions too
        assert got.cache["kernel_misses"] == n_sessions(rt)
    ref, rt_ref = fresh(model, c2, shape)
    assert plan_dict(got) == plan_dict(ref)
    np.testing.assert_array_equal(run(rt, shape), run(rt_ref, shape))


@pytest.mark.parametrize("change", ["rule_registered", "pass_replaced"])
def test_rules_and_passes_changed_at_run_time_invalidate(tmp_path, monkeypatch, change):
    """A fusion rule registered (or a pass replaced) in this process after import, as a test or a plugin
    does, must not be served an entry compiled without it: the registry is a key ingredient."""
    from toolkit.compiler import pipeline, rules
    from toolkit.compiler.rules import registry as rule_registry

    c = cfg(tmp_path)
    base, _ = build(make_model(), c)
    if change == "rule_registered":
        rules.load_rules()
        monkeypatch.setattr(rule_registry, "RULES", rules.RULES + [rules.Rule("TestOnlyFusionPass", frozenset({"Relu"}),
                                                                      lambda g, n: None)])
    else:
        info = pipeline.PASSES["check_constants"]
        monkeypatch.setitem(pipeline.PASSES, "check_constants",
                            dataclasses.replace(info, fn=lambda ctx: pipeline.PassResult(0, ["replaced"])))
    got, _ = build(make_model(), c)
    assert got.cache["key"] != base.cache["key"]
    assert got.cache["status"] == "miss"


IMPORT_ORDER = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from toolkit.cache.keys import registry_digest
print(registry_digest())
"""


@pytest.mark.parametrize("first", [["toolkit.compiler.passes.buffer_fusion", "toolkit.compiler.passes.insert_casts"],
                                   ["toolkit.compiler.passes.plan_memory"], ["toolkit.compiler.rules.norm"], []])
def test_registry_digest_is_the_same_whatever_modules_a_process_imported_first(first, monkeypatch):
    """A process that imported some pass or rule modules before the pipeline (a test, a plugin) registers the
    passes in another order: its compile keys must still be a fresh process's, or it misses every entry that
    process wrote."""
    import subprocess
    import sys

    from toolkit.cache import keys
    from toolkit.compiler import registry

    def fresh(mods):
        out = subprocess.run([sys.executable, "-c", IMPORT_ORDER, *mods], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert fresh(first) == fresh([]) == keys.registry_digest()
    monkeypatch.setattr(registry, "PASSES", dict(reversed(list(registry.PASSES.items()))))
    monkeypatch.setattr(keys, "PASSES", registry.PASSES)
    assert keys.registry_digest() == fresh([])  # the dict's order is not part of the key
