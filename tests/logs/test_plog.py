"""npuscope's plog logger (toolkit/logs/plog.py): the GUIDE §4 format, levels, destinations, and a log file read
back by the plog parser."""

from __future__ import annotations

import logging

import pytest

from tests.logs.helpers import plog_line
from toolkit.core.errors import ConfigError
from toolkit.logs import plog
from toolkit.logs.detect import detect_format
from toolkit.logs.parsers import plog_lines


def test_log_to_stdout_values():
    from toolkit.logs.plog import to_stdout_from_env

    for val, want in (("1", True), ("TRUE", True), ("yes", True), ("on", True), ("0", False), ("false", False),
                      ("No", False), ("off", False), ("", False)):
        assert to_stdout_from_env({"NPUSCOPE_LOG_TO_STDOUT": val}) is want
    for bad in ("maybe", "2", "y"):
        with pytest.raises(ConfigError, match="NPUSCOPE_LOG_TO_STDOUT"):
            to_stdout_from_env({"NPUSCOPE_LOG_TO_STDOUT": bad})


# ------------------------------------------------------------------------------------------------- the logger
def test_formatter_writes_the_guide_format():
    rec = logging.LogRecord("npuscope.compiler", logging.WARNING, "/x/pipeline.py", 177, "pass %s failed", ("bn",),
                            None)
    rec.created, rec.process = 1700000000.123456, 4321
    expected = plog_line("WARNING", "COMPILER", 4321, "npuscope", 1700000000.123456, "pipeline.py", 177,
                         "pass bn failed")
    assert plog.PlogFormatter().format(rec) == expected
    m = plog.LINE_RE.match(expected)
    assert (m["level"], m["module"], m["pid"], m["file"], m["line"], m["message"]) == \
        ("WARNING", "COMPILER", "4321", "pipeline.py", "177", "pass bn failed")


def test_formatter_keeps_one_record_on_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        rec = logging.LogRecord("npuscope.runtime", logging.CRITICAL, "k.py", 3, "a\nb", None, sys.exc_info())
    out = plog.PlogFormatter().format(rec)
    assert "\n" not in out and out.startswith("[ERROR] RUNTIME(") and "a\\nb\\nTraceback" in out
    assert plog.LINE_RE.match(out)


@pytest.mark.parametrize("value,shown", [("0", {"DEBUG", "INFO", "WARNING", "ERROR"}), ("1", {"INFO", "WARNING", "ERROR"}),
                                         ("2", {"WARNING", "ERROR"}), ("3", {"ERROR"}), ("", {"ERROR"}), ("4", set())])
def test_level_variable_selects_levels_and_stdout(capsys, value, shown):
    plog.setup_logging({"NPUSCOPE_LOG_LEVEL": value, "NPUSCOPE_LOG_TO_STDOUT": "1"})
    log = plog.get_logger("compiler")
    for name in ("debug", "info", "warning", "error"):
        getattr(log, name)(f"msg-{name}")
    out, err = capsys.readouterr()
    levels = {plog.LINE_RE.match(ln)["level"] for ln in out.splitlines()}
    assert levels == shown and err == ""
    assert all(plog.LINE_RE.match(ln)["module"] == "COMPILER" for ln in out.splitlines())


def test_default_destination_is_stderr(capsys):
    plog.setup_logging({})
    plog.get_logger("logs").error("to stderr")
    out, err = capsys.readouterr()
    assert out == "" and plog.LINE_RE.match(err.strip())["message"] == "to stderr"


@pytest.mark.parametrize("bad", ["5", "-1", "debug", "1.0"])
def test_invalid_level_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="NPUSCOPE_LOG_LEVEL"):
        plog.setup_logging({"NPUSCOPE_LOG_LEVEL": bad})


def test_log_file_round_trips_through_the_plog_parser(tmp_path):
    path = tmp_path / "run.log"
    plog.setup_logging({"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_FILE": str(path)})
    expected = {("DEBUG", "RUNTIME"): 3, ("INFO", "COMPILER"): 2, ("ERROR", "COMPILER"): 1}
    for (level, module), n in expected.items():
        for i in range(n):
            plog.get_logger(module.lower()).log(getattr(logging, level), "%s number %d", module, i)
    for h in logging.getLogger("npuscope").handlers:
        h.flush()
    assert detect_format(path).parser.name == "plog"
    res = plog_lines.parse(path)
    got = {(r.Level, r.Module): r.Count for r in res.tables["log_levels"].itertuples()}
    assert got == expected and res.malformed == 0 and res.records == 6
    assert res.tables["log_messages"]["Message"].tolist() == ["COMPILER number 0"]
    assert [f.kind for f in res.findings] == ["log_errors"]


@pytest.mark.parametrize("name,content", [("model.onnx", None), ("inputs.npz", None), ("cfg.json", b"{}"),
                                          ("policy.toml", b"[outputs]\n"), ("weights", b"\x08\x07ONNX\x00\x01\x02"),
                                          ("latin1.log", "caf\xe9 ".encode("latin-1") * 10)])
def test_a_log_file_that_is_an_input_or_binary_is_refused_untouched(tmp_path, name, content):
    """Log lines are never appended to a file npuscope reads (a model, arrays, a config) or to a binary file:
    a ConfigError names the variable, and the file keeps its bytes."""
    path = tmp_path / name
    data = content if content is not None else bytes(range(256)) * 4
    path.write_bytes(data)
    with pytest.raises(ConfigError, match="NPUSCOPE_LOG_FILE"):
        plog.setup_logging({"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_FILE": str(path)})
    assert path.read_bytes() == data


def test_an_existing_text_log_is_appended_to(tmp_path):
    path = tmp_path / "run.log"
    path.write_text("earlier line é\n" * 400)  # a multi-byte character may straddle the 4 KiB probe
    plog.setup_logging({"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_FILE": str(path)})
    plog.get_logger("runtime").info("appended")
    for h in logging.getLogger("npuscope").handlers:
        h.flush()
    text = path.read_text()
    assert text.startswith("earlier line") and "appended" in text


def test_a_fifo_as_log_file_is_refused_without_waiting(tmp_path):
    """Opening a FIFO waits for its other end: refused at once (checked on a thread with a deadline), while
    /dev/null still takes the lines."""
    import os
    import threading

    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    got = {}
    th = threading.Thread(target=lambda: got.setdefault("err", _config_error(fifo)), daemon=True)
    th.start()
    th.join(10)
    assert not th.is_alive() and "FIFO" in got["err"]
    plog.setup_logging({"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_FILE": os.devnull})
    plog.get_logger("runtime").info("discarded")


def _config_error(path) -> str:
    try:
        plog.setup_logging({"NPUSCOPE_LOG_LEVEL": "0", "NPUSCOPE_LOG_FILE": str(path)})
    except ConfigError as exc:
        return str(exc)
    return ""
