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
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError, UsageError
from toolkit.gears import dp
from toolkit.gears.session import GearSession
from toolkit.commands.gears import check_dim, read_lengths
from toolkit.memcheck.planio import load_plan
from toolkit.memcheck.static_check import static_conflicts

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


def test_misaligned_offset_is_a_finding_and_aligned_control_is_clean(plan_json, tmp_path):
    plan, _ = plan_json
    bad, name, offset, align = _edited(plan, tmp_path, "mis.json", 100)
    assert offset % align != 0
    r = _cli("memcheck", "resnet_small", "--plan", bad, "--no-html", "--out", tmp_path / "o1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "static conflicts: 1" in r.stdout and "misaligned" in r.stdout and name in r.stdout
    line = next(x for x in r.stdout.splitlines() if "CONFLICT misaligned" in x)
    assert str(offset) in line and str(align) in line  # the terminal says why, not "writes X over X"
    rows = list(csv.DictReader(open(tmp_path / "o1" / "conflicts.csv")))
    assert [(x["Kind"], x["Written"], int(x["OverlapStart"])) for x in rows] == [("misaligned", name, offset)]
    assert str(offset) in rows[0]["Detail"] and str(align) in rows[0]["Detail"]
    # control: the same move to an aligned offset is clean
    good, _, offset2, _ = _edited(plan, tmp_path, "ok.json", 2 * align)
    assert offset2 % align == 0
    r = _cli("memcheck", "resnet_small", "--plan", good, "--no-html", "--out", tmp_path / "o2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "static conflicts: 0" in r.stdout


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


def test_cli_memcheck_refuses_alias_to_missing_tensor(plan_json, tmp_path):
    plan, _ = plan_json
    d = json.loads(json.dumps(plan))
    d["tensors"][3]["alias_of"] = "nope"
    p = tmp_path / "alias.json"
    p.write_text(json.dumps(d))
    r = _cli("memcheck", "resnet_small", "--plan", p, "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert "'nope'" in _one_error_line(r) and not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------- gears lengths
def test_empty_csv_cell_is_refused_with_its_line(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("id,len\n1,10\n2,20\n3,\n4,30\n")
    r = _cli("gears", "--lengths", f, "--column", "len", "-k", "2", "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2
    err = _one_error_line(r)
    assert "line 4" in err and "'len'" in err and "empty" in err


def test_csv_blank_lines_keep_line_numbers(tmp_path):
    f = tmp_path / "b.csv"
    f.write_text("\n\nid,len\n1,10\n\n2,20\n3,x\n")  # 'x' sits on line 7
    with pytest.raises(InputError, match=r"line 7 column 'len': 'x' is not a length"):
        read_lengths(f, "len")
    f.write_text("\n\nid,len\n1,10\n\n2,20\n")
    assert read_lengths(f, "len").tolist() == [10, 20]


def test_ambiguous_column_is_refused_and_unique_column_is_read(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("id,len,len\n1,10,11\n")
    r = _cli("gears", "--lengths", f, "--column", "len", "-k", "2", "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2
    assert "'len'" in _one_error_line(r) and "2 columns" in r.stderr
    g = tmp_path / "g.csv"
    g.write_text("len,id,id\n3,1,2\n5,7,8\n")  # the duplicated column is not the one asked for
    assert read_lengths(g, "len").tolist() == [3, 5]


@pytest.mark.parametrize("text", ["１２", "١٢", "1２"])
def test_non_ascii_digits_are_refused(tmp_path, text):
    f = tmp_path / "l.txt"
    f.write_text(f"5\n{text}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 2: .* is not a length .*ASCII"):
        read_lengths(f)
    c = tmp_path / "l.csv"
    c.write_text(f"len\n5\n{text}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 3 column 'len'"):
        read_lengths(c, "len")
    f.write_text("5\n12\n")
    assert read_lengths(f).tolist() == [5, 12]


@pytest.mark.parametrize("dim", ["", "a;b", "../x", "seq len", "1seq", "séq"])
def test_bad_dim_is_a_usage_error(tmp_path, dim):
    with pytest.raises(UsageError, match="is not a dim name"):
        check_dim(dim)
    f = tmp_path / "l.txt"
    f.write_text("3\n5\n")
    r = _cli("gears", "--lengths", f, "-k", "2", "--dim", dim, "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 2 and "is not a dim name" in _one_error_line(r)


def test_identifier_dim_is_accepted(tmp_path):
    f = tmp_path / "l.txt"
    f.write_text("3\n5\n")
    r = _cli("gears", "--lengths", f, "-k", "2", "--dim", "seq_len", "--no-html", "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    assert "seq_len" in r.stdout


@pytest.mark.parametrize("lengths", [[3, 5, 17], [64, 65], [5, 6], [64], [1], [3, 3, 3, 100],
                                     [1, 5, MAX_LENGTH_DOC], [1000, 1500, 70000]])
def test_power_of_two_gears_capped_at_longest(lengths):
    lo, hi = min(lengths), max(lengths)
    want = [2 ** p for p in range(0, 40) if 2 ** p >= lo and 2 ** p < hi] + [hi]  # by hand
    assert dp.power_of_two_gears(lengths) == want
    assert max(want) <= MAX_LENGTH_DOC


def test_huge_lengths_power_of_two_and_optimal_plan_line(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text(f"1\n5\n{MAX_LENGTH_DOC}\n")
    out = tmp_path / "o"
    r = _cli("gears", "--lengths", f, "-k", "2", "--no-html", "--out", out)
    assert r.returncode == 0, r.stderr
    assert str(MAX_LENGTH_DOC + 1) not in r.stdout
    table = list(csv.DictReader(open(out / "gears.csv")))
    for row in table:
        assert max(json.loads(row["Gears"])) <= MAX_LENGTH_DOC
    pow2 = json.loads(next(x for x in table if x["Strategy"] == "power_of_two")["Gears"])
    assert pow2 == [2 ** p for p in range(31)] + [MAX_LENGTH_DOC]
    line = next(x for x in r.stdout.splitlines() if x.startswith("optimal with"))
    m = re.match(r"optimal with (\d+) plans[^:]*: \[([^\]]*)\]", line)
    gears = [int(v) for v in m.group(2).split(",")]
    assert int(m.group(1)) == len(gears) == 3 and gears == [1, 5, MAX_LENGTH_DOC]
    assert "3 distinct lengths" in line and f"power of two uses {len(pow2)}" in line


# ---------------------------------------------------------------------------------------------- GearSession API
GEAR_CFG = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32", "precision_mode": "force_fp32"}


def _feeds(length: int) -> dict:
    rng = np.random.default_rng(length)
    return {"x": rng.standard_normal((1, length, 64)).astype(np.float32), "mask": np.ones((1, length), np.float32)}


def test_gear_session_takes_a_dict_and_a_sample_name():
    gs = GearSession("transformer_seq_masked", dict(GEAR_CFG))
    feeds = _feeds(10)
    got = gs.run(feeds)
    m = samples.build_transformer_seq_masked()
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.gear == (16, 16) and got.outputs["y"].shape == ref.shape == (1, 10, 64)
    np.testing.assert_allclose(got.outputs["y"], ref, rtol=0, atol=1e-5)


def test_gear_session_config_types():
    m = samples.build_transformer_seq_masked()
    assert GearSession(m, Config.from_dict(GEAR_CFG)).spec.gears == ((16, 16), (32, 32))
    with pytest.raises(ConfigError, match="needs gears"):  # None: the defaults, which have no gears
        GearSession(m, None)
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        GearSession(m, {**GEAR_CFG, "bogus": 1})
    with pytest.raises(ConfigError, match="repeats gear"):  # a dict is validated like a config file
        GearSession(m, {**GEAR_CFG, "dynamic_dims": "16,16;16,16"})
    for bad in (5, "x:1,-1", [GEAR_CFG]):
        with pytest.raises(TypeError, match="config must be a toolkit.config.schema.Config, a dict"):
            GearSession(m, bad)
    with pytest.raises(TypeError, match="model must be"):
        GearSession(3, GEAR_CFG)


@pytest.fixture(scope="module")
def masked_session():
    return GearSession(samples.build_transformer_seq_masked(), GEAR_CFG)


def test_gear_session_feeds_checked_like_the_cli(masked_session):
    feeds = _feeds(10)
    with pytest.raises(TypeError, match=r"\{input name: numpy array\} dict"):
        masked_session.run(feeds["x"])
    with pytest.raises(InputError, match="dtype float64.*cast"):
        masked_session.run({**feeds, "x": feeds["x"].astype(np.float64)})
    with pytest.raises(TypeError, match="'x' is a list, not a numpy array"):
        masked_session.run({**feeds, "x": feeds["x"].tolist()})
    with pytest.raises(InputError, match=r"unexpected \['z'\]"):
        masked_session.run({**feeds, "z": np.zeros(1, np.float32)})
    assert not masked_session.sessions  # every refusal came before a gear compiled


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


def test_eviction_takes_a_compile_entrys_bundle_with_it(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    a, b, k1, k2 = (ch * 64 for ch in "abcd")
    sizes = {("compile", a): _put(s, "compile", a, 100, 1000), ("kernel", k1): _put(s, "kernel", k1, 100, 1001),
             ("bundle", a): _put(s, "bundle", a, 3000, 1005), ("compile", b): _put(s, "compile", b, 100, 1010),
             ("bundle", b): _put(s, "bundle", b, 3000, 1011), ("kernel", k2): _put(s, "kernel", k2, 100, 1012)}
    total = sum(sizes.values())
    s.limit = total - 1  # the oldest entry (compile/a) must go, and its bundle with it
    assert s.evict() == 2
    left = {k for k in sizes if s.path(*k).exists()}
    assert left == set(sizes) - {("compile", a), ("bundle", a)}
    assert _reachable(tmp_path)


def test_orphan_bundle_goes_first_then_lru(tmp_path):
    s = EntryStore(tmp_path, limit=10**9)
    a, c, k1 = (ch * 64 for ch in "ace")
    sizes = {("kernel", k1): _put(s, "kernel", k1, 100, 1000), ("compile", a): _put(s, "compile", a, 100, 1001),
             ("bundle", a): _put(s, "bundle", a, 100, 1002), ("bundle", c): _put(s, "bundle", c, 100, 1003)}
    s.limit = sum(sizes.values()) - 1  # one entry must go: the orphan (newest) instead of the LRU kernel
    assert s.evict() == 1
    assert not s.path("bundle", c).exists() and s.path("kernel", k1).exists() and _reachable(tmp_path)
    s.limit = sizes[("compile", a)] + sizes[("bundle", a)]  # now plain LRU: the kernel (oldest) goes
    assert s.evict() == 1 and not s.path("kernel", k1).exists() and s.path("compile", a).exists()


def test_cli_run_with_small_cache_limit_keeps_only_reachable_bundles(tmp_path):
    env = {**os.environ, "NPUSCOPE_COMPILE_CACHE": str(tmp_path / "cc"), "NPUSCOPE_COMPILE_CACHE_MODE": "enable",
           "NPUSCOPE_COMPILE_CACHE_MAX_BYTES": "300000"}
    r = _cli("run", "resnet_small", "--out", tmp_path / "r", env=env)
    assert r.returncode == 0, r.stderr
    base = tmp_path / "cc" / store.LAYOUT
    files = [p for p in base.glob("*/*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 300000
    assert _reachable(tmp_path / "cc")
    info = _cli("cache", "info", env=env)
    assert info.returncode == 0
    n_bundle = len(list((base / "bundle").glob("*"))) if (base / "bundle").is_dir() else 0
    n_compile = len(list((base / "compile").glob("*"))) if (base / "compile").is_dir() else 0
    assert n_bundle <= n_compile
