"""``npuscope profile``: where the time of one inference goes, end to end, and which ops to move.

:func:`profile_model` compiles MODEL, runs it once in simulated NPU mode (measured host time per kernel),
prices every kernel with the cost model on a device profile, schedules one request over the streams, times
the user's pre/post-processing for real over N requests, builds the serial and pipelined end-to-end
schedules, runs the placement advisor and the finding rules. :func:`profile_command` writes the result:

- ``op_summary.csv`` / ``op_statistic.csv``: the profiler's columns (toolkit.profile.optable);
- ``kernel_costs.csv``: the cost table (toolkit.profile.cost.COST_COLUMNS);
- ``schedule.csv``: one request's events; ``e2e_schedule.csv``: the pipelined N-request events
  (toolkit.profile.schedule.EVENT_COLUMNS);
- ``breakdown.csv`` (Stage, Ms, TimeKind), ``latency.csv`` (Schedule, p50/p90/p99(ms), Throughput(req/s)),
  ``placement.csv`` (the advisor's steps);
- ``findings.json``, ``profile.json`` (summary), ``trace.json`` (Chrome trace of the pipelined schedule plus
  the measured kernel times), ``recommended_config.json`` (the config with the advisor's op_placement, when it
  moved something), ``profile.html``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.compiler.pipeline import Finding
from toolkit.config import Config
from toolkit.errors import UsageError
from toolkit.profile import advisor as adv
from toolkit.profile import e2e
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import DeviceProfile, load_device
from toolkit.profile.findings import ProfileData, run_rules
from toolkit.profile.schedule import device_graph, makespan_us, simulate
from toolkit.profile.summary import op_tables

REPORTS_DIR = Path("reports")
MAX_REQUESTS = 10000


def _noop(msg: str) -> None:
    pass


@dataclass
class ProfileResult:
    """Everything :func:`profile_model` computed (DataFrames as documented in the module docstring)."""

    model_name: str
    device: DeviceProfile
    compiled: object
    costs: pd.DataFrame
    events: pd.DataFrame
    e2e_events: dict[str, pd.DataFrame]
    latency: pd.DataFrame
    breakdown: pd.DataFrame
    op_summary: pd.DataFrame
    op_statistic: pd.DataFrame
    findings: list[Finding]
    kernel_ms: list[float]
    pre_ms: list[float]
    post_ms: list[float]
    advice: adv.Advice | None = None
    notes: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def device_ms(self) -> float:
        """Simulated time of one request's schedule (copies, NPU, CPU ops), ms."""
        return makespan_us(self.events) / 1e3

    @property
    def measured_ms(self) -> float:
        """Measured host wall time of the simulated run's kernels, ms (not a device time)."""
        return float(sum(self.kernel_ms))


# ---------------------------------------------------------------- steps
def _feeds(m, src, config, pre_fn, requests, inputs, seed, progress):
    """(feed for the run, measured pre ms per request)."""
    from toolkit.inputs import check_feed, input_specs
    from toolkit.source import prepare_inputs

    if pre_fn is None:
        feed = prepare_inputs(m, src, inputs, seed, None, config.input_shapes())
        progress(f"inputs: {feed.origin}")
        return feed.arrays, []
    progress(f"timing pre-processing over {requests} request(s)")
    specs = input_specs(m)
    timed = e2e.time_calls(pre_fn, [(i,) for i in range(requests)], "--pre")
    feed = e2e.as_feed(timed.value, [s.name for s in specs])
    check_feed(feed, specs, "--pre result")
    return feed, timed.ms


def device_config(m, config: Config, dev: DeviceProfile) -> Config:
    """``config`` with ``op_placement`` {op type: "CPU"} for the model's op types the device declares
    unsupported (``unsupported_ops``; these override the config's op-type entries)."""
    present = {n.op_type for n in m.graph.node} & set(dev.unsupported_ops)
    if not present or not adv.supports_placement(config):
        return config
    extra = {op: "CPU" for op in sorted(present)}
    return dataclasses.replace(config, op_placement={**(config.op_placement or {}), **extra})


