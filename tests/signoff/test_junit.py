"""JUnit XML (toolkit/signoff/junit.py) stays parseable with control characters in names."""

from __future__ import annotations

import json


def test_junit_xml_stays_parseable_with_control_characters_in_names():
    """Fault kind: names from a model reach junit.xml; characters XML 1.0 forbids make the file unparseable
    for the CI system. Every forbidden character is written as a visible escape, in every attribute and text."""
    import xml.etree.ElementTree as ET

    from toolkit.signoff.criteria import Result
    from toolkit.signoff.junit import junit_xml

    bad = "y\x1b[31m\x00\x07\x0b\ufffe"
    results = [Result(f"outputs.{bad}.CosineSimilarity", "outputs", False, f"output '{bad}' is abnormal",
                      {"tensor": bad}), Result("memory", "memory", True, "ok")]
    text = junit_xml(results, f"signoff.{bad}", {"model": bad})
    root = ET.fromstring(text.split("\n", 1)[1])  # parses: no forbidden character left
    case = root.find(".//testcase")
    assert case.get("name") == "outputs.y\\x1b[31m\\x00\\x07\\x0b\\ufffe.CosineSimilarity"
    assert "\\x1b" in case.find("failure").get("message")
    assert root.find(".//property").get("value") == "y\\x1b[31m\\x00\\x07\\x0b\\ufffe"
    assert json.loads(case.find("failure").text)["tensor"] == bad  # JSON evidence keeps the exact name


def test_junit_xml_writes_a_path_that_is_not_utf8_escaped():
    """Kind: a model or policy path whose bytes are not UTF-8 (os.fsdecode's lone surrogates) in junit.xml:
    written as \\xNN, as every other file names it, and the file encodes as UTF-8."""
    import os
    import xml.etree.ElementTree as ET

    from toolkit.signoff.criteria import Result
    from toolkit.signoff.junit import junit_xml

    model = os.fsdecode(b"m\xff\xfe.onnx")
    text = junit_xml([Result("memory", "memory", True, f"ok for {model}")], f"signoff.{model}", {"model": model})
    root = ET.fromstring(text.encode("utf-8").split(b"\n", 1)[1])
    assert root.find(".//property").get("value") == r"m\xff\xfe.onnx"
    assert root.find(".//testsuite").get("name") == r"signoff.m\xff\xfe.onnx"
