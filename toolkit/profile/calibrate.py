"""Calibration: fit a device profile's figures to the times a real device measured (attribution units).

The model is the cost model's own (toolkit.profile.cost), per kernel k of a unit u (an attribution unit: the
kernels one or more device rows stand for), summed over the unit:

    NPU (device row AI_CORE / AI_VECTOR_CORE / MIX_*):  max(cube_k / (C_p · 1e6) + vec_k / (V_p · 1e6),
                                                            bytes_k / (B · 1e3)) + L          (0 for a view)
    AI_CPU row (our CPU-placed ops):                    max(flops_k / (G · 1e3), host_bytes_k / (H · 1e3)) + O

with C_p / V_p the cube / vector TFLOPS of the kernel's precision p (fp16, fp32), B the memory bandwidth (GB/s),
L the launch overhead (µs), G / H / O the host (AI_CPU) GFLOPS, GB/s and per-op overhead. The side follows the
device's Task Type, so an op the device ran on its AI_CPU is priced as one.

Fit: ``scipy.optimize.least_squares`` over the logarithms of the fitted figures (positive, scale-free) with
residuals ``log(predicted) − log(device)`` (relative errors) and the robust ``soft_l1`` loss (``f_scale`` 0.05,
about 5%): a few badly attributed rows do not drag the fit. Bounds are the sanity ranges of
toolkit.profile.device.RANGES (a fixed cost's lower bound is 1e-3 µs). ``max`` has no gradient for the term it
does not pick, so the search first fits a smooth maximum ``(a^4 + b^4)^(1/4)`` from the base profile and from
``starts`` seeded random starts (each figure log-uniform within ±1 decade of the base), then refines the best of
them on the exact model. Each fitted figure is then tested against its base value: when the others,
re-fitted with it there, fit as well (likelihood-ratio test at 95%, :func:`needed`), it goes back to its base
value (e.g. vector TFLOPS of kernels whose compute time ties their memory time: 3% noise then picks either
side of the tie). A figure no training unit depends on (no FP32 cube work, no AI_CPU row, ...) is not
fitted; one that no unit is *bound by* at the fit ("not identified": e.g. vector TFLOPS when every vector kernel
is memory-bound) keeps its base value when that changes no training prediction, else the fitted value, which is
then only a bound.

Validation: the usable units (device time > 0, not only views or copies) are split by a seeded permutation;
``holdout`` (default 25%) are held out of the fit. Errors, before (base profile) and after (calibrated), on the
train and held-out sets: MdAPE (median absolute percentage error over units, %), P90 APE, and the total error
``|Σ predicted − Σ device| / Σ device`` (%), the error of a sum such as one request's device time.

Tables: :data:`PARAM_COLUMNS` (Field, Unit, Base, Calibrated, Ratio, Kernels (training units depending on it),
Bound (training units bound by it at the fit), Status: calibrated / not identified / not fitted),
:data:`ERROR_COLUMNS` (Set, Units, MdAPE before(%), MdAPE after(%), P90 before(%), P90 after(%),
Total error before(%), Total error after(%)) and :data:`UNIT_FIT_COLUMNS` (Unit, Kernels, OpClass, Side, Set,
DeviceUs, BeforeUs, AfterUs, APE before(%), APE after(%)).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from toolkit.core.errors import InputError
from toolkit.profile.attribution import Attribution
from toolkit.profile.device import FIELDS, RANGES, DeviceProfile

#: The fitted figures, in this order.
PARAMS = ("cube_fp16_tflops", "cube_fp32_tflops", "vector_fp16_tflops", "vector_fp32_tflops", "memory_bandwidth_gbps",
          "launch_overhead_us", "host_gflops", "host_memory_bandwidth_gbps", "host_op_overhead_us")
PARAM_COLUMNS = ["Field", "Unit", "Base", "Calibrated", "Ratio", "Kernels", "Bound", "Status"]
ERROR_COLUMNS = ["Set", "Units", "MdAPE before(%)", "MdAPE after(%)", "P90 before(%)", "P90 after(%)",
                 "Total error before(%)", "Total error after(%)"]
UNIT_FIT_COLUMNS = ["Unit", "Kernels", "OpClass", "Side", "Set", "DeviceUs", "BeforeUs", "AfterUs", "APE before(%)",
                    "APE after(%)"]
HOST_TASKS = {"AI_CPU", "HOST_CPU"}
MIN_UNITS = 4
SMOOTH_P = 4.0


@dataclass
class Features:
    """Per-kernel terms of the units to fit (arrays of one length, one entry per kernel of a usable unit).

    ``unit``: position of its unit in ``units`` (0..n-1); ``host``: priced on the AI_CPU side; ``fp16``;
    ``view`` (0 µs on the NPU side); ``cube``/``vec``/``flops`` FLOPs; ``nbytes``/``host_bytes`` bytes.
    ``units``: the attribution unit ids in order; ``device_us``: their device times (µs)."""

    unit: np.ndarray
    host: np.ndarray
    fp16: np.ndarray
    view: np.ndarray
    cube: np.ndarray
    vec: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    host_bytes: np.ndarray
    units: np.ndarray
    device_us: np.ndarray
    op_class: list[str] = field(default_factory=list)
    side: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)

    def subset(self, positions: np.ndarray) -> "Features":
        """The features of the units at ``positions`` (renumbered 0..len-1)."""
        pos = {int(p): i for i, p in enumerate(positions)}
        keep = np.array([int(u) in pos for u in self.unit], dtype=bool)
        arr = {f: getattr(self, f)[keep] for f in ("host", "fp16", "view", "cube", "vec", "flops", "nbytes",
                                                   "host_bytes")}
        return Features(unit=np.array([pos[int(u)] for u in self.unit[keep]], dtype=int), **arr,
                        units=self.units[positions], device_us=self.device_us[positions],
                        op_class=[self.op_class[p] for p in positions], side=[self.side[p] for p in positions],
                        kernels=[self.kernels[p] for p in positions])


def unit_features(attr: Attribution, costs: pd.DataFrame) -> tuple[Features, list[str]]:
    """(features of the usable units, notes on the units left out: no device time, only views, copies)."""
    c = costs.reset_index(drop=True)
    cols = {k: [] for k in ("unit", "host", "fp16", "view", "cube", "vec", "flops", "nbytes", "host_bytes")}
    units, dev, classes, sides, names = [], [], [], [], []
    skipped: dict[str, int] = {}
    for u in attr.units.itertuples(index=False):
        ks = [int(k) for k in str(u.Kernels).split(";") if k != ""]
        rows = c.iloc[ks]
        why = ("no device time" if not u.DeviceUs > 0 else "a host-device copy" if (rows["Stream"] == "copy").any()
               else "only views (0 µs in the cost model)" if rows["IsView"].astype(bool).all() else "")
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        host = str(u.TaskType) in HOST_TASKS or (str(u.TaskType) == "" and (rows["Stream"] == "host").all())
        pos = len(units)
        for _, r in rows.iterrows():
            cols["unit"].append(pos)
            cols["host"].append(host)
            cols["fp16"].append(r["Precision"] == "fp16")
            cols["view"].append(bool(r["IsView"]))
            for key, col in (("cube", "CubeFlops"), ("vec", "VectorFlops"), ("flops", "Flops"), ("nbytes", "Bytes"),
                             ("host_bytes", "HostBytes")):
                cols[key].append(float(r[col]))
        units.append(int(u.Unit))
        dev.append(float(u.DeviceUs))
        classes.append("/".join(dict.fromkeys(rows["OpClass"].astype(str))))
        sides.append("AI_CPU" if host else "NPU")
        names.append(";".join(rows["Kernel"].astype(str)))
    feats = Features(unit=np.array(cols["unit"], dtype=int), **{k: np.array(cols[k], dtype=bool if k in
                     ("host", "fp16", "view") else float) for k in cols if k != "unit"},
                     units=np.array(units, dtype=int), device_us=np.array(dev, dtype=float), op_class=classes,
                     side=sides, kernels=names)
    notes = [f"{n} unit(s) not used for calibration: {why}" for why, n in skipped.items()]
    return feats, notes


def kernel_times(f: Features, v: dict[str, float], smooth: float | None = None) -> np.ndarray:
    """µs of every kernel term of ``f`` on figures ``v`` (module docstring; ``smooth`` p: (a^p+b^p)^(1/p)
    instead of max(a, b)). Equals toolkit.profile.cost's DurationUs for the same figures and side."""
    cube = np.where(f.fp16, v["cube_fp16_tflops"], v["cube_fp32_tflops"])
    vec = np.where(f.fp16, v["vector_fp16_tflops"], v["vector_fp32_tflops"])
    compute = f.cube / (cube * 1e6) + f.vec / (vec * 1e6)
    memory = f.nbytes / (v["memory_bandwidth_gbps"] * 1e3)
    h_compute = f.flops / (v["host_gflops"] * 1e3)
    h_memory = f.host_bytes / (v["host_memory_bandwidth_gbps"] * 1e3)
    npu = _max(compute, memory, smooth) + v["launch_overhead_us"]
    host = _max(h_compute, h_memory, smooth) + v["host_op_overhead_us"]
    return np.where(f.host, host, np.where(f.view, 0.0, npu))


