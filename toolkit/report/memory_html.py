"""memory.html of ``npuscope memcheck``: memory map, live bytes over time, conflicts, largest tensors,
per-policy totals. Same conventions as the main report (toolkit.report.html): jinja2 with autoescape,
plotly.js inlined (opens offline), model-derived names escaped in figures (toolkit.report.figures.esc)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from toolkit.core.csvjson import atomic_write_text
from toolkit.core.text import human_bytes
from toolkit.memory.lifetimes import lifetimes
from toolkit.report.context import grid
from toolkit.report.figures import esc
from toolkit.report.html import environment, plotly_src, script_json

TEMPLATE = "memory.html.j2"
OK_COLOUR, BAD_COLOUR = "#1f77b4", "#d62728"


def memory_map_figure(plan, conflicts) -> go.Figure:
    """Time (kernel step) x address rectangles, one per arena tensor (true lifetimes); tensors in a conflict
    (written or victim) red; hover: name, bytes, offset, steps."""
    life = lifetimes(plan.kernels, plan.graph_inputs, plan.graph_outputs)
    bad = {c.victim for c in conflicts} | {c.written for c in conflicts}
    fig = go.Figure()
    for flag, colour, label in ((False, OK_COLOUR, "tensor"), (True, BAD_COLOUR, "in a conflict")):
        ts = [t for t in plan.tensors.values() if t.storage == "arena" and t.name in life and (t.name in bad) == flag]
        if not ts:
            continue
        first = [life[t.name].first for t in ts]
        dur = [life[t.name].last - life[t.name].first + 1 for t in ts]
        custom = [[esc(t.name), t.nbytes, t.offset, life[t.name].first, life[t.name].last, esc(t.alias_of or "")]
                  for t in ts]
        fig.add_trace(go.Bar(orientation="h", base=first, x=dur, y=[t.offset + t.nbytes / 2 for t in ts],
                             width=[max(t.nbytes, 1) for t in ts], name=label, customdata=custom,
                             marker=dict(color=colour, opacity=0.55 if not flag else 0.8,
                                         line=dict(width=0.5, color="#333")),
                             hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]} bytes at offset "
                                           "%{customdata[2]}<br>steps %{customdata[3]}..%{customdata[4]}"
                                           "<br>alias of %{customdata[5]}<extra></extra>"))
    fig.update_layout(barmode="overlay", height=520, xaxis_title="kernel step", yaxis_title="arena offset (bytes)",
                      margin=dict(l=80, r=20, t=30, b=50), hovermode="closest")
    return fig


def live_bytes_figure(plan) -> go.Figure:
    """Bytes live at each step (aliased tensors counted once) against the arena size and the lower bound."""
    life = lifetimes(plan.kernels, plan.graph_inputs, plan.graph_outputs)
    arena = [t for t in plan.tensors.values() if t.storage == "arena" and t.name in life]
    steps = list(range(-1, len(plan.kernels) + 1))
    live = [sum(n for _, n in {(t.offset, t.nbytes) for t in arena if life[t.name].first <= s <= life[t.name].last})
            for s in steps]
    fig = go.Figure(go.Scatter(x=steps, y=live, mode="lines", name="live bytes", line=dict(shape="hv")))
    for y, name, dash in ((plan.arena_bytes, "arena size", "solid"), (plan.lower_bound_bytes, "lower bound", "dash")):
        fig.add_trace(go.Scatter(x=[steps[0], steps[-1]], y=[y, y], mode="lines", name=name,
                                 line=dict(dash=dash, color="#888" if dash == "dash" else "#d62728", width=1)))
    fig.update_layout(height=320, xaxis_title="kernel step", yaxis_title="bytes", margin=dict(l=80, r=20, t=30, b=50))
    return fig


def _kv(pairs) -> list[dict]:
    return [{"key": k, "value": v} for k, v in pairs]


def build_context(model_name: str, result, totals: list[dict], files: dict) -> dict:
    plan, chk = result.check.plan, result.check
    largest = sorted((t for t in plan.tensors.values() if t.storage == "arena"), key=lambda t: -t.nbytes)[:15]
    ltab = pd.DataFrame([{"Tensor": t.name, "Bytes": t.nbytes, "Size": human_bytes(t.nbytes), "Offset": t.offset,
                          "First": t.first, "Last": t.last, "AliasOf": t.alias_of or ""} for t in largest])
    ttab = pd.DataFrame([{"Policy": r["policy"], "Arena": human_bytes(r["arena_bytes"]), "ArenaBytes": r["arena_bytes"],
                          "LowerBoundBytes": r["lower_bound_bytes"],
                          "Ratio": f"{r['arena_bytes'] / r['lower_bound_bytes']:.3f}" if r["lower_bound_bytes"] else ""}
                         for r in totals])
    etab = pd.DataFrame([e.to_dict() for e in chk.events[:200]])
    div = chk.divergence
    summary = [("model", model_name), ("policy", plan.config.get("memory_reuse", "")),
               ("arena", f"{human_bytes(plan.arena_bytes)} ({plan.arena_bytes:,} bytes)"),
               ("lower bound", f"{human_bytes(plan.lower_bound_bytes)} ({plan.lower_bound_bytes:,} bytes)"),
               ("static conflicts", str(len(chk.conflicts))), ("dynamic events", str(len(chk.events))),
               ("first divergent tensor (reuse off vs plan)",
                "none" if div is None else f"'{div['tensor']}' at step {div['step']} (kernel '{div['kernel']}')"
                + (f", explained by '{div['conflict']['writer']}' overwriting '{div['conflict']['victim']}'"
                   if div.get("conflict") else ""))]
    if chk.error:
        summary.append(("kernel failure under poisoned memory", chk.error))
    if result.fix:
        summary.append(("fix", f"disable_reuse = {result.fix['disable_reuse']}; verified: {result.fix.get('verified')}"))
    figs = {"map": memory_map_figure(plan, chk.conflicts), "live": live_bytes_figure(plan)}
    return {"title": f"npuscope memcheck: {model_name}", "summary": _kv(summary), "clean": chk.clean,
            "conflicts": grid(result.conflicts_table()), "events": grid(etab if not etab.empty else None),
            "largest": grid(ltab), "totals": grid(ttab), "files": sorted(files.values()),
            "figures": {k: {"id": f"fig-{k}", "json": script_json(f.to_json())} for k, f in figs.items()}}


def render_memory_report(model_name: str, result, totals: list[dict], out_dir: Path, files: dict) -> Path:
    """Write ``out_dir/memory.html`` and return its path."""
    ctx = build_context(model_name, result, totals, files)
    html = environment().get_template(TEMPLATE).render(**ctx, plotly_src=plotly_src(out_dir))
    path = Path(out_dir) / "memory.html"
    atomic_write_text(path, html)
    return path
