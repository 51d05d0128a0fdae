"""A profile that learns from a real device: attribution → calibration → what-ifs, in one call.

:func:`fit_device` reads a device profile (msprof op_summary_*.csv or torch_npu kernel_details.csv, optionally
msprof's fusion_op_*.csv), attributes its rows to the plan's kernels (toolkit.profile.attribution), fits the
device profile's figures to the matched rows with a seeded hold-out (toolkit.profile.calibrate) and predicts, on
the calibrated profile, the effect of the placement advisor's recommendation, of a keep_dtype set and of each
gear of a gear set (toolkit.profile.whatif), each with the calibration's held-out error as its confidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from toolkit.profile.attribution import (
    Attribution,
    attribute,
    read_device_profile,
    read_fusion_ops,
)
from toolkit.profile.calibrate import Calibration, calibrate
from toolkit.profile.device import DeviceProfile
from toolkit.profile.whatif import (
    Change,
    gear_changes,
    placement_change,
    precision_change,
    whatif_table,
)


@dataclass
class DeviceFit:
    """What :func:`fit_device` found: the device profile's rows (op summary schema), the attribution, the
    calibration, the what-if changes and their table (toolkit.profile.whatif.WHATIF_COLUMNS), notes."""

    path: str
    rows: pd.DataFrame
    attribution: Attribution
    calibration: Calibration
    changes: list[Change]
    whatif: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def warning(self) -> str:
        """'' unless the calibrated profile predicts the held-out units worse than the profile it started from
        (per-kernel median or summed-time error higher after the fit): then one sentence saying so, with both
        errors, since the what-ifs then rest on a profile that generalises worse than the uncalibrated one."""
        c = self.calibration
        worse = [f"{what} {before:.1f}% -> {after:.1f}%" for what, before, after in
                 (("per-kernel median", c.heldout_mdape_before, c.heldout_mdape),
                  ("summed time", c.heldout_total_before, c.heldout_total)) if after > before]
        if not worse:
            return ""
        return ("the calibration predicts the held-out units worse than the uncalibrated profile "
                f"({', '.join(worse)}): "
                "the fit does not generalise from these rows, so its what-ifs are no better than the uncalibrated "
                "ones (BaseEffectMs); profile more iterations or more of the model before relying on it")

    def summary_lines(self) -> list[str]:
        """Terminal lines: attribution, held-out errors (and :meth:`warning`), calibrated figures, what-ifs, notes
        on skipped rows."""
        c, a = self.calibration, self.attribution
        lines = [f"device profile {Path(self.path).name}: {a.matched_rows} row(s) matched, {len(a.unmatched)} "
                 "unmatched (attribution_unmatched.csv)", f"calibration ({c.device.name}): {c.confidence()}"]
        if self.warning():
            lines.append(f"WARNING: {self.warning()}")
        fitted = c.params[c.params["Status"] == "calibrated"]
        lines.append("calibrated: " + (", ".join(f"{r.Field} {r.Base:g} -> {r.Calibrated:.4g}" for r in
                                                  fitted.itertuples(index=False)) or "nothing identified"))
        for w in self.whatif.itertuples(index=False):
            lines.append(f"what-if {w.Change}: {w.BaselineMs:.3f} -> {w.PredictedMs:.3f} ms ({w.EffectMs:+.3f} ms, "
                         f"{w.EffectPct:+.1f}%; uncalibrated profile {w.BaseEffectMs:+.3f} ms); {w.Detail}")
        return lines + [f"device profile: {n}" for n in self.notes if "malformed" in n or "not used" in n
                        or "moves nothing" in n]

    def tables(self) -> dict[str, pd.DataFrame]:
        """{file name: table} of the CSV files (docs/profile.md)."""
        c = self.calibration
        return {"attribution.csv": self.attribution.kernels, "attribution_unmatched.csv": self.attribution.unmatched,
                "calibration.csv": c.params, "calibration_errors.csv": c.errors, "calibration_units.csv": c.units,
                "whatif.csv": self.whatif}

    def report_tables(self) -> dict:
        """The calibration section's data for toolkit.report.profile_html (``calibration=``)."""
        c = self.calibration
        return {"units": c.units, "errors": c.errors, "params": c.params, "whatif": self.whatif,
                "unmatched": self.attribution.unmatched, "device": c.device.name, "source": Path(self.path).name,
                "warning": self.warning()}

    def placement(self) -> dict[str, str] | None:
        """The op_placement the advisor recommends on the calibrated profile (None when it moves nothing)."""
        moved = [ch for ch in self.changes if ch.advice is not None]
        return dict(moved[0].advice.op_placement) if moved else None

    def to_dict(self) -> dict:
        c = self.calibration
        return {"device_profile": self.path, "calibrated_device": c.device.name,
                "matched_rows": self.attribution.matched_rows, "unmatched_rows": len(self.attribution.unmatched),
                "heldout_mdape_before": c.heldout_mdape_before, "heldout_mdape_after": c.heldout_mdape,
                "heldout_total_error_before": c.heldout_total_before, "heldout_total_error_after": c.heldout_total,
                "confidence": c.confidence(), "calibration_warning": self.warning(), "whatif": self.whatif,
                "notes": self.notes}