def _max(a: np.ndarray, b: np.ndarray, p: float | None) -> np.ndarray:
    if p is None:
        return np.maximum(a, b)
    m = np.maximum(np.maximum(a, b), 1e-30)
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


def predict_units(f: Features, v: dict[str, float], smooth: float | None = None) -> np.ndarray:
    """µs per unit of ``f`` (the sum of its kernels' times)."""
    return np.bincount(f.unit, weights=kernel_times(f, v, smooth), minlength=len(f.units))


def dependence(f: Features) -> dict[str, int]:
    """{figure: units having a kernel whose time depends on it at all (a nonzero coefficient)}."""
    npu, host = ~f.host & ~f.view, f.host
    terms = {"cube_fp16_tflops": npu & f.fp16 & (f.cube > 0), "cube_fp32_tflops": npu & ~f.fp16 & (f.cube > 0),
             "vector_fp16_tflops": npu & f.fp16 & (f.vec > 0), "vector_fp32_tflops": npu & ~f.fp16 & (f.vec > 0),
             "memory_bandwidth_gbps": npu & (f.nbytes > 0), "launch_overhead_us": npu,
             "host_gflops": host & (f.flops > 0), "host_memory_bandwidth_gbps": host & (f.host_bytes > 0),
             "host_op_overhead_us": host}
    return {k: len(set(f.unit[m].tolist())) for k, m in terms.items()}


