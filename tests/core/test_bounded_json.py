"""Bounded JSON/TOML reading (toolkit.core.boundedjson) and every reader of a user's JSON or TOML file.

Kinds: the nesting scan agrees with the depth of the parsed document (random JSON documents, TOML with strings,
comments and multi-line strings holding brackets); each reader refuses a document nested 100,000 deep with
one line of its own error class (never RecursionError); each reader refuses a file over its size limit naming
the size; each reader refuses a link to /dev/zero at once (in a child process with a timeout, so a reader that
reads it fails the test instead of hanging the suite); ``npuscope compile --config /dev/zero`` exits 2.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from toolkit.commands.common import config_from_dict, load_config
from toolkit.core import boundedjson
from toolkit.core.boundedjson import json_loads, nesting_depth, toml_loads
from toolkit.core.errors import ConfigError, InputError

DEEP = 100_000
TESTS = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ the scan
def parsed_depth(v) -> int:
    """Depth of lists/dicts in a parsed document (the reference the scan is checked against)."""
    if isinstance(v, dict):
        return 1 + max((parsed_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((parsed_depth(x) for x in v), default=0)
    return 0


_NASTY = ['[', ']', '{', '}', '"', '\\', '\\"', '[{"', '\\\\', "é[", "\n]", "'", "#[", "\u2028"]


def random_value(rng: random.Random, depth: int):
    r = rng.random()
    if depth <= 0 or r < 0.25:
        return rng.choice([1, -2.5, True, None, "".join(rng.choice(_NASTY) for _ in range(rng.randint(0, 6)))])
    if r < 0.6:
        return [random_value(rng, depth - 1) for _ in range(rng.randint(0, 4))]
    return {"".join(rng.choice(_NASTY) for _ in range(rng.randint(0, 3))) + str(i): random_value(rng, depth - 1)
            for i in range(rng.randint(0, 4))}


@pytest.mark.parametrize("seed", range(40))
def test_json_scan_depth_equals_the_parsed_depth(seed):
    rng = random.Random(seed)
    doc = random_value(rng, rng.randint(0, 12))
    text = json.dumps(doc, ensure_ascii=seed % 2 == 0, indent=None if seed % 3 else 1)
    assert nesting_depth(text) == parsed_depth(json.loads(text))
    assert nesting_depth(text.encode()) == parsed_depth(doc)


def toml_value(v) -> str:
    """A TOML inline value for ``v`` (no None in TOML: the empty string instead)."""
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if v is None or isinstance(v, str):
        return json.dumps(v or "")  # a JSON string is a TOML basic string (\\uXXXX escapes included)
    return json.dumps(v)


@pytest.mark.parametrize("seed", range(40))
def test_toml_scan_depth_equals_the_parsed_depth(seed):
    rng = random.Random(1000 + seed)
    values = {f"k{i}": random_value(rng, rng.randint(1, 10)) for i in range(3)}
    lines = [f"k{i} = {toml_value(v)}  # a comment with [[[ and {{{{ and \"" for i, v in enumerate(values.values())]
    lines += ["lit = '[[[ literal'", "multi = '''\n[[[[\n'''", 'basic = """\n{{{{ \\""" [[[ \n"""',
              "[table]", "x = 1", "[[array_of_tables]]", "y = [1, [2]]"]
    text = "\n".join(lines) + "\n"
    data = tomllib.loads(text)
    # table headers open one ([t]) or two ([[t]]) brackets for a moment, arrays of tables nest their values
    want = max([parsed_depth(data[f"k{i}"]) for i in range(3)] + [2])
    assert nesting_depth(text, "toml") == want


# ------------------------------------------------------------------------------------------ the readers
def _config(p):
    from toolkit.config.schema import Config

    return Config.load(p)


def _option(option):
    def read(p):
        from toolkit.config.schema import Config

        return Config.from_dict({option: str(p)})
    return read


def _device(p):
    from toolkit.profile.device import load_device

    return load_device(str(p))


def _policy(p):
    from toolkit.signoff.policy import load_policy

    return load_policy(p)


def _report(p):
    from toolkit.signoff.regress import load_run

    return load_run(p.parent)


def _index(p):
    from toolkit.dumps.readers import SideSpec, read_side

    (p.parent / "a.npy").write_bytes(b"")
    return read_side(SideSpec(str(p.parent), "golden"))


def _mapping(p):
    from toolkit.dumps.mapping import load_mapping

    return load_mapping(p)


def _plan(p):
    from toolkit.memcheck.planio import load_plan

    return load_plan(p)


#: name -> (file name, "json"/"toml", reader(path), error class, size limit kind)
READERS = {
    "config_json": ("cfg.json", "json", _config, ConfigError, "config"),
    "config_toml": ("cfg.toml", "toml", _config, ConfigError, "config"),
    "modify_mixlist": ("mix.json", "json", _option("modify_mixlist"), ConfigError, "config"),
    "fusion_switch_file": ("switch.json", "json", _option("fusion_switch_file"), ConfigError, "config"),
    "device": ("dev.json", "json", _device, ConfigError, "config"),
    "policy": ("policy.toml", "toml", _policy, ConfigError, "config"),
    "regress_summary": ("summary.json", "json", _report, InputError, "artifact"),
    "dump_index": ("index.json", "json", _index, InputError, "artifact"),
    "mapping": ("map.json", "json", _mapping, InputError, "artifact"),
    "plan": ("plan.json", "json", _plan, InputError, "artifact"),
}


def deep_count(message: str) -> int:
    """N of "nests N levels deep" / "nested N levels deep" in a message (0 when absent)."""
    import re

    m = re.search(r"(\d+) levels deep", message)
    return int(m.group(1)) if m else 0


def deep_text(kind: str) -> str:
    if kind == "json":
        return '{"a": ' + "[" * DEEP + "]" * DEEP + "}"
    return "a = " + "[" * DEEP + "]" * DEEP + "\n"


def in_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    return folder / READERS[name][0]


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_refuses_a_document_nested_100000_deep(tmp_path, name):
    fname, kind, read, error, _ = READERS[name]
    path = in_folder(tmp_path, name)
    path.write_text(deep_text(kind))
    with pytest.raises(error) as err:
        read(path)
    text = str(err.value)
    assert "\n" not in text and deep_count(text) >= DEEP and "more than the 200" in text, text


def test_toml_dotted_keys_100000_deep_are_refused():
    """Dotted keys nest without brackets: the parsed document's depth is checked too."""
    text = "[" + ".".join(["k"] * DEEP) + "]\nx = 1\n"
    with pytest.raises(ConfigError, match=r"more than 200 tables deep"):
        toml_loads(text, "policy 'p.toml'", ConfigError)
    assert toml_loads("a.b.c = 1", "p", ConfigError) == {"a": {"b": {"c": 1}}}


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_refuses_a_file_over_its_size_limit(tmp_path, monkeypatch, name):
    fname, kind, read, error, limit = READERS[name]
    monkeypatch.setitem(boundedjson.LIMITS, limit, 100)
    path = in_folder(tmp_path, name)
    body = '{"a": 1}' if kind == "json" else "a = 1"
    path.write_text(body + " " * 300 + "\n")
    size = path.stat().st_size
    with pytest.raises(error) as err:
        read(path)
    text = str(err.value)
    assert "\n" not in text and f"is {size} bytes, more than the 100 read" in text and str(path) in text, text


CHILD = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from core.test_bounded_json import READERS
    from toolkit.core.errors import UserError
    out = {}
    root = sys.argv[2]
    for name, (fname, kind, read, error, limit) in sorted(READERS.items()):
        folder = os.path.join(root, name)
        os.makedirs(folder)
        path = os.path.join(folder, fname)
        os.symlink("/dev/zero", path)
        from pathlib import Path
        try:
            read(Path(path))
            out[name] = ["read", ""]
        except UserError as exc:
            out[name] = [type(exc).__name__, str(exc)]
    print(json.dumps(out))
""")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_every_reader_refuses_dev_zero_at_once(tmp_path):
    """A symbolic link named like the file, to /dev/zero: refused before a byte is read (a reader reading it
    would run until the timeout or out of memory)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert sorted(got) == sorted(READERS)
    for name, (kind, message) in got.items():
        assert kind == READERS[name][3].__name__ and "\n" not in message, (name, kind, message)
        said = "has no summary.json" if name == "regress_summary" else "not a regular file but a character device"
        assert READERS[name][0] in message and said in message, (name, message)


def test_config_from_a_pipe_is_still_read_and_bounded(tmp_path, monkeypatch):
    """--config <(echo ...) (a FIFO) stays readable, at most the config limit of it."""
    import threading

    from toolkit.config.schema import Config

    fifo = tmp_path / "cfg"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text('{"precision_mode": "force_fp32"}' + " " * 500))
    writer.start()
    monkeypatch.setitem(boundedjson.LIMITS, "config", 100)
    try:
        with pytest.raises(ConfigError, match=r"holds more than the 100 bytes read"):
            load_config(str(fifo))
    finally:
        writer.join(timeout=10)


def _tiny_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("config", ["/dev/zero", "deep.json", "deep.toml"])
def test_compile_with_a_bad_config_is_one_line_exit_2(tmp_path, config):
    _tiny_model(tmp_path / "m.onnx")
    (tmp_path / "deep.json").write_text(deep_text("json"))
    (tmp_path / "deep.toml").write_text(deep_text("toml"))
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compile", "m.onnx", "--config", config, "--out", "o"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("npuscope: error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
    assert config in errors[0] and ("character device" in errors[0] or "levels deep" in errors[0]), errors[0]


# ------------------------------------------------------------------------------- parse-log's JSON readers
def test_parse_log_json_readers_note_deep_documents_instead_of_raising(tmp_path):
    from toolkit.logs.jsonio import load_events
    from toolkit.logs.parsers import fusion_result

    trace = tmp_path / "trace.json"
    trace.write_text('[{"name": "a", "args": ' + "[" * DEEP + "]" * DEEP + "}]")
    events = load_events(trace)
    assert events.events == [] and events.malformed == 1 and deep_count(events.notes[0]) == DEEP + 2
    fusion = tmp_path / "fusion_result.json"
    fusion.write_text('{"g": ' + "{" * DEEP + "}" * DEEP + "}")
    res = fusion_result.parse(fusion)
    assert res.malformed == 1 and deep_count(res.notes[0]) == DEEP + 1


def test_json_loads_keeps_decode_errors_for_the_caller():
    with pytest.raises(json.JSONDecodeError):
        json_loads("{", "f", ConfigError)
    assert json_loads('{"a": [1, {"b": "]]]"}]}', "f", ConfigError) == {"a": [1, {"b": "]]]"}]}


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"x": {"k": [1, {"b": 1, "b": 1}]}}', '[{"c": 0, "c": 0}]'])
def test_a_key_named_twice_in_one_object_is_refused(text):
    from toolkit.core.boundedjson import json_loads

    with pytest.raises(ConfigError, match="twice"):
        json_loads(text, "config 'x.json'", ConfigError)
    assert json_loads('{"a": 1, "b": {"a": 2}}', "w", ConfigError) == {"a": 1, "b": {"a": 2}}
