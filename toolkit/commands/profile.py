"""``npuscope profile``: where the time of one inference goes, end to end, and which ops to move.

:func:`profile_model` runs N requests. Request i: ``pre(i)`` (timed for real) gives its feed (without --pre,
every request uses the usual feed: --inputs, the model's realistic input or seeded random data); the feed runs
in simulated NPU mode on the plan compiled for *its* shapes, and ``post`` (timed for real) gets *that
request's* outputs (a fresh copy, so a post that edits them in place cannot affect another request). One plan
is compiled per distinct feed shape (``name:d0,d1,...`` per input, joined with ';'), the first time the shape
is seen, with one warm-up and one measured run (measured host time per kernel); repeated shapes reuse it, and a
feed equal to the previous one of its plan reuses its outputs instead of running again. More than
:data:`toolkit.profile.requests.MAX_PLANS` distinct shapes are refused (InputError: pad to a few fixed shapes in pre-processing).

Every plan is priced with the cost model on a device profile and one request is scheduled over the streams;
the serial and pipelined N-request schedules give request i the device tasks of its own plan. The *main plan*
is the one most requests ran (the first seen on a tie): its cost table, schedule, measured kernel times and
placement advice are the headline figures (``ProfileResult.costs`` etc.); the finding rules run on every plan
(with several plans each finding's evidence lists the ``feed_shapes`` it was found on). :func:`profile_command`
writes the result:

- ``op_summary.csv`` / ``op_statistic.csv``: the profiler's columns (toolkit.profile.optable), integer columns
  (Task ID, Stream ID, Block Dim, Count) written as integers; simulated and measured rows of every plan (with
  several plans, Source ends in ``, feed <shapes>``);
- ``kernel_costs.csv``: the cost table of every plan (toolkit.profile.cost.COST_COLUMNS, then FeedShapes);
- ``schedule.csv``: one request's events per plan (then FeedShapes); ``e2e_schedule.csv``: the pipelined
  N-request events (toolkit.profile.schedule.EVENT_COLUMNS);
- ``requests.csv``: one row per request (:data:`REQUEST_COLUMNS`): its FeedShapes and Plan, measured Pre(ms)
  / Post(ms), the simulated Device(ms) of its plan, its serial and pipelined latency (ms);
- ``breakdown.csv`` (Stage, Ms, TimeKind; the mean over every request), ``latency.csv`` (Schedule,
  p50/p90/p99(ms), Throughput(req/s)), ``placement.csv`` (the advisor's steps);
- ``findings.json``, ``profile.json`` (summary), ``trace.json`` (Chrome trace of the pipelined schedule plus
  the measured kernel times), ``recommended_config.json`` (the config with the advisor's op_placement, when it
  moved something), ``profile.html``;
- with ``--device-profile`` (toolkit.profile.device_fit): ``attribution.csv`` (one row per kernel:
  toolkit.profile.attribution.KERNEL_COLUMNS), ``attribution_unmatched.csv`` (device rows no kernel matched,
  with the reason), ``calibration.csv`` / ``calibration_errors.csv`` / ``calibration_units.csv``
  (toolkit.profile.calibrate), ``calibrated_device.json`` (a device file for ``--device`` and a policy's
  ``[latency] device``), ``whatif.csv`` (toolkit.profile.whatif.WHATIF_COLUMNS) and
  ``calibrated_recommended_config.json`` (the advisor's op_placement on the calibrated profile, when it moves
  something).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.commands.common import load_config
from toolkit.config.schema import Config
from toolkit.core.artifacts import check_out, output_dir
from toolkit.core.csvjson import atomic_write_text, json_safe, to_csv_safe
from toolkit.core.errors import UsageError
from toolkit.core.records import Finding
from toolkit.gears.spec import label as gear_label
from toolkit.gears.spec import parse_gears
from toolkit.ir.load import load_model
from toolkit.profile import advisor as adv
from toolkit.profile import e2e
from toolkit.profile.budget import DEFAULT_REQUESTS
from toolkit.profile.calibrate import device_json
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import DeviceProfile, load_device
from toolkit.profile.device_fit import DeviceFit, fit_device
from toolkit.profile.findings import ProfileData, run_rules
from toolkit.profile.optable import integer_columns
from toolkit.profile.requests import PlanRun, Requests, run_requests
from toolkit.profile.schedule import device_graph, makespan_us, simulate
from toolkit.profile.summary import op_tables
from toolkit.profile.trace import trace_json
from toolkit.report.profile_html import render_profile
from toolkit.source import resolve_model

REPORTS_DIR = Path("reports")
MAX_REQUESTS = 10000
#: Share of matched device-profile rows held out of the calibration when --holdout is not given.
DEFAULT_HOLDOUT = 0.25
REQUEST_COLUMNS = ["Request", "FeedShapes", "Plan", "Pre(ms)", "Device(ms)", "Post(ms)", "Serial latency(ms)",
                   "Pipelined latency(ms)"]


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
    #: every compiled plan (PlanRun), in first-seen order; one per distinct feed shape
    plans: list = field(default_factory=list)
    #: one row per request (REQUEST_COLUMNS: which feed shape / plan it ran, its times)
    requests: pd.DataFrame | None = None
    #: attribution, calibration and what-ifs of ``--device-profile`` (toolkit.profile.device_fit), or None
    fit: DeviceFit | None = None

    @property
    def device_ms(self) -> float:
        """Simulated time of one request's schedule (copies, NPU, CPU ops), ms."""
        return makespan_us(self.events) / 1e3

    @property
    def measured_ms(self) -> float:
        """Measured host wall time of the simulated run's kernels, ms (not a device time)."""
        return float(sum(self.kernel_ms))