def binding(f: Features, v: dict[str, float]) -> dict[str, int]:
    """{figure: units with a kernel whose time the figure sets at ``v`` (the max picks its term; a fixed cost
    counts when it is at least 5% of the kernel's time)}."""
    cube = np.where(f.fp16, v["cube_fp16_tflops"], v["cube_fp32_tflops"])
    vec = np.where(f.fp16, v["vector_fp16_tflops"], v["vector_fp32_tflops"])
    c_cube, c_vec = f.cube / (cube * 1e6), f.vec / (vec * 1e6)
    mem = f.nbytes / (v["memory_bandwidth_gbps"] * 1e3)
    npu, host = ~f.host & ~f.view, f.host
    comp_bound = npu & (c_cube + c_vec > mem)
    t = kernel_times(f, v)
    h_c, h_m = f.flops / (v["host_gflops"] * 1e3), f.host_bytes / (v["host_memory_bandwidth_gbps"] * 1e3)
    share = 0.05
    terms = {"cube_fp16_tflops": comp_bound & f.fp16 & (c_cube > share * t),
             "cube_fp32_tflops": comp_bound & ~f.fp16 & (c_cube > share * t),
             "vector_fp16_tflops": comp_bound & f.fp16 & (c_vec > share * t),
             "vector_fp32_tflops": comp_bound & ~f.fp16 & (c_vec > share * t),
             "memory_bandwidth_gbps": npu & (mem >= c_cube + c_vec) & (mem > share * t),
             "launch_overhead_us": npu & (v["launch_overhead_us"] >= share * t),
             "host_gflops": host & (h_c > h_m) & (h_c > share * t),
             "host_memory_bandwidth_gbps": host & (h_m >= h_c) & (h_m > share * t),
             "host_op_overhead_us": host & (v["host_op_overhead_us"] >= share * t)}
    return {k: len(set(f.unit[m].tolist())) for k, m in terms.items()}


