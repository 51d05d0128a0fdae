"""Device capacity: a plan whose arena exceeds the device memory is a compile error that says where the
peak is, what is live there and which options would shrink it."""

from __future__ import annotations

from toolkit.core.errors import ModelError
from toolkit.core.text import human_bytes


class CapacityError(ModelError):
    """The planned arena does not fit the device memory (``device_memory_bytes``)."""


def peak_step(plan) -> tuple[int, int, list]:
    """(step, live bytes, live TensorSpecs largest first) at the step where the most arena bytes are live
    (aliased tensors counted once per distinct offset range)."""
    arena = [t for t in plan.tensors.values() if t.storage == "arena"]
    steps = sorted({t.first for t in arena} | {t.last for t in arena})
    best = (steps[0] if steps else 0, 0, [])
    for s in steps:
        live = [t for t in arena if t.first <= s <= t.last]
        ranges = {(t.offset, t.nbytes) for t in live}
        total = sum(n for _, n in ranges)
        if total > best[1]:
            best = (s, total, sorted(live, key=lambda t: -t.nbytes))
    return best


def check_capacity(plan, device_bytes: int | None) -> None:
    """Raise :class:`CapacityError` when ``plan.arena_bytes > device_bytes`` (``None``: no limit)."""
    if not device_bytes or plan.arena_bytes <= device_bytes:
        return
    step, live, tensors = peak_step(plan)
    where = plan.kernels[step].name if 0 <= step < len(plan.kernels) else ("graph inputs" if step < 0 else "outputs")
    top = ", ".join(f"'{t.name}' {human_bytes(t.nbytes)}" for t in tensors[:5])
    policy = plan.config.get("memory_reuse", "aggressive")
    options = []
    if policy not in ("aggressive", "greedy"):
        options.append(f"memory_reuse = \"aggressive\" (now \"{policy}\")")
    if plan.config.get("disable_reuse"):
        options.append("remove entries from disable_reuse")
    options.append("smaller input shapes / gears (--input-shape), e.g. a smaller batch or resolution")
    if plan.config.get("precision_mode") in ("force_fp32", "must_keep_origin_dtype"):
        options.append("an FP16 precision_mode (halves float tensors)")
    raise CapacityError(
        f"memory plan needs {human_bytes(plan.arena_bytes)} ({plan.arena_bytes:,} bytes) but the device has "
        f"{human_bytes(device_bytes)} ({device_bytes:,} bytes, device_memory_bytes); peak at step {step} "
        f"(kernel '{where}') with {human_bytes(live)} live (lower bound {human_bytes(plan.lower_bound_bytes)}); "
        f"largest live tensors there: {top}; options that shrink it: {'; '.join(options)}")
