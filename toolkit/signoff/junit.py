"""JUnit XML for CI systems: one ``<testcase>`` per signoff criterion.

Format: the common JUnit schema (as Jenkins, GitLab and GitHub Actions read it)::

    <testsuites name="npuscope signoff" tests="N" failures="F" errors="0" time="T">
      <testsuite name="signoff.<model>" tests="N" failures="F" errors="0" skipped="0" time="T" timestamp="...">
        <properties><property name="model_sha256" value="..."/>...</properties>
        <testcase classname="signoff.<kind>" name="<criterion>" time="0">
          <failure message="<one line>" type="<kind>">evidence as JSON</failure>   (FAIL only)
          <system-out>evidence as JSON</system-out>
        </testcase>
      </testsuite>
    </testsuites>
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import xml.etree.ElementTree as ET

from toolkit.core.csvjson import json_safe
from toolkit.core.text import escape_surrogates

#: characters XML 1.0 does not allow (C0 controls but TAB/LF/CR, lone surrogates, U+FFFE/U+FFFF): a model
#: name holding one would make the whole file unparseable for the CI system
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text) -> str:
    """``text`` as XML 1.0 allows it: each forbidden character written as a visible ``\\xNN`` / ``\\uNNNN``; a lone
    surrogate (a file name byte that is not UTF-8) as toolkit.core.text.escape_surrogates writes it (``\\xff``)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        escape_surrogates(str(text)))


def junit_xml(results, suite: str, properties: dict | None = None, time_s: float = 0.0) -> str:
    """The JUnit XML text for ``results`` (toolkit.signoff.criteria.Result list)."""
    n, f = len(results), sum(not r.passed for r in results)
    counts = {"tests": str(n), "failures": str(f), "errors": "0"}
    root = ET.Element("testsuites", {"name": "npuscope signoff", **counts, "time": f"{time_s:.3f}"})
    ts = ET.SubElement(root, "testsuite", {"name": _x(suite), **counts, "skipped": "0", "time": f"{time_s:.3f}",
                                           "timestamp": _dt.datetime.now().isoformat(timespec="seconds")})
    if properties:
        props = ET.SubElement(ts, "properties")
        for k, v in properties.items():
            ET.SubElement(props, "property", {"name": _x(k), "value": _x(v)})
    for r in results:
        tc = ET.SubElement(ts, "testcase", {"classname": _x(f"signoff.{r.kind}"), "name": _x(r.name), "time": "0"})
        evidence = json.dumps(json_safe(r.evidence), indent=1)  # JSON escapes controls itself
        if not r.passed:
            fail = ET.SubElement(tc, "failure", {"message": _x(r.message), "type": _x(r.kind)})
            fail.text = evidence
        ET.SubElement(tc, "system-out").text = _x(r.message) + "\n" + evidence
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