# ---------------------------------------------------------------- errors
def ape(pred: np.ndarray, dev: np.ndarray) -> np.ndarray:
    """Absolute percentage errors |pred − dev| / dev · 100."""
    return np.abs(pred - dev) / dev * 100.0


def error_row(name: str, before: np.ndarray, after: np.ndarray, dev: np.ndarray) -> list:
    """One :data:`ERROR_COLUMNS` row."""
    if not len(dev):
        return [name, 0] + [float("nan")] * 6
    b, a = ape(before, dev), ape(after, dev)
    tot = lambda p: abs(p.sum() - dev.sum()) / dev.sum() * 100.0  # noqa: E731
    return [name, len(dev), float(np.median(b)), float(np.median(a)), float(np.percentile(b, 90)),
            float(np.percentile(a, 90)), tot(before), tot(after)]


# ---------------------------------------------------------------- the fit
@dataclass
class Calibration:
    """The result of :func:`calibrate`: the calibrated profile, the tables of the module docstring, the held-out
    errors (``heldout_mdape`` / ``heldout_total`` after the fit, %; before: ``*_before``) and notes."""

    device: DeviceProfile
    base: DeviceProfile
    params: pd.DataFrame
    errors: pd.DataFrame
    units: pd.DataFrame
    heldout_mdape: float
    heldout_total: float
    heldout_mdape_before: float
    heldout_total_before: float
    notes: list[str] = field(default_factory=list)

    def confidence(self) -> str:
        """One line: how far predictions on this profile were off on units the fit never saw."""
        n = int(self.errors.loc[self.errors["Set"] == "held-out", "Units"].iloc[0])
        return (f"held-out error over {n} unit(s): per kernel median {self.heldout_mdape:.1f}% "
                f"(before calibration {self.heldout_mdape_before:.1f}%), summed time {self.heldout_total:.1f}% "
                f"(before {self.heldout_total_before:.1f}%)")


def _bounds(name: str) -> tuple[float, float]:
    lo, hi, _unit = RANGES[name]
    return np.log(max(lo, 1e-3)), np.log(hi)


def _solve(f: Features, base: dict, names: list[str], x0: np.ndarray, smooth) -> tuple[np.ndarray, float]:
    lo = np.array([_bounds(n)[0] for n in names])
    hi = np.array([_bounds(n)[1] for n in names])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    logd = np.log(f.device_us)

    def resid(x):
        v = {**base, **dict(zip(names, np.exp(x)))}
        return np.log(np.maximum(predict_units(f, v, smooth), 1e-12)) - logd

    from scipy.optimize import least_squares  # scipy.optimize costs ~0.3 s to import: only when fitting

    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05, x_scale=1.0, max_nfev=400)
    return res.x, float(res.cost)


def fit_figures(f: Features, base: dict[str, float], names: list[str], starts: int = 6,
                seed: int = 0) -> dict[str, float]:
    """The figures ``names`` fitted to ``f`` from ``base`` (module docstring: smooth multi-start, exact refine),
    then each fitted figure the fit does not need put back to its base value (:func:`needed`)."""
    if not names:
        return dict(base)
    rng = np.random.default_rng(seed)
    x_base = np.log([base[n] if base[n] > 0 else 1e-3 for n in names])
    trials = [x_base] + [x_base + rng.uniform(-np.log(10), np.log(10), len(names)) for _ in range(starts)]
    best = None
    for x0 in trials:
        x, _ = _solve(f, base, names, x0, SMOOTH_P)
        x, cost = _solve(f, base, names, x, None)
        if best is None or cost < best[1]:
            best = (x, cost)
    fitted, cost = {**base, **dict(zip(names, np.exp(best[0])))}, best[1]
    free = list(names)  # the figures still fitted; one put back to its base value stays there
    for p in names:  # a figure the fit does not need: the others, re-fitted with it at its base value, fit as well
        rest = [n for n in free if n != p]
        if not rest or fitted[p] == base[p]:
            continue
        held = {**fitted, p: base[p]}
        x, _ = _solve(f, held, rest, np.log([fitted[n] for n in rest]), SMOOTH_P)
        x, c = _solve(f, held, rest, x, None)
        if not needed(cost, c, len(f.device_us), len(free)):
            fitted, cost, free = {**held, **dict(zip(rest, np.exp(x)))}, c, rest
    return fitted


