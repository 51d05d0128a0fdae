"""``doctor``: the environment baseline checked against the project's compatibility table.

The table (:data:`COMPATIBILITY`) lists, per package, the version range npuscope is tested with (lower bound
inclusive, upper bound exclusive), as the real toolchain insists that its software and driver versions match.
The engine's accepted model range is reported with it: default-domain opsets ``MIN_OPSET..MAX_OPSET``
(toolkit.ir.load) and IR versions ``MIN_IR_VERSION..onnx.IR_VERSION``. Given a model, its opset and IR version
are checked against those ranges too, and it must declare at least one graph output (``<name> outputs``; compare
refuses a model without); a model the engine refuses to load (e.g. opset 99) is still read for these checks, and
the refusal is one more failing check (``<name> loads``).

:func:`doctor_command` is the CLI workflow; with ``as_json`` every outcome is one JSON document on stdout,
errors included (``{"ok": false, "error": "...", "exit_code": 1}``), with the same exit code as without.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

import onnx

from toolkit.core.csvjson import json_safe
from toolkit.core.env import environment
from toolkit.core.errors import ModelError, UserError
from toolkit.ir import load
from toolkit.ir.load import load_model
from toolkit.source import resolve_model

#: {package: (minimum inclusive, maximum exclusive)}; None = unbounded.
COMPATIBILITY: dict[str, tuple[str | None, str | None]] = {
    "python": ("3.11", "3.14"),
    "numpy": ("1.26", "3"),
    "onnx": ("1.16", "2"),
    "onnxruntime": ("1.18", "2"),
    "onnx-ir": ("0.1.10", "2"),
    "onnxscript": ("0.3", "1"),
    "ml_dtypes": ("0.4", "1"),
    "pandas": ("2.1", "4"),
    "jinja2": ("3.1", "4"),
    "plotly": ("5.20", "8"),
}
#: Oldest ONNX IR version accepted (IR 3 introduced opset imports as used today).
MIN_IR_VERSION = 3


@dataclass
class Check:
    name: str
    passed: bool
    found: str
    supported: str
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def version_tuple(v: str) -> tuple[int, ...]:
    """'1.23.2' → (1, 23, 2); pre/post-release suffixes ignored ('2.0.0rc1' → (2, 0, 0))."""
    parts = []
    for p in str(v).split("."):
        m = re.match(r"\d+", p)
        if not m:
            break
        parts.append(int(m.group()))
    return tuple(parts)


def in_range(version: str, lo: str | None, hi: str | None) -> bool:
    v = version_tuple(version)
    return (lo is None or v >= version_tuple(lo)) and (hi is None or v < version_tuple(hi))


def range_text(lo, hi) -> str:
    return ", ".join(x for x in ((f">={lo}" if lo else ""), (f"<{hi}" if hi else "")) if x) or "any"


def accepted_opsets() -> tuple[int, int]:
    return load.MIN_OPSET, load.MAX_OPSET


def accepted_ir_versions() -> tuple[int, int]:
    return MIN_IR_VERSION, onnx.IR_VERSION


def package_checks(env: dict) -> list[Check]:
    versions = dict(env.get("packages") or {})
    versions["python"] = env.get("python")
    out = []
    for pkg, (lo, hi) in COMPATIBILITY.items():
        found, sup = versions.get(pkg), range_text(lo, hi)
        if found is None:
            out.append(Check(pkg, False, "not installed", sup, f"{pkg} is not installed; supported {sup}"))
            continue
        ok = in_range(found, lo, hi)
        out.append(Check(pkg, ok, found, sup, f"{pkg} {found} " + ("ok" if ok else f"is outside the supported range {sup}; "
                                                                   f"install a supported version, e.g. pip install '{pkg}{sup.replace(', ', ',')}'")))
    return out


def engine_checks() -> list[Check]:
    """The installed onnx must not define a newer opset than onnxruntime can run: the engine accepts up to
    onnx's newest opset (toolkit.ir.load.MAX_OPSET)."""
    lo, hi = accepted_opsets()
    ilo, ihi = accepted_ir_versions()
    out = [Check("opsets", lo <= hi, f"{lo}..{hi}", f"{lo}..{hi}", f"accepted default-domain opsets {lo}..{hi}"),
           Check("ir_versions", ilo <= ihi, f"{ilo}..{ihi}", f"{ilo}..{ihi}", f"accepted IR versions {ilo}..{ihi}")]
    return out