def device_config(m, config: Config, dev: DeviceProfile) -> Config:
    """``config`` with ``op_placement`` {op type: "CPU"} for the model's op types the device declares
    unsupported (``unsupported_ops``; these override the config's op-type entries)."""
    present = {n.op_type for n in m.graph.node} & set(dev.unsupported_ops)
    if not present or not adv.supports_placement(config):
        return config
    extra = {op: "CPU" for op in sorted(present)}
    return dataclasses.replace(config, op_placement={**(config.op_placement or {}), **extra})


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


def _price(plans: dict[str, PlanRun], dev: DeviceProfile) -> None:
    """Fill every plan's cost table, device task graph and one request's simulated schedule."""
    for p in plans.values():
        p.costs = kernel_costs(p.sess.plan, p.sess.compiled.model, dev)
        p.graph = device_graph(p.sess.plan, p.costs, dev)
        p.events = simulate(p.graph.tasks)


def _e2e(runs: Requests, requests: int):
    """(serial and pipelined N-request events, latency table): request i runs the device tasks of its plan."""
    pre = runs.pre_ms or [0.0] * requests
    post = runs.post_ms or [0.0] * requests
    first = runs.plans[runs.plan_of[0]].graph.tasks
    devices = [runs.plans[label].graph.tasks for label in runs.plan_of] if len(runs.plans) > 1 else None
    events = {mode: e2e.run_e2e(first, pre, post, mode, devices) for mode in ("serial", "pipelined")}
    return events, e2e.latency_table(events)


def _breakdown(runs: Requests, main: PlanRun, serial: pd.DataFrame, requests: int) -> pd.DataFrame:
    """Per-request stage times: one request's schedule of the single plan, or, with several plans, the mean over
    the N requests of the serial schedule (each request on its own plan)."""
    if len(runs.plans) == 1:
        return e2e.breakdown(main.events, runs.pre_ms, runs.post_ms)
    device = serial[~serial["Stage"].isin(["pre", "post"])]
    return e2e.breakdown(device, runs.pre_ms, runs.post_ms, requests=requests)


def _findings(runs: Requests, order: list[PlanRun], dev, config, user_config) -> list[Finding]:
    """The finding rules on every plan (its own requests' pre/post times). With several plans each finding's
    evidence gets ``feed_shapes``: the labels of the plans it was found on (an identical finding is listed
    once)."""
    if len(order) == 1:
        p = order[0]
        return run_rules(_profile_data(p.sess, p.costs, p.events, dev, runs.pre_ms, runs.post_ms, config,
                                       user_config))
    out: list[Finding] = []
    seen: dict[tuple, Finding] = {}
    for p in order:
        pre = [runs.pre_ms[i] for i in p.requests] if runs.pre_ms else []
        post = [runs.post_ms[i] for i in p.requests] if runs.post_ms else []
        for f in run_rules(_profile_data(p.sess, p.costs, p.events, dev, pre, post, config, user_config)):
            key = (f.kind, f.subject, f.recommendation)
            if key in seen:
                seen[key].evidence["feed_shapes"].append(p.label)
                continue
            f.evidence["feed_shapes"] = [p.label]
            seen[key] = f
            out.append(f)
    return out


