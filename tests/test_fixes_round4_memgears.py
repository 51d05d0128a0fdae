"""Round-4 fixes (memcheck plans, gears lengths/--dim/power-of-two, GearSession API, compile-cache eviction).

Fault kinds covered, one test (or parametrised group) each:
- a plan offset that breaks the plan's alignment is a ``misaligned`` static finding (exit 1), an aligned
  control is clean (exit 0);
- plan.json validation refuses an ``alias_of`` naming no tensor (or itself) and a tensor listed twice;
- lengths CSV: an empty cell, a header naming the column twice, non-ASCII digits are refused by line;
- ``--dim`` that is not an identifier is a usage error;
- power-of-two gears never exceed the longest length (nor the documented 2147483647), and the
  "optimal with N plans" line states as many plans as the gears it lists;
- GearSession accepts Config / dict / None and sample names, refuses other types, and checks feeds like the CLI;
- compile-cache eviction never leaves a bundle without its compile entry.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from toolkit import samples
from toolkit.cache import store
from toolkit.cache.store import EntryStore
from toolkit.config import Config
from toolkit.errors import ConfigError, InputError, UsageError
from toolkit.gears import dp
from toolkit.gears.session import GearSession
from toolkit.gears.workflow import check_dim, read_lengths
from toolkit.memory.planio import load_plan
from toolkit.memory.static_check import static_conflicts

MAX_LENGTH_DOC = 2147483647  # docs/gears.md: "Lengths are whole numbers from 1 to 2147483647"


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "toolkit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def _one_error_line(r) -> str:
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# ---------------------------------------------------------------------------------------------- memcheck plans
@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    """plan.json of resnet_small as `npuscope compile` writes it (parsed dict, path)."""
    out = tmp_path_factory.mktemp("plan") / "c"
    r = _cli("compile", "resnet_small", "--out", out)
    assert r.returncode == 0, r.stderr
    path = out / "plan.json"
    return json.loads(path.read_text()), path


def _free_tensor(plan: dict):
    """An arena tensor with bytes, chosen independently of the checker, and the arena size before editing."""
    t = next(t for t in plan["tensors"] if t["storage"] == "arena" and t["nbytes"] > 0 and t["alias_of"] is None
             and not any(o.get("alias_of") == t["name"] for o in plan["tensors"]))
    return t, plan["arena_bytes"]


def _edited(plan: dict, tmp_path, name: str, offset_past_arena: int) -> tuple:
    """The plan with one tensor moved past the old arena end (overlapping nothing) by ``offset_past_arena``
    bytes, the arena grown to hold it; returns (path, tensor name, new offset, alignment)."""
    d = json.loads(json.dumps(plan))
    t, arena = _free_tensor(d)
    align = d["alignment"]
    assert arena % align == 0
    t["offset"] = arena + offset_past_arena
    d["arena_bytes"] = arena + offset_past_arena + t["nbytes"] + 2 * align
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return p, t["name"], t["offset"], align


def test_static_check_flags_every_misaligned_arena_tensor(plan_json, tmp_path):
    plan, path = plan_json
    p = load_plan(path)
    assert static_conflicts(p) == []
    arena = [t for t in p.tensors.values() if t.storage == "arena" and t.nbytes > 0]
    p.alignment = 7  # the compiled offsets are multiples of 512; those that are not multiples of 7 break it
    want = sorted(t.name for t in arena if t.offset % 7)
    got = sorted(c.victim for c in static_conflicts(p) if c.kind == "misaligned")
    assert want and got == want


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


# ---------------------------------------------------------------------------------------------- GearSession API
GEAR_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32", "precision_mode": "force_fp32"}


def _feeds(length: int) -> dict:
    rng = np.random.default_rng(length)
    return {"x": rng.standard_normal((1, length, 64)).astype(np.float32), "mask": np.ones((1, length), np.float32)}


@pytest.fixture(scope="module")
def masked_session():
    return GearSession(samples.build_transformer_seq_masked(), GEAR_CFG)


# ---------------------------------------------------------------------------------------------- cache eviction
def _put(s: EntryStore, ns: str, key: str, size: int, mtime: float):
    s.put(ns, key, {"ns": ns}, bytes(size))
    store.flush()
    os.utime(s.path(ns, key), (mtime, mtime))
    return s.path(ns, key).stat().st_size


def _reachable(root) -> bool:
    base = root / store.LAYOUT
    bundles = {p.name for p in (base / "bundle").glob("*")} if (base / "bundle").is_dir() else set()
    compiles = {p.name for p in (base / "compile").glob("*")} if (base / "compile").is_dir() else set()
    return bundles <= compiles


