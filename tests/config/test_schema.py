"""Config loading and validation (toolkit/config/schema.py): suggestions for typos, files with a BOM or from a
pipe, fusion switch files, keep_dtype and mixlist entries, op_placement, pad values and input shapes."""

from __future__ import annotations

import json
import math
import os

import onnx
import pytest

from toolkit.commands.common import config_from_dict, load_config
from toolkit.core.text import SUGGEST_MAX_NAMES
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError


@pytest.mark.parametrize("text,expect", [('{"precision_mode": "force_fp32"}', "force_fp32"),
                                         ('precision_mode = "force_fp16"', "force_fp16")])
def test_config_from_a_pipe_is_read_as_json_or_toml(tmp_path, text, expect):
    """--config <(echo ...) hands us a pipe with no suffix: it is read (JSON first, else TOML), not refused as
    'does not exist'."""
    import threading

    from toolkit.config.schema import Config

    fifo = tmp_path / "cfg"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text))
    writer.start()
    try:
        assert Config.load(str(fifo)).precision_mode == expect
    finally:
        writer.join(timeout=10)


BOM = b"\xef\xbb\xbf"


def _write(path, text, bom=True):
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_config_files_with_bom_read_like_without(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder, bom in (("a", True), ("b", False)):
        d = tmp_path / folder
        _write(d / "keep.txt", "mm\nOpType::Softmax\n", bom)
        _write(d / "mix.json", json.dumps({"black-list": {"to-add": ["Relu"]}}), bom)
        _write(d / "switch.json", json.dumps({"Switch": {"UBFusion": {"ALL": "off"}}}), bom)
        _write(d / "c.toml", 'precision_mode = "force_fp16"\nkeep_dtype = "keep.txt"\nmodify_mixlist = "mix.json"\n'
                             'fusion_switch_file = "switch.json"\n', bom)
        _write(d / "c.json", json.dumps({"precision_mode": "force_fp16", "keep_dtype": "keep.txt"}), bom)
    for name in ("c.toml", "c.json"):
        with_bom, plain = Config.load(tmp_path / "a" / name), Config.load(tmp_path / "b" / name)
        assert with_bom.to_dict() == plain.to_dict()
        assert with_bom.keep_dtype == ["mm", "OpType::Softmax"] and with_bom.precision_mode == "force_fp16"


def test_unknown_op_type_lists_at_most_ten_names():
    names = {s.name for s in onnx.defs.get_all_schemas()}
    with pytest.raises(ConfigError) as info:
        config_from_dict({"keep_dtype": ["OpType::Qwxzvkj"]})
    msg = str(info.value)
    assert msg.endswith(f", ... ({len(names) - SUGGEST_MAX_NAMES} more))")
    listed = msg.split("(valid: ")[1].split(", ...")[0].split(", ")
    assert listed == sorted(names)[:SUGGEST_MAX_NAMES]
    for field in ("optypelist_for_implmode", "modify_mixlist"):
        value = ["Qwxzvkj"] if field == "optypelist_for_implmode" else {"black-list": {"to-add": ["Qwxzvkj"]}}
        with pytest.raises(ConfigError, match=r"\.\.\. \(\d+ more\)\)$"):
            config_from_dict({field: value})
    with pytest.raises(ConfigError, match=r"did you mean 'Softmax'\?"):
        config_from_dict({"keep_dtype": ["OpType::Sofmax"]})
    with pytest.raises(ConfigError, match=r"did you mean 'MatMul'\?"):
        config_from_dict({"optypelist_for_implmode": ["matmul"]})


def test_mixlist_conflicts_are_refused():
    for mix, op in (({"black-list": {"to-add": ["MatMul"]}, "white-list": {"to-add": ["MatMul"]}}, "MatMul"),
                    ({"gray-list": {"to-add": ["Relu"]}, "black-list": {"to-add": ["Relu"]}}, "Relu"),
                    ({"white-list": {"to-add": ["Add"], "to-remove": ["Add"]}}, "Add")):
        with pytest.raises(ConfigError, match=f"'{op}'"):
            config_from_dict({"modify_mixlist": mix})
    ok = {"black-list": {"to-add": ["MatMul"]}, "white-list": {"to-remove": ["MatMul"]}}
    assert Config.from_dict({"modify_mixlist": ok}).modify_mixlist == ok


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("level", [["ALL"], "off", 3, None])
def test_fusion_switch_level_not_an_object_is_a_config_error(tmp_path, level):
    (tmp_path / "fs.json").write_text(json.dumps({"Switch": {"GraphFusion": level}}))
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs.json"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "c.toml")
    msg = str(exc.value)
    assert f"config '{tmp_path / 'c.toml'}'" in msg
    assert 'fusion_switch_file must be {"Switch": {"GraphFusion": {...}' in msg
    assert json.dumps(level) in msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("state", [True, ["on"], "ON", 1])
def test_fusion_switch_value_must_be_on_or_off(tmp_path, state):
    (tmp_path / "fs.json").write_text(json.dumps({"Switch": {"UBFusion": {"ALL": state}}}))
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs.json"\n')
    with pytest.raises(ConfigError, match='expected "on" or "off"') as exc:
        load_config(tmp_path / "c.toml")
    assert "c.toml" in str(exc.value) and json.dumps(state) in str(exc.value)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_fusion_switch_valid_file_still_loads(tmp_path):
    (tmp_path / "fs.json").write_text(json.dumps({"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {}}}))
    (tmp_path / "c.toml").write_text('fusion_switch_file = "fs.json"\n')
    cfg = Config.load(tmp_path / "c.toml")
    assert cfg.switch("GraphFusion", "anything") is False and cfg.switch("UBFusion", "x") is True


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_keep_dtype_empty_entry_refused(tmp_path):
    (tmp_path / "c.toml").write_text('keep_dtype = [""]\n')
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path / "c.toml")
    assert "c.toml" in str(exc.value) and "keep_dtype" in str(exc.value) and "empty" in str(exc.value)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_where_names_option_file_only_when_read_from_file(tmp_path):
    (tmp_path / "kd.txt").write_text("a\n")
    (tmp_path / "c.toml").write_text('keep_dtype = "kd.txt"\n')
    cfg = Config.load(tmp_path / "c.toml")
    assert cfg.where("keep_dtype") == f"config '{tmp_path / 'c.toml'}': keep_dtype file 'kd.txt'"
    assert cfg.where("op_placement") == f"config '{tmp_path / 'c.toml'}': op_placement"
    assert cfg.with_overrides(keep_dtype=["b"]).where("keep_dtype") == "command line: keep_dtype"
    assert Config().where("keep_dtype") == "keep_dtype"


@pytest.mark.parametrize("entry", ["OpName::", "OpType::", "  "])
def test_empty_prefixed_keep_entry_is_a_config_error(entry):
    with pytest.raises(ConfigError, match="empty entry"):
        config_from_dict({"keep_dtype": [entry]})


def _one_line(exc) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------ config gaps (kind)
GEARS = {"input_shape": "x:1,-1,64;mask:1,-1", "dynamic_dims": "16,16;32,32"}


@pytest.mark.parametrize("pad,msg", [
    ("mask:1e400", "'1e400', which is not finite"), ("mask:inf", "not finite"), ("x:-inf", "not finite"),
    ({"mask": math.inf}, "not finite"), ({"mask": float("nan")}, "NaN"), ("mask:nan", "NaN"),
    ({"mask": 10**400}, "expected a number"), ("mask:0;mask:1", "gives 'mask' twice"),
    ("mask:0;x:0;mask:0", "gives 'mask' twice"), ({"mask": True}, "is True; expected a number"),
    ({"mask": [1]}, r"is \[1\]; expected a number"), ({"mask": None}, "expected a number"),
    ({"mask": "abc"}, "expected a number"), ({"mask": {}}, "expected a number"),
    ("maks:0", "did you mean 'mask'"),
])
def test_bad_pad_values(pad, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        config_from_dict({**GEARS, "pad_value": pad})
    _one_line(exc)


@pytest.mark.parametrize("shape,msg", [
    ("x:1,-1,64;mask:1,-1;x:1,-1,64", "gives input 'x' twice"),
    ("x:1,16,64;x:1,16,64", "gives input 'x' twice"),
    ("x:1,99999999999999999999999,64", "<= 9223372036854775807"),
])
def test_bad_input_shapes(shape, msg):
    with pytest.raises(ConfigError, match=msg) as exc:
        config_from_dict({"input_shape": shape}).input_shapes(dynamic=True)
    _one_line(exc)


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("data,needle", [
    ({"precison_mode": "force_fp16"}, "did you mean 'precision_mode'"),
    ({"precision_mode": "force_fp61"}, "did you mean 'force_fp16'"),
    ({"overflow_mode": "saturate"}, "did you mean 'saturation'"),
    ({"op_select_implmode": "high_perf"}, "did you mean 'high_performance'"),
    ({"modify_mixlist": {"black_list": {"to-add": ["Relu"]}}}, "did you mean 'black-list'"),
    ({"modify_mixlist": {"black-list": {"to_add": ["Relu"]}}}, "did you mean 'to-add'"),
    ({"fusion_switch_file": {"Switch": {"UBFusionn": {}}}}, "did you mean 'UBFusion'"),
])
def test_config_errors_suggest(data, needle):
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data)
    assert needle in str(exc.value)


# ------------------------------------------------------------------------------------- config errors
@pytest.mark.parametrize("table, expect", [
    ({"Tanh": "cpu"}, "did you mean 'CPU'"),
    ({"Tanh": "GPU"}, "expected 'CPU' or 'NPU'"),
    (["Tanh"], "expected an object"),
    ({"": "CPU"}, "expected an op type or a node name"),
])
def test_bad_op_placement_values_are_one_line_config_errors(table, expect):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"op_placement": table})
    assert expect in str(err.value) and "\n" not in str(err.value) and "op_placement" in str(err.value)


def test_op_placement_round_trips_through_dict_json_and_toml(tmp_path):
    table = {"Tanh": "CPU", "mm2": "NPU", "a/b:0": "CPU"}
    cfg = Config(op_placement=table)
    assert Config.from_dict(cfg.to_dict()).op_placement == table
    (tmp_path / "c.json").write_text(json.dumps({"op_placement": table}))
    (tmp_path / "c.toml").write_text('[op_placement]\nTanh = "CPU"\nmm2 = "NPU"\n"a/b:0" = "CPU"\n')
    assert Config.load(tmp_path / "c.json").op_placement == table
    assert Config.load(tmp_path / "c.toml").op_placement == table
    (tmp_path / "bad.toml").write_text('[op_placement]\nTanh = "Cpu"\n')
    with pytest.raises(ConfigError, match="did you mean 'CPU'"):
        load_config(tmp_path / "bad.toml")


@pytest.mark.parametrize("suffix,text", [(".json", '{"input_shape": "x:[1,a]"}'), (".toml", 'input_shape = "x:1,,3"'),
                                         (".json", '{"input_shape": "x:1,3;x:1,3"}')])
def test_a_bad_input_shape_in_a_config_file_names_the_file(tmp_path, suffix, text):
    path = tmp_path / f"cfg{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"config '{path}': input_shape"):
        Config.load(path)


@pytest.mark.parametrize("rel", ["a" * 300 + ".toml", "loop/c.toml", "f.txt/c.toml"])
def test_config_paths_the_file_system_refuses_are_one_config_error(tmp_path, rel):
    """Kind: --config (or a keep_dtype / modify_mixlist file it names) at a path the file system refuses (a name too
    long, a symbolic link loop, a file on the way): ConfigError (exit 2), one line naming the file, not OSError."""
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ConfigError, match="^config file '.*' cannot be used: "):
        Config.load(tmp_path / rel)
    (tmp_path / "c.json").write_text(json.dumps({"keep_dtype": rel}))
    with pytest.raises(ConfigError, match="keep_dtype file '.*' cannot be used: ") as exc:
        Config.load(tmp_path / "c.json")
    assert "\n" not in str(exc.value)