def requests_table(runs: Requests, order: list[PlanRun], events: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per request (:data:`REQUEST_COLUMNS`): Request, FeedShapes (its plan's label), Plan (index of the
    plan in first-seen order), Pre(ms) / Post(ms) measured (NaN when not given), Device(ms) the simulated
    one-request schedule of its plan, Serial latency(ms) / Pipelined latency(ms) from the N-request schedules."""
    index = {p.label: i for i, p in enumerate(runs.plans.values())}
    n = len(runs.plan_of)
    lat = {m: e2e.request_latencies_ms(ev) for m, ev in events.items()}
    return pd.DataFrame({
        "Request": range(n), "FeedShapes": runs.plan_of, "Plan": [index[lb] for lb in runs.plan_of],
        "Pre(ms)": runs.pre_ms or [float("nan")] * n,
        "Device(ms)": [runs.plans[lb].device_ms for lb in runs.plan_of],
        "Post(ms)": runs.post_ms or [float("nan")] * n,
        "Serial latency(ms)": lat["serial"], "Pipelined latency(ms)": lat["pipelined"]}, columns=REQUEST_COLUMNS)


def _shapes_meta(runs: Requests) -> list[dict]:
    return [{"feed_shapes": p.label, "plan": i, "requests": len(p.requests), "first_request": p.requests[0],
             "simulated_device_ms": p.device_ms} for i, p in enumerate(runs.plans.values())]


# ---------------------------------------------------------------- the analysis
def profile_model(model: str | None, config: Config, *, device: str | None = None, pre: str | None = None,
                  post: str | None = None, requests: int = DEFAULT_REQUESTS, advise: bool = True,
                  inputs: str | None = None, seed: int = 0, val_range: str | None = None,
                  device_profile: str | None = None, fusion_ops: str | None = None,
                  holdout: float | None = None, whatif_keep_dtype: list[str] | None = None,
                  whatif_gears: str | None = None, progress=_noop) -> ProfileResult:
    """Profile ``model`` (a path, sample or zoo name) end to end (module docstring).

    Every request runs the plan compiled for its own feed shapes (one plan per distinct shape, at most
    :data:`toolkit.profile.requests.MAX_PLANS`) and ``post`` gets that request's outputs. The headline tables (``costs``, ``events``,
    ``kernel_ms``, the advisor) are those of the main plan: the one most requests ran (the first seen on a tie);
    ``plans`` holds every plan and ``requests`` says which plan each request ran.

    With ``device_profile`` (a real device's op_summary_*.csv or kernel_details.csv; ``fusion_ops`` its
    fusion_op_*.csv) the main plan is attributed, the device profile calibrated (``holdout`` share held out,
    default :data:`DEFAULT_HOLDOUT`; given without ``device_profile``: UsageError,
    ``seed``) and the what-ifs predicted on the calibrated profile (toolkit.profile.device_fit): the advisor's
    recommendation (when ``advise``), ``whatif_keep_dtype`` entries, and every gear of ``whatif_gears`` (a config
    file whose input_shape has -1 dims and whose dynamic_batch_size / dynamic_dims give the gears, docs/gears.md).

    Raises:
        UsageError: ``requests`` outside 1..MAX_REQUESTS, or an empty ``pre``/``post``; ConfigError: bad device
        profile; InputError: bad --pre/--post file or a callable that raises (SystemExit included) / returns the
        wrong thing, or more than MAX_PLANS distinct feed shapes;
        ModelError: the model cannot be loaded or compiled. InputError too for an unreadable device profile or
        too few matched rows to calibrate; UsageError for ``holdout`` outside [0, 0.9].
    """
    if holdout is not None and not device_profile:
        raise UsageError(f"--holdout {holdout:g} is the share of --device-profile rows held out of the calibration; "
                         "give --device-profile too, or leave --holdout out")
    holdout = DEFAULT_HOLDOUT if holdout is None else holdout
    if not 0 <= holdout <= 0.9:
        raise UsageError(f"--holdout {holdout} is out of range; give 0..0.9 (the share of matched rows held out)")
    if fusion_ops and not device_profile:
        raise UsageError("--fusion-ops needs --device-profile (the profile whose fused ops it resolves)")
    if (whatif_keep_dtype or whatif_gears) and not device_profile:
        raise UsageError("--whatif-keep-dtype and --whatif-gears need --device-profile (what-ifs are predicted on the "
                         "calibrated profile)")
    if not 1 <= int(requests) <= MAX_REQUESTS:
        raise UsageError(f"--requests {requests} is out of range; give 1..{MAX_REQUESTS}")
    if pre is not None and inputs is not None:
        raise UsageError("--pre and --inputs both say what the requests are fed; give --pre (timed "
                         "pre-processing) or --inputs (an .npz, a folder of them or a loader file.py:function)")
    dev = load_device(device)
    gears = _gears(whatif_gears) if whatif_gears else None
    pre_fn = e2e.load_callable(pre, "--pre", "pre") if pre is not None else None
    post_fn = e2e.load_callable(post, "--post", "post") if post is not None else None
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    user_config, config = config, device_config(m, config, dev)
    runs = run_requests(m, src, config, pre_fn, post_fn, requests, inputs, seed, progress, val_range)
    pre_ms, post_ms = runs.pre_ms, runs.post_ms
    progress(f"cost model and schedule on device {dev.name}")
    _price(runs.plans, dev)
    main = max(runs.plans.values(), key=lambda p: len(p.requests))
    order = [main] + [p for p in runs.plans.values() if p is not main]
    events, latency = _e2e(runs, requests)
    fixed_us = (float(np.mean(pre_ms)) if pre_ms else 0.0) * 1e3 + (float(np.mean(post_ms)) if post_ms else 0.0) * 1e3
    advice = _advise(m, main.sess, config, main.costs, dev, fixed_us, progress) if advise else None
    if advice is not None and len(order) > 1:
        advice.notes.append(f"advice computed on the plan of feed {main.label} ({len(main.requests)} of {requests} "
                            "requests)")
    findings = _findings(runs, order, dev, config, user_config)
    findings += _advice_finding(advice) if advice is not None else []
    per_plan = [(p.events, p.costs, p.kernel_ms, p.label if len(order) > 1 else "") for p in runs.plans.values()]
    summary, statistic = op_tables(None, None, None, pre_ms, post_ms, src.name, dev.name, plans=per_plan)
    notes = list(dict.fromkeys(n for p in order for n in p.graph.notes))
    meta = {"model": str(src.path), "model_name": src.name, "device": dev.name, "requests": requests,
            "pre": pre or "", "post": post or "", "notes": notes, "main_feed_shapes": main.label,
            "feed_shapes": _shapes_meta(runs)}
    fit = None
    if device_profile:
        fit = fit_device(device_profile, main.costs, main.sess.compiled, config, m, dev, fusion_ops=fusion_ops,
                         holdout=holdout, seed=seed, advise=advise, keep_dtype=whatif_keep_dtype,
                         gears=gears, fixed_us=fixed_us, progress=progress)
        meta["calibrated_device"] = fit.calibration.device.name
    return ProfileResult(src.name, dev, main.sess.compiled, main.costs, main.events, events, latency,
                         _breakdown(runs, main, events["serial"], requests), summary, statistic, findings,
                         main.kernel_ms, pre_ms, post_ms, advice, notes, meta, list(runs.plans.values()),
                         requests_table(runs, order, events), fit)


def _gears(path: str) -> dict:
    """{gear label: {input: shape}} of the gears in config file ``path`` (toolkit.gears.spec).

    Raises:
        ConfigError: an unreadable config or bad gears; UsageError: the file sets no gears."""
    spec = parse_gears(load_config(path), where=f"--whatif-gears '{path}'")
    if spec is None:
        raise UsageError(f"--whatif-gears '{path}' sets no gears; give input_shape with -1 dims and "
                         "dynamic_batch_size or dynamic_dims (docs/gears.md)")
    return {gear_label(g): spec.shapes(g) for g in spec.gears}


# ---------------------------------------------------------------- output
def summary_lines(r: ProfileResult) -> list[str]:
    """Terminal lines: simulated vs measured time, the breakdown, latency/throughput, advice, findings."""
    n_npu = int((r.costs["Stream"] == "npu").sum())
    lines = [f"device {r.device.name}: simulated schedule of one request {r.device_ms:.3f} ms ({len(r.costs)} kernels, "
             f"{n_npu} on the NPU) | measured host time of the simulated run {r.measured_ms:.3f} ms "
             "(onnxruntime kernels on this CPU, not a device time)"]
    lines += _shape_lines(r)
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
    lines += r.fit.summary_lines() if r.fit is not None else []
    warn = [f for f in r.findings if f.severity in ("warning", "error")]
    lines += [f"finding [{f.kind}] {f.subject}: {f.recommendation}" for f in warn[:8]]
    return lines


def _shape_lines(r: ProfileResult) -> list[str]:
    """Which feed shapes the requests had: one line for one shape, else one line per shape (its plan's
    simulated schedule) and a pointer to requests.csv."""
    shapes = r.meta.get("feed_shapes") or []
    n = r.meta.get("requests", 0)
    if len(shapes) <= 1:
        return [f"feed {shapes[0]['feed_shapes']} for all {n} request(s)"] if shapes else []
    lines = [f"feed shapes: {len(shapes)} distinct over {n} requests, one plan compiled per shape; each request "
             "ran its own plan and post-processing got its own outputs (per request: requests.csv); the schedule "
             f"line above and the advisor use the main plan, feed {r.meta.get('main_feed_shapes')}; breakdown "
             "and latency cover every request"]
    lines += [f"  feed {s['feed_shapes']}: {s['requests']} request(s) (first: {s['first_request']}), simulated "
              f"schedule of one request {s['simulated_device_ms']:.3f} ms" for s in shapes]
    return lines


def _csv(folder: Path, name: str, df: pd.DataFrame) -> str:
    atomic_write_text(folder / name, to_csv_safe(df, index=False))
    return name


def _json(folder: Path, name: str, data) -> str:
    import json

    atomic_write_text(folder / name, json.dumps(json_safe(data), indent=1, allow_nan=False))
    return name


def _plans(r: ProfileResult) -> list:
    """The result's plans (a hand-built ProfileResult without ``plans``: its headline tables as one plan)."""
    if r.plans:
        return r.plans
    return [PlanRun(r.meta.get("main_feed_shapes", ""), None, r.kernel_ms, costs=r.costs, events=r.events)]