def model_checks(model: onnx.ModelProto, name: str) -> list[Check]:
    lo, hi = accepted_opsets()
    ilo, ihi = accepted_ir_versions()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    ok_op = opset is not None and lo <= opset <= hi
    ok_ir = ilo <= model.ir_version <= ihi
    return [Check(f"{name} opset", ok_op, str(opset), f"{lo}..{hi}",
                  f"model '{name}' opset {opset} " + ("ok" if ok_op else f"is outside {lo}..{hi}; convert it with "
                                                      "onnx.version_converter")),
            Check(f"{name} ir_version", ok_ir, str(model.ir_version), f"{ilo}..{ihi}",
                  f"model '{name}' IR version {model.ir_version} " + ("ok" if ok_ir else f"is outside {ilo}..{ihi}; "
                                                                       "re-export with a supported onnx")),
            outputs_check(model, name)]


def outputs_check(model: onnx.ModelProto, name: str) -> Check:
    """The model declares at least one graph output (what compare/diagnose/signoff refuse otherwise:
    toolkit.diagnose.require_outputs)."""
    n = len(model.graph.output)
    return Check(f"{name} outputs", n > 0, str(n), ">=1",
                 f"model '{name}' has {n} graph output(s)" + ("" if n else ": there is nothing to compare; declare "
                                                               "the tensors to check as graph outputs when exporting it"))


def doctor(model: onnx.ModelProto | None = None, model_name: str = "model") -> dict:
    """{"ok": bool, "checks": [Check dicts], "environment": environment(), "compatibility": table}."""
    env = environment()
    checks = package_checks(env) + engine_checks()
    if model is not None:
        checks += model_checks(model, model_name)
    lo, hi = accepted_opsets()
    return {"ok": all(c.passed for c in checks), "checks": [c.to_dict() for c in checks], "environment": env,
            "compatibility": {"packages": {k: range_text(*v) for k, v in COMPATIBILITY.items()},
                              "opsets": [lo, hi], "ir_versions": list(accepted_ir_versions())}}


def read_model(path) -> tuple[onnx.ModelProto, str | None]:
    """(model, why the engine refuses it or None): the checked model from toolkit.ir.load.load_model, else the
    raw protobuf when it parses and holds a graph (so its opset / IR version can still be reported). Raises
    ModelError when the file is not an ONNX model at all."""
    try:
        return load_model(path), None
    except ModelError as exc:
        try:
            raw = onnx.load_model(str(path), load_external_data=False)
        except Exception:  # noqa: BLE001 - onnx raises assorted types for garbage; the engine's message says it
            raise exc from None
        if not raw.graph.node and not raw.graph.output:
            raise
        return raw, str(exc)


def load_check(name: str, error: str | None) -> Check:
    return Check(f"{name} loads", error is None, "refused" if error else "ok", "loads",
                 f"model '{name}' " + (f"is refused by the engine: {error}" if error else "loads"))


def _json_line(data) -> list[str]:
    """The JSON document as lines (the CLI prints each line through printable(); ASCII-only JSON has no
    control character inside a line)."""
    return json.dumps(json_safe(data), indent=1).split("\n")


def text_lines(rep: dict) -> list[str]:
    """The terminal lines of a doctor report."""
    env = rep["environment"]
    lines = [f"python {env['python']} on {env['platform']}; CPU {env['cpu']} x{env['cpu_count']}"]
    lines += [f"{'ok ' if c['passed'] else 'BAD'} {c['message']}" for c in rep["checks"]]
    lines.append("environment variables: " + (", ".join(f"{k}={v}" for k, v in env["env"].items()) or "(none set)"))
    mine = env.get("set_by_npuscope") or {}
    if mine:
        lines.append("set by npuscope (not by you): " + ", ".join(f"{k}={v}" for k, v in mine.items())
                     + " (npuscope's defaults; set them yourself to choose other values)")
    lines.append("doctor: " + ("OK" if rep["ok"] else "MISMATCH (see BAD lines)"))
    return lines


def doctor_command(model: str | None = None, as_json: bool = False) -> dict:
    """The ``doctor`` workflow: {"summary": lines, "ok", "exit_code" (0, or 1 on a mismatch, or the
    UserError's code), "report"}. ``model``: path, bundled sample or zoo name (toolkit.source.resolve_model).
    Raises UserError (without ``as_json``; with it the error becomes the JSON document
    ``{"ok": false, "error", "exit_code"}``)."""
    try:
        m, name, error = None, "model", None
        if model:
            src = resolve_model(model)
            name = src.name
            m, error = read_model(src.path)
        rep = doctor(m, name)
        if m is not None:
            rep["checks"].append(load_check(name, error).to_dict())
            rep["ok"] = rep["ok"] and error is None
    except UserError as exc:
        if not as_json:
            raise
        return {"summary": _json_line({"ok": False, "error": str(exc), "exit_code": exc.exit_code}), "ok": False,
                "exit_code": exc.exit_code, "report": None}
    lines = _json_line(rep) if as_json else text_lines(rep)
    return {"summary": lines, "ok": rep["ok"], "exit_code": 0 if rep["ok"] else 1, "report": rep}