#: chi-square 95% point with one degree of freedom: the likelihood-ratio test of one figure
CHI2_1_95 = 3.841


def needed(cost: float, held_cost: float, n: int, k: int) -> bool:
    """Whether a fitted figure improves the fit significantly over its base value: the likelihood-ratio
    statistic 2·(held_cost − cost)/σ² against χ²₁ at 95% (:data:`CHI2_1_95`), σ² = 2·cost/(n − k) the residual
    variance of the fit (``cost``: least_squares' 0.5·Σρ(r²) over ``n`` units with ``k`` figures fitted;
    Wilks' theorem for nested models). An exact fit (cost 0) needs the held cost within 1e-12 to drop it."""
    if held_cost <= cost:
        return False
    sigma2 = 2.0 * cost / max(n - k, 1)
    if sigma2 <= 0:
        return held_cost - cost > 1e-12
    return 2.0 * (held_cost - cost) / sigma2 > CHI2_1_95


def split(n: int, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, held-out positions) of ``n`` units: a seeded permutation, ``round(holdout · n)`` held
    out (at least 1 when holdout > 0)."""
    perm = np.random.default_rng(seed).permutation(n)
    k = max(1, int(round(holdout * n))) if holdout > 0 else 0
    return np.sort(perm[k:]), np.sort(perm[:k])


def _unmatched_text(attr) -> str:
    """Why rows were left out, in a line (no report folder exists when calibration is refused): the first few
    unmatched device rows with their reasons, and the count."""
    rows = getattr(attr, "unmatched", None)
    if rows is None or not len(rows):
        return "no device row was left unmatched: the profile holds too few ops of this model's kernels"
    shown = "; ".join(f"'{r['Op Name']}': {r['Reason']}" for _, r in rows.head(3).iterrows())
    return f"{len(rows)} device row(s) unmatched, e.g. {shown}" + (" ..." if len(rows) > 3 else "")


def calibrate(attr: Attribution, costs: pd.DataFrame, base: DeviceProfile, *, holdout: float = 0.25,
              seed: int = 0, starts: int = 6, name: str | None = None, source: str = "a device profile") -> Calibration:
    """Fit ``base``'s figures (:data:`PARAMS`) to the matched device times of ``attr`` (module docstring).

    Args:
        attr: toolkit.profile.attribution.attribute of the device profile on ``costs``.
        costs: the plan's cost table (CubeFlops, VectorFlops, Flops, Bytes, HostBytes, Precision, Stream,
            IsView, OpClass, Kernel are read); its times are not used.
        base: the profile to start from; figures no unit depends on keep its values.
        holdout: share of usable units held out of the fit (0 ≤ holdout < 1; default 0.25).
        seed: seed of the split and of the random starts.
        starts: random starts besides the base (default 6).
        name: the calibrated profile's name (default ``<base>-calibrated``).
        source: where the device times come from, written into the profile's ``source`` entries.

    Raises:
        InputError: fewer than :data:`MIN_UNITS` usable units, or fewer than 3 to fit after the hold-out.
        ValueError: holdout outside [0, 1).
    """
    if not 0 <= holdout < 1:
        raise ValueError(f"holdout {holdout} must be in [0, 1)")
    feats, notes = unit_features(attr, costs)
    n = len(feats.units)
    if n < MIN_UNITS:
        raise InputError(f"only {n} matched device unit(s) usable for calibration (need at least {MIN_UNITS}); "
                         f"{_unmatched_text(attr)}")
    train_pos, test_pos = split(n, holdout, seed)
    if len(train_pos) < 3:
        raise InputError(f"{len(train_pos)} unit(s) left to fit after holding out {len(test_pos)}; lower the hold-out")
    train, test = feats.subset(train_pos), feats.subset(test_pos)
    base_v = {p: float(getattr(base, p)) for p in PARAMS}
    deps = dependence(train)
    names = [p for p in PARAMS if deps[p] > 0]
    fitted = fit_figures(train, base_v, names, starts, seed)
    final, status = _settle(train, base_v, fitted, names)
    bound = binding(train, final)
    params = pd.DataFrame([[p, RANGES[p][2], base_v[p], final[p], final[p] / base_v[p] if base_v[p] else float("nan"),
                            deps[p], bound[p], status[p]] for p in PARAMS], columns=PARAM_COLUMNS)
    before_all, after_all = predict_units(feats, base_v), predict_units(feats, final)
    sets = np.array(["train"] * n, dtype=object)
    sets[test_pos] = "held-out"
    errors = pd.DataFrame([error_row(s, before_all[sets == s], after_all[sets == s], feats.device_us[sets == s])
                           for s in ("train", "held-out")], columns=ERROR_COLUMNS)
    units = pd.DataFrame({"Unit": feats.units, "Kernels": feats.kernels, "OpClass": feats.op_class,
                          "Side": feats.side, "Set": sets, "DeviceUs": feats.device_us, "BeforeUs": before_all,
                          "AfterUs": after_all, "APE before(%)": ape(before_all, feats.device_us),
                          "APE after(%)": ape(after_all, feats.device_us)}, columns=UNIT_FIT_COLUMNS)
    held = errors.iloc[1]
    dev = calibrated_profile(base, final, status, name, source, held)
    return Calibration(dev, base, params, errors, units, float(held["MdAPE after(%)"]),
                       float(held["Total error after(%)"]), float(held["MdAPE before(%)"]),
                       float(held["Total error before(%)"]),
                       notes + [f"{len(train_pos)} unit(s) fitted, {len(test_pos)} held out (seed {seed})"])


def _settle(f: Features, base: dict, fitted: dict, names: list[str]) -> tuple[dict, dict]:
    """Final figures and status per figure: not identified → base value when that changes no training prediction."""
    bound = binding(f, fitted)
    final, status = dict(fitted), {}
    ref = predict_units(f, fitted)
    for p in PARAMS:
        if p not in names:
            final[p], status[p] = base[p], "not fitted"
        elif bound[p] == 0:
            trial = {**final, p: base[p]}
            same = np.allclose(predict_units(f, trial), ref, rtol=1e-6, atol=1e-9)
            final[p] = base[p] if same else fitted[p]
            status[p] = "not identified" if same else "not identified (a bound)"
        else:
            status[p] = "calibrated"
    return final, status


def calibrated_profile(base: DeviceProfile, values: dict, status: dict, name: str | None, source: str,
                       held: pd.Series) -> DeviceProfile:
    """``base`` with the fitted figures (rounded to 6 significant digits) and their ``source`` entries."""
    err = (f"held-out MdAPE {held['MdAPE before(%)']:.1f}% -> {held['MdAPE after(%)']:.1f}% over "
           f"{int(held['Units'])} unit(s)")
    src = dict(base.source)
    changes = {}
    for p in PARAMS:
        if status[p] == "calibrated" or status[p].endswith("(a bound)"):
            changes[p] = float(f"{values[p]:.6g}")
            kind = "calibrated" if status[p] == "calibrated" else "calibrated, only a bound (no unit bound by it)"
            src[p] = f"{kind}: least-squares fit to {source} ({err}); base {getattr(base, p):g}"
        elif status[p] == "not identified":
            src[p] = f"not calibrated (no matched kernel is bound by it): kept from {base.name}; " + str(src.get(p, ""))
    stem = base.name.split(" ")[0].removesuffix(".json")
    return dataclasses.replace(base, name=name or f"{stem}-calibrated", source=src,
                               description=f"{base.description} Calibrated to {source}.".strip(), **changes)


def device_json(dev: DeviceProfile) -> str:
    """The profile as a device JSON file (the format of toolkit/profile/devices/*.json, fields in
    toolkit.profile.device.FIELDS order), readable by ``profile --device FILE`` and a policy's ``[latency]
    device``."""
    d = dev.to_dict()
    return json.dumps({k: d[k] for k in FIELDS}, indent=2) + "\n"