def _measured_frame(r: ProfileResult) -> pd.DataFrame:
    """Kernel, OpType, HostUs of every plan's measured run, plan after plan (the order of op_summary.csv)."""
    return pd.concat([pd.DataFrame({"Kernel": p.costs["Kernel"], "OpType": p.costs["OpType"],
                                    "HostUs": [ms * 1e3 for ms in p.kernel_ms]}) for p in _plans(r)],
                     ignore_index=True)


def _per_plan(r: ProfileResult, attr: str) -> pd.DataFrame:
    """Every plan's ``costs`` or ``events`` one after the other, with a last column FeedShapes (the plan's
    label)."""
    return pd.concat([getattr(p, attr).assign(FeedShapes=p.label) for p in _plans(r)], ignore_index=True)


def _op_csv(folder: Path, name: str, df: pd.DataFrame) -> str:
    return _csv(folder, name, integer_columns(df))


def write_outputs(r: ProfileResult, folder: Path, config: Config, html: bool = True) -> dict[str, str]:
    """Write every file of the module docstring into ``folder``; returns {key: file name}."""
    files = {"op_summary": _op_csv(folder, "op_summary.csv", r.op_summary),
             "op_statistic": _op_csv(folder, "op_statistic.csv", r.op_statistic),
             "kernel_costs": _csv(folder, "kernel_costs.csv", _per_plan(r, "costs")),
             "schedule": _csv(folder, "schedule.csv", _per_plan(r, "events")),
             "e2e_schedule": _csv(folder, "e2e_schedule.csv", r.e2e_events["pipelined"]),
             "breakdown": _csv(folder, "breakdown.csv", r.breakdown),
             "latency": _csv(folder, "latency.csv", r.latency),
             "findings": _json(folder, "findings.json", [f.to_dict() for f in r.findings])}
    if r.requests is not None:
        files["requests"] = _csv(folder, "requests.csv", r.requests)
    if r.advice is not None:
        files["placement"] = _csv(folder, "placement.csv", r.advice.steps)
        if r.advice.moved and adv.supports_placement(config):
            merged = {**r.advice.start_placement, **r.advice.op_placement}
            files["recommended_config"] = _json(folder, "recommended_config.json",
                                                dataclasses.replace(config, op_placement=merged).to_dict())
    stages = [st for st, ms in (("pre", r.pre_ms), ("post", r.post_ms)) if ms]
    costs = _per_plan(r, "costs").drop_duplicates("Kernel")  # Task Type and views by kernel name
    atomic_write_text(folder / "trace.json", trace_json(r.e2e_events["pipelined"], measured=_measured_frame(r),
                                                        title=f"{r.model_name} on {r.device.name}", costs=costs,
                                                        stages=stages))
    files["trace"] = "trace.json"
    if r.fit is not None:
        files.update(_fit_files(r.fit, folder, config))
    files["summary"] = _json(folder, "profile.json", _summary_json(r, files))
    if html:
        files["report"] = _render(r, folder)
    return files


