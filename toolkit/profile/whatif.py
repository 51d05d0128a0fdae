"""What-if: the end-to-end effect of a change, predicted on a (calibrated) device profile.

A change is a pair of compiled plans, before and after. Its effect is the difference of the serial end-to-end
latency of one request: ``fixed_us`` (measured pre + post, µs) + the simulated schedule of the plan
(toolkit.profile.schedule over toolkit.profile.cost), on the device profile given. Changes:

- :func:`placement_change` — the placement advisor's recommendation (toolkit.profile.advisor: ``advise`` then
  ``verify`` on the recompiled plan), searched *on the calibrated profile*;
- :func:`precision_change` — a keep_dtype set added to the config (the nodes or ``OpType::X`` entries stay
  FP32: the compiler adds their Casts; ``recompile_precision``); the detail counts Cast kernels and FP32 NPU
  kernels before and after;
- :func:`gear_changes` — one plan per gear of a gear set (``{label: input shapes}``), each against the
  current plan; the detail gives the gear's input shapes and its time per input element relative to the
  current plan's.

:func:`whatif_table` prices every change on the calibrated profile and on the base one, columns
:data:`WHATIF_COLUMNS`: Change, Detail, BaselineMs and PredictedMs (calibrated profile, before / after),
EffectMs (after − before; negative = faster), EffectPct, BaseEffectMs (the same change on the uncalibrated
profile), Confidence (the calibration's held-out error: toolkit.profile.calibrate.Calibration.confidence).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd

from toolkit.engine import compile_model
from toolkit.profile import advisor as adv
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import DeviceProfile
from toolkit.profile.schedule import makespan_us, schedule_plan

WHATIF_COLUMNS = ["Change", "Detail", "BaselineMs", "PredictedMs", "EffectMs", "EffectPct", "BaseEffectMs",
                  "Confidence"]


@dataclass
class Change:
    """One what-if: ``before`` / ``after`` CompileResults; ``advice`` for the placement change."""

    name: str
    detail: str
    before: object
    after: object
    advice: adv.Advice | None = None


def latency_us(compiled, device: DeviceProfile, fixed_us: float = 0.0) -> float:
    """Serial end-to-end latency of one request of ``compiled`` on ``device``, µs (module docstring)."""
    events, _ = schedule_plan(compiled.plan, kernel_costs(compiled.plan, compiled.model, device), device)
    return makespan_us(events) + fixed_us


def placement_change(compiled, config, device: DeviceProfile, fixed_us: float = 0.0, model=None) -> Change | None:
    """The advisor's recommendation searched and verified on ``device`` (None when it moves nothing or the
    config cannot place ops)."""
    costs = kernel_costs(compiled.plan, compiled.model, device)
    advice = adv.advise(compiled.plan, costs, device, fixed_us=fixed_us)
    after = adv.verify(advice, compiled, config, device, fixed_us, model)
    if after is None or not advice.op_placement:
        return None
    nodes = sorted(advice.op_placement)
    detail = f"op_placement {{{', '.join(repr(n) for n in nodes[:6])}{', ...' if len(nodes) > 6 else ''}: 'CPU'}}"
    return Change("placement advisor", f"{len(advice.moved)} kernel(s) to the CPU: {detail}", compiled, after, advice)


def _counts(compiled) -> tuple[int, int]:
    ks = compiled.plan.kernels
    return (sum(1 for k in ks if k.fusion == "cast"),
            sum(1 for k in ks if k.placement == "NPU" and k.precision == "fp32" and k.fusion not in ("cast", "copy")))


def precision_change(compiled, config, keep: list[str], model=None) -> Change:
    """``keep`` (keep_dtype entries: node names, ``OpName::n`` or ``OpType::X``) added to ``config.keep_dtype``
    and the precision passes re-run. Raises what the config check raises for a bad entry (ConfigError)."""
    new_cfg = dataclasses.replace(config, keep_dtype=list(dict.fromkeys(list(config.keep_dtype) + list(keep))))
    new_cfg.validate("keep_dtype what-if")
    after = adv.recompile(compiled, new_cfg, model)
    (c0, f0), (c1, f1) = _counts(compiled), _counts(after)
    shown = ", ".join(keep[:4]) + (" ..." if len(keep) > 4 else "")
    return Change(f"keep_dtype +{len(keep)}", f"keep {shown} in FP32: Casts {c0} -> {c1}, FP32 NPU kernels "
                  f"{f0} -> {f1}", compiled, after)


def _elements(compiled) -> int:
    plan = compiled.plan
    return sum(math.prod(plan.tensors[n].shape) for n in plan.graph_inputs
               if n in plan.tensors and plan.tensors[n].shape is not None)


def gear_changes(compiled, model, config, gears: dict[str, dict[str, tuple[int, ...]]]) -> list[Change]:
    """One change per gear: ``model`` compiled for the gear's input shapes (the config's own gear fields and
    input_shape cleared: one static plan per gear) against ``compiled``."""
    out = []
    base_el = _elements(compiled) or 1
    fixed = dataclasses.replace(config, dynamic_batch_size="", dynamic_dims="", input_shape="")
    for label, shapes in gears.items():
        after = compile_model(model, fixed, input_shapes=dict(shapes), model_path=compiled.plan.model)
        ratio = (_elements(after) or 1) / base_el
        text = "; ".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
        out.append(Change(f"gear {label}", f"inputs {text} ({ratio:.3g}x the current plan's input elements)",
                          compiled, after))
    return out


def whatif_table(changes: list[Change], calibrated: DeviceProfile, base: DeviceProfile, fixed_us: float = 0.0,
                 confidence: str = "") -> pd.DataFrame:
    """Every change priced on ``calibrated`` and ``base`` (:data:`WHATIF_COLUMNS`, times in ms)."""
    rows = []
    for ch in changes:
        b, a = latency_us(ch.before, calibrated, fixed_us), latency_us(ch.after, calibrated, fixed_us)
        bb, ba = latency_us(ch.before, base, fixed_us), latency_us(ch.after, base, fixed_us)
        rows.append([ch.name, ch.detail, b / 1e3, a / 1e3, (a - b) / 1e3, (a - b) / b * 100.0 if b else float("nan"),
                     (ba - bb) / 1e3, confidence])
    return pd.DataFrame(rows, columns=WHATIF_COLUMNS)
