"""The host-memory guard: a simulated device arena must fit in this machine's memory."""

from __future__ import annotations

import os

from toolkit.core.errors import ModelError
from toolkit.core.text import human_bytes


def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 if unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_host_memory(plan) -> None:
    """Refuse, before allocating, a simulated arena that cannot fit in this machine's memory (ModelError)."""
    total = host_memory_bytes()
    if total and plan.arena_bytes > 0.8 * total:
        big = sorted((t for t in plan.tensors.values() if t.storage == "arena"), key=lambda t: -t.nbytes)[:3]
        raise ModelError(f"the planned device arena needs {human_bytes(plan.arena_bytes)}, more than 80% of this "
                         f"machine's {human_bytes(total)}; largest tensors: "
                         + ", ".join(f"'{t.name}' {t.shape} ({human_bytes(t.nbytes)})" for t in big)
                         + "; use smaller input shapes (--input-shape)")