def fit_device(path: str | Path, costs: pd.DataFrame, compiled, config, model, base: DeviceProfile, *,
               fusion_ops: str | Path | None = None, holdout: float = 0.25, seed: int = 0, advise: bool = True,
               keep_dtype: list[str] | None = None, gears: dict | None = None, fixed_us: float = 0.0,
               progress=lambda msg: None) -> DeviceFit:
    """Attribution, calibration and what-ifs of one device profile against ``compiled`` (module docstring).

    Args:
        path: op_summary_*.csv or kernel_details.csv of a real device.
        costs: ``compiled``'s cost table on ``base`` (toolkit.profile.cost.kernel_costs).
        compiled / config / model: the CompileResult profiled, its config and the original ModelProto.
        base: the device profile the calibration starts from.
        fusion_ops: msprof fusion_op_*.csv (fused device ops → original ops), optional.
        holdout / seed: the calibration's hold-out share and seed.
        advise: predict the placement advisor's recommendation.
        keep_dtype: keep_dtype entries for the precision what-if (None: no precision what-if).
        gears: {gear label: {input: shape}} for the gear what-ifs (None: none).
        fixed_us: measured pre + post per request (µs), part of every end-to-end latency.

    Raises:
        InputError: an unreadable device profile / fusion_op file, or too few matched rows to calibrate;
        ConfigError: a bad keep_dtype entry.
    """
    rows, notes = read_device_profile(path)
    fused = read_fusion_ops(fusion_ops) if fusion_ops else {}
    progress(f"attributing {len(rows)} device row(s) to {len(costs)} kernel(s)")
    attr = attribute(rows, costs, fused)
    progress("calibrating the device profile")
    cal = calibrate(attr, costs, base, holdout=holdout, seed=seed, source=f"device profile {Path(path).name}")
    changes: list[Change] = []
    if advise:
        progress("what-if: placement advisor on the calibrated profile")
        ch = placement_change(compiled, config, cal.device, fixed_us, model)
        if ch is None:
            notes.append("what-if: the placement advisor moves nothing on the calibrated profile")
        else:
            changes.append(ch)
    if keep_dtype:
        progress("what-if: keep_dtype")
        changes.append(precision_change(compiled, config, list(keep_dtype), model))
    if gears:
        progress(f"what-if: {len(gears)} gear(s)")
        changes += gear_changes(compiled, model, config, gears)
    table = whatif_table(changes, cal.device, base, fixed_us, cal.confidence())
    return DeviceFit(str(path), rows, attr, cal, changes, table, notes + attr.notes + cal.notes)