def _run(m, config, feed, progress):
    """(Session, RunResult of a measured run after one warm-up run)."""
    from toolkit.engine import Session, shapes_of

    progress("compiling and building kernels")
    sess = Session(m, config, input_shapes=shapes_of(feed))
    progress(f"running {len(sess.plan.kernels)} kernels (warm-up + measured run)")
    sess.run(feed)
    return sess, sess.run(feed)


def _advise(m, sess, config, costs, device, fixed_us, progress):
    """Advice starting from everything on the NPU except the op types the device does not support."""
    progress("placement advisor")
    compiled, start_cfg = sess.compiled, config
    if adv.supports_placement(config):
        start = {k: v for k, v in (config.op_placement or {}).items() if k in device.unsupported_ops}
        start_cfg = dataclasses.replace(config, op_placement=start)
        if start != (config.op_placement or {}):
            compiled = adv.recompile(compiled, start_cfg, m)
            costs = kernel_costs(compiled.plan, compiled.model, device)
    advice = adv.advise(compiled.plan, costs, device, fixed_us=fixed_us)
    if compiled is not sess.compiled:
        advice.notes.append("started from everything on the NPU (the config's op_placement was set aside)")
    adv.verify(advice, compiled, start_cfg, device, fixed_us, m)
    advice.start_placement = dict(getattr(start_cfg, "op_placement", {}) or {})
    return advice


def _advice_finding(advice: adv.Advice) -> list[Finding]:
    if not advice.moved:
        return [Finding("info", "placement_advice", "no move", advice.to_dict(),
                        "no short op is faster on the CPU on this device profile; keep the placement")]
    gain = advice.baseline_us - (advice.verified_us if advice.verified_us is not None else advice.predicted_us)
    return [Finding("info" if gain <= 0 else "warning", "placement_advice", f"{len(advice.moved)} kernel(s)",
                    advice.to_dict(), f"set op_placement to {advice.op_placement} (see recommended_config.json): "
                    f"end-to-end latency {advice.baseline_us / 1e3:.3f} -> "
                    f"{(advice.baseline_us - gain) / 1e3:.3f} ms")]


def _profile_data(sess, costs, events, device, pre_ms, post_ms, config, user_config) -> ProfileData:
    """ProfileData of the run; ``user_config`` is the config as the user gave it (its op_placement "CPU" keys
    are user placements), ``config`` the one compiled (plus the device's unsupported_ops)."""
    plan = sess.plan
    producers = {t: k.name for k in plan.kernels for t in k.outputs}
    readers: dict[str, list[str]] = {}
    for k in plan.kernels:
        for t in k.inputs:
            readers.setdefault(t, []).append(k.name)
    user = {k for k, v in (getattr(user_config, "op_placement", None) or {}).items() if v == "CPU"}
    reasons = {str(f.evidence.get("kernel", f.subject)): str(f.evidence.get("reason", ""))
               for f in sess.compiled.findings if f.kind == "cpu_fallback"}
    return ProfileData(costs, events, device, pre_ms, post_ms, user, producers, readers,
                       {k.name: (k.inputs, k.outputs) for k in plan.kernels}, reasons, config)


def _e2e(graph, pre_ms, post_ms, requests):
    pre = pre_ms or [0.0] * requests
    post = post_ms or [0.0] * requests
    runs = {mode: e2e.run_e2e(graph.tasks, pre, post, mode) for mode in ("serial", "pipelined")}
    return runs, e2e.latency_table(runs)