def _fit_files(fit: DeviceFit, folder: Path, config: Config) -> dict[str, str]:
    """The --device-profile files (module docstring)."""
    atomic_write_text(folder / "calibrated_device.json", device_json(fit.calibration.device))
    files = {name.removesuffix(".csv"): _csv(folder, name, df) for name, df in fit.tables().items()}
    files["calibrated_device"] = "calibrated_device.json"
    placement = fit.placement()
    if placement and adv.supports_placement(config):
        merged = {**(config.op_placement or {}), **placement}
        files["calibrated_recommended_config"] = _json(folder, "calibrated_recommended_config.json",
                                                       dataclasses.replace(config, op_placement=merged).to_dict())
    return files


def _summary_json(r: ProfileResult, files: dict) -> dict:
    return {**r.meta, "device_profile": r.device.to_dict(), "simulated_device_ms": r.device_ms,
            "measured_host_ms": r.measured_ms, "latency": r.latency, "breakdown": r.breakdown,
            "advice": r.advice.to_dict() if r.advice is not None else None, "files": dict(files),
            "device_fit": r.fit.to_dict() if r.fit is not None else None}


def _render(r: ProfileResult, folder: Path) -> str:
    meta = {**r.meta, "simulated_device_ms": r.device_ms, "measured_host_ms": r.measured_ms,
            "device_profile": r.device.to_dict(),
            "advice": r.advice.to_dict() if r.advice is not None else None}
    path = render_profile(folder, title=f"{r.model_name} on {r.device.name}", op_summary=r.op_summary,
                          findings=r.findings, meta=meta, breakdown=r.breakdown, latency=r.latency,
                          placement=r.advice.steps if r.advice is not None else None,
                          calibration=r.fit.report_tables() if r.fit is not None else None)
    return Path(path).name


