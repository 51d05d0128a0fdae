"""HTML pages of ``signoff`` (signoff.html) and ``regress`` (regress.html): self-contained, offline.

Same machinery as the diagnose report (toolkit.report.html): the jinja2 environment with autoescape, the
shared css/js/macros, plotly figures inlined as escaped JSON. All formatting happens here; the templates only
loop over strings (toolkit.report.context's ``facts`` / ``grid`` shapes).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import pandas as pd

from toolkit.core.csvjson import atomic_write_text, json_safe
from toolkit.core.text import show_pair
from toolkit.report import context, figures
from toolkit.report.html import environment, plotly_src, script_json

STATUS_CSS = {"PASS": "pass", "FAIL": "fail"}
#: The sentence under a signoff verdict.
SHIP_TEXT = {"PASS": "Can ship under this policy: all {criteria} criteria pass.",
             "FAIL": "Do not ship under this policy: {failed} of {criteria} criteria fail (the red cards below)."}


def _now() -> str:
    return _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _env_sections(env: dict) -> list[dict]:
    env = dict(env or {})
    out = [{"title": "Package versions", "facts": context.facts(env.pop("packages", {}))}]
    env_vars = env.pop("env", None)
    out.append({"title": "Machine", "facts": context.facts(env)})
    out.append({"title": "Environment variables", "facts": context.facts(env_vars) if env_vars else
                [{"key": "(none of the relevant variables set)", "value": ""}]})
    return out


def _figure(key: str, fig) -> dict:
    return {"id": f"fig-{key}", "json": script_json(fig.to_json())}


def signoff_context(summary: dict, table: pd.DataFrame | None) -> dict:
    """Template data of signoff.html from the signoff summary (summary.json content) and the first input
    set's per-tensor table."""
    crit = [{"css": STATUS_CSS[c["status"]], "severity": c["status"], "subject": c["name"], "kind": c["kind"],
             "recommendation": c["message"], "evidence": context.facts(c.get("evidence") or {})}
            for c in summary["criteria"]]  # the card shape of the _macros card (toolkit.report.context findings)
    s = summary
    facts = {"policy": s.get("policy_path") or "(dict)", "policy_sha256": s.get("policy_sha256"),
             "model": s.get("model"), "model_sha256": s.get("model_sha256"),
             "config": s.get("config_path") or "(defaults + command line)",
             "config_sha256": (s.get("config_sha256") or {}).get("resolved"),
             "input sets": len(s.get("inputs") or []), "criteria": s["counts"]["criteria"],
             "failed": s["counts"]["failed"]}
    layers = figures.layer_error_figure(table if table is not None else pd.DataFrame())
    return {"title": f"npuscope signoff: {s.get('model_name', '')}",
            "verdict": {"label": s["verdict"], "css": STATUS_CSS.get(s["verdict"], "info"),
                        "ship": SHIP_TEXT.get(s["verdict"], "").format(failed=s["counts"]["failed"],
                                                                        criteria=s["counts"]["criteria"]),
                        "reasons": s.get("reasons") or ["every criterion passes"], "facts": context.facts(facts)},
            "criteria": crit, "policy_text": json.dumps(json_safe(s.get("policy")), indent=1),
            "inputs": [str(i) for i in s.get("inputs") or []],
            "environment": _env_sections(s.get("environment")), "figures": {"layers": _figure("layers", layers)},
            "generated": _now()}


def render_signoff(summary: dict, table: pd.DataFrame | None, out_dir: Path, filename: str = "signoff.html") -> Path:
    path = Path(out_dir) / filename
    html = environment().get_template("signoff.html.j2").render(**signoff_context(summary, table),
                                                                 plotly_src=plotly_src(out_dir))
    atomic_write_text(path, html)
    return path


def regress_context(rep: dict) -> dict:
    """Template data of regress.html from the regress report (regress.json content)."""
    def g(rows, cols):
        return context.grid(pd.DataFrame(rows), cols) if rows else {"columns": [], "rows": []}

    def paired(rows):  # baseline and new printed with the digits that tell them apart (console.show_pair)
        return [{**r, **dict(zip(("baseline", "new"), show_pair(r["baseline"], r["new"])))} for r in rows]

    return {"title": "npuscope regress",
            "verdict": {"label": rep["verdict"], "css": "fail" if rep["regressed"] else "pass",
                        "reasons": rep["reasons"] or ["no regression within the tolerances"],
                        "facts": context.facts({"baseline": rep["baseline"], "new": rep["new"],
                                                "tolerance": rep["tolerance"]})},
            "environment": g(rep["environment_changes"], ["key", "baseline", "new"]),
            "verdicts": g(rep["verdict_changes"], ["what", "baseline", "new", "regression"]),
            "newly_abnormal": g(rep["newly_abnormal"], ["TensorName", "NodeName", "OpType", "metrics"]),
            "deltas": g(paired(rep["layer_deltas"]), ["TensorName", "NodeName", "metric", "baseline", "new", "delta",
                                                       "regression"]),
            "improvements": rep.get("improvements", []),
            "newly_normal": g(rep.get("newly_normal", []), ["TensorName", "NodeName", "OpType", "metrics"]),
            "better": g(paired(rep.get("layer_improvements", [])), ["TensorName", "NodeName", "metric", "baseline",
                                                                    "new", "delta"]),
            "decisions": g(rep["decision_changes"], ["node", "what", "baseline", "new"]),
            "fusion": g(rep["fusion_changes"], ["pass", "level", "baseline", "new"]),
            "missing": g(rep["tensor_changes"], ["TensorName", "change"]),
            "generated": _now()}


def render_regress(rep: dict, out_dir: Path, filename: str = "regress.html") -> Path:
    path = Path(out_dir) / filename
    atomic_write_text(path, environment().get_template("regress.html.j2").render(**regress_context(rep)))
    return path
