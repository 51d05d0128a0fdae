"""Plain-text summaries printed by the CLI (compile summary, run summary)."""

from __future__ import annotations


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def compile_summary(compiled) -> list[str]:
    """Lines: passes (ops before/after), fusions, precision counts, memory plan vs lower bound, findings."""
    plan = compiled.plan
    lines = [f"compiled in {compiled.compile_ms:.0f} ms"]
    for p in compiled.passes:
        state = f"{p.changed:>4} change(s)" if p.ran else f"skipped: {p.reason}"
        lines.append(f"  {p.name:<17} ops {p.ops_before:>5} -> {p.ops_after:<5} {state}")
    fused = [k for k in plan.kernels if len(k.nodes) > 1]
    by_rule: dict[str, int] = {}
    for k in fused:
        by_rule[k.rule or "?"] = by_rule.get(k.rule or "?", 0) + 1
    lines.append(f"kernels: {len(plan.kernels)} ({len(fused)} fused: "
                 + (", ".join(f"{r} x{n}" for r, n in sorted(by_rule.items())) or "none") + ")")
    counts = plan.precision_counts()
    lines.append(f"precision ({plan.config.get('precision_mode')}): {counts.get('fp16', 0)} FP16, "
                 f"{counts.get('fp32', 0)} FP32 kernels, {counts.get('cast', 0)} Casts")
    place = plan.placement_counts()
    lines.append(f"placement: {place['NPU']} NPU, {place['CPU']} CPU kernels; copies: {place['MemcpyH2D']} "
                 f"MemcpyH2D, {place['MemcpyD2H']} MemcpyD2H")
    ratio = plan.arena_bytes / plan.lower_bound_bytes if plan.lower_bound_bytes else 1.0
    lines.append(f"memory: arena {human_bytes(plan.arena_bytes)} vs lower bound "
                 f"{human_bytes(plan.lower_bound_bytes)} ({ratio:.3f}x)")
    dyn = [t.name for t in plan.tensors.values() if t.storage != "arena"]
    if dyn:
        lines.append(f"  {len(dyn)} tensor(s) outside the arena (data-dependent shape, host memory or non-tensor)")
    for f in compiled.findings:
        lines.append(f"{f.severity.upper()}: {f.kind} '{f.subject}': {f.recommendation}")
    return lines