def profile_command(model: str | None, config: Config, *, device: str | None = None, pre: str | None = None,
                    post: str | None = None, requests: int = DEFAULT_REQUESTS, advise: bool = True,
                    inputs: str | None = None, seed: int = 0, out: str | None = None, html: bool = True,
                    val_range: str | None = None, device_profile: str | None = None,
                    fusion_ops: str | None = None, holdout: float | None = None, whatif_keep_dtype: list[str] | None = None,
                    whatif_gears: str | None = None, progress=_noop) -> dict:
    """Run :func:`profile_model` and write its files (module docstring) into a new output folder.

    Returns:
        {"summary": terminal lines, "out": folder, "files": {key: file name}, "result": ProfileResult}.
    """
    check_out(out)  # a taken --out is refused before the model is read
    stem = Path(str(model)).stem if model else "sample"
    with output_dir(out, REPORTS_DIR, f"{stem}-profile") as folder:
        r = profile_model(model, config, device=device, pre=pre, post=post, requests=requests, advise=advise,
                          inputs=inputs, seed=seed, val_range=val_range, device_profile=device_profile,
                          fusion_ops=fusion_ops, holdout=holdout, whatif_keep_dtype=whatif_keep_dtype,
                          whatif_gears=whatif_gears, progress=progress)
        progress("writing the profile")
        files = write_outputs(r, folder, config, html)
    lines = summary_lines(r)
    lines.append(f"report: {(folder / files.get('report', 'profile.json')).resolve()}")
    return {"summary": lines, "out": folder, "files": files, "result": r}