# ---------------------------------------------------------------- the analysis
def profile_model(model: str | None, config: Config, *, device: str | None = None, pre: str | None = None,
                  post: str | None = None, requests: int = 20, advise: bool = True, inputs: str | None = None,
                  seed: int = 0, progress=_noop) -> ProfileResult:
    """Profile ``model`` (a path, sample or zoo name) end to end (module docstring).

    Raises:
        UsageError: ``requests`` outside 1..MAX_REQUESTS, or an empty ``pre``/``post``; ConfigError: bad device
        profile; InputError: bad --pre/--post file or a callable that raises (SystemExit included) / returns the
        wrong thing;
        ModelError: the model cannot be loaded or compiled.
    """
    from toolkit.ir.load import load_model
    from toolkit.source import resolve_model

    if not 1 <= int(requests) <= MAX_REQUESTS:
        raise UsageError(f"--requests {requests} is out of range; give 1..{MAX_REQUESTS}")
    dev = load_device(device)
    pre_fn = e2e.load_callable(pre, "--pre", "pre") if pre is not None else None
    post_fn = e2e.load_callable(post, "--post", "post") if post is not None else None
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    user_config, config = config, device_config(m, config, dev)
    feed, pre_ms = _feeds(m, src, config, pre_fn, requests, inputs, seed, progress)
    sess, res = _run(m, config, feed, progress)
    post_ms = e2e.time_calls(post_fn, [(res.outputs,)] * requests, "--post").ms if post_fn else []
    progress(f"cost model and schedule on device {dev.name}")
    costs = kernel_costs(sess.plan, sess.compiled.model, dev)
    graph = device_graph(sess.plan, costs, dev)
    events = simulate(graph.tasks)
    runs, latency = _e2e(graph, pre_ms, post_ms, requests)
    fixed_us = (float(np.mean(pre_ms)) if pre_ms else 0.0) * 1e3 + (float(np.mean(post_ms)) if post_ms else 0.0) * 1e3
    advice = _advise(m, sess, config, costs, dev, fixed_us, progress) if advise else None
    findings = run_rules(_profile_data(sess, costs, events, dev, pre_ms, post_ms, config, user_config))
    findings += _advice_finding(advice) if advice is not None else []
    summary, statistic = op_tables(events, costs, res.kernel_ms, pre_ms, post_ms, src.name, dev.name)
    meta = {"model": str(src.path), "model_name": src.name, "device": dev.name, "requests": requests,
            "pre": pre or "", "post": post or "", "notes": graph.notes}
    return ProfileResult(src.name, dev, sess.compiled, costs, events, runs, latency,
                         e2e.breakdown(events, pre_ms, post_ms), summary, statistic, findings, res.kernel_ms, pre_ms,
                         post_ms, advice, graph.notes, meta)


# ---------------------------------------------------------------- output
def summary_lines(r: ProfileResult) -> list[str]:
    """Terminal lines: simulated vs measured time, the breakdown, latency/throughput, advice, findings."""
    n_npu = int((r.costs["Stream"] == "npu").sum())
    lines = [f"device {r.device.name}: simulated schedule of one request {r.device_ms:.3f} ms ({len(r.costs)} kernels, "
             f"{n_npu} on the NPU) | measured host time of the simulated run {r.measured_ms:.3f} ms "
             "(onnxruntime kernels on this CPU, not a device time)"]
    lines.append("breakdown per request: " + " | ".join(f"{s} {ms:.3f} ms ({k})" for s, ms, k in
                                                        r.breakdown.itertuples(index=False)))
    for row in r.latency.itertuples(index=False):
        lines.append(f"{row[0]:>9}: latency p50 {row[1]:.3f} / p90 {row[2]:.3f} / p99 {row[3]:.3f} ms, "
                     f"throughput {row[4]:.1f} req/s over {r.meta['requests']} request(s)")
    if r.advice is not None:
        a = r.advice
        ver = "not verified" if a.verified_us is None else f"verified {a.verified_us / 1e3:.3f} ms"
        lines.append(f"placement advisor: {len(a.moved)} kernel(s) to the CPU; latency {a.baseline_us / 1e3:.3f} ms; "
                     f"what-if {a.predicted_us / 1e3:.3f} ms, {ver}")
        lines += [f"placement advisor: {n}" for n in a.notes]
    lines += [f"note: {n}" for n in r.notes]
    warn = [f for f in r.findings if f.severity in ("warning", "error")]
    lines += [f"finding [{f.kind}] {f.subject}: {f.recommendation}" for f in warn[:8]]
    return lines


def _csv(folder: Path, name: str, df: pd.DataFrame) -> str:
    from toolkit.report.csvjson import atomic_write_text, to_csv_safe

    atomic_write_text(folder / name, to_csv_safe(df, index=False))
    return name


def _json(folder: Path, name: str, data) -> str:
    import json

    from toolkit.report.csvjson import atomic_write_text, json_safe

    atomic_write_text(folder / name, json.dumps(json_safe(data), indent=1, allow_nan=False))
    return name


def _measured_frame(r: ProfileResult) -> pd.DataFrame:
    return pd.DataFrame({"Kernel": r.costs["Kernel"], "OpType": r.costs["OpType"],
                         "HostUs": [ms * 1e3 for ms in r.kernel_ms]})


def write_outputs(r: ProfileResult, folder: Path, config: Config, html: bool = True) -> dict[str, str]:
    """Write every file of the module docstring into ``folder``; returns {key: file name}."""
    from toolkit.report.csvjson import atomic_write_text
    from toolkit.profile.trace import trace_json

    files = {"op_summary": _csv(folder, "op_summary.csv", r.op_summary),
             "op_statistic": _csv(folder, "op_statistic.csv", r.op_statistic),
             "kernel_costs": _csv(folder, "kernel_costs.csv", r.costs),
             "schedule": _csv(folder, "schedule.csv", r.events),
             "e2e_schedule": _csv(folder, "e2e_schedule.csv", r.e2e_events["pipelined"]),
             "breakdown": _csv(folder, "breakdown.csv", r.breakdown),
             "latency": _csv(folder, "latency.csv", r.latency),
             "findings": _json(folder, "findings.json", [f.to_dict() for f in r.findings])}
    if r.advice is not None:
        files["placement"] = _csv(folder, "placement.csv", r.advice.steps)
        if r.advice.moved and adv.supports_placement(config):
            merged = {**r.advice.start_placement, **r.advice.op_placement}
            files["recommended_config"] = _json(folder, "recommended_config.json",
                                                dataclasses.replace(config, op_placement=merged).to_dict())
    stages = [st for st, ms in (("pre", r.pre_ms), ("post", r.post_ms)) if ms]
    atomic_write_text(folder / "trace.json", trace_json(r.e2e_events["pipelined"], measured=_measured_frame(r),
                                                        title=f"{r.model_name} on {r.device.name}", costs=r.costs,
                                                        stages=stages))
    files["trace"] = "trace.json"
    files["summary"] = _json(folder, "profile.json", _summary_json(r, files))
    if html:
        files["report"] = _render(r, folder)
    return files


def _summary_json(r: ProfileResult, files: dict) -> dict:
    return {**r.meta, "device_profile": r.device.to_dict(), "simulated_device_ms": r.device_ms,
            "measured_host_ms": r.measured_ms, "latency": r.latency, "breakdown": r.breakdown,
            "advice": r.advice.to_dict() if r.advice is not None else None, "files": dict(files)}


def _render(r: ProfileResult, folder: Path) -> str:
    from toolkit.report.profile_html import render_profile

    meta = {**r.meta, "simulated_device_ms": r.device_ms, "measured_host_ms": r.measured_ms,
            "device_profile": r.device.to_dict(),
            "advice": r.advice.to_dict() if r.advice is not None else None}
    path = render_profile(folder, title=f"{r.model_name} on {r.device.name}", op_summary=r.op_summary,
                          findings=r.findings, meta=meta, breakdown=r.breakdown, latency=r.latency,
                          placement=r.advice.steps if r.advice is not None else None)
    return Path(path).name


def profile_command(model: str | None, config: Config, *, device: str | None = None, pre: str | None = None,
                    post: str | None = None, requests: int = 20, advise: bool = True, inputs: str | None = None,
                    seed: int = 0, out: str | None = None, html: bool = True, progress=_noop) -> dict:
    """Run :func:`profile_model` and write its files (module docstring) into a new output folder.

    Returns:
        {"summary": terminal lines, "out": folder, "files": {key: file name}, "result": ProfileResult}.
    """
    from toolkit.artifacts import output_dir

    stem = Path(str(model)).stem if model else "sample"
    with output_dir(out, REPORTS_DIR, f"{stem}-profile") as folder:
        r = profile_model(model, config, device=device, pre=pre, post=post, requests=requests, advise=advise,
                          inputs=inputs, seed=seed, progress=progress)
        progress("writing the profile")
        files = write_outputs(r, folder, config, html)
    lines = summary_lines(r)
    lines.append(f"report: {(folder / files.get('report', 'profile.json')).resolve()}")
    return {"summary": lines, "out": folder, "files": files, "result": r}
