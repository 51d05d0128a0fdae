"""Static memory planning over one device arena.

Lifetimes are kernel-index intervals [first, last] (inclusive; graph inputs start at -1, graph outputs end
after the last kernel). Offsets come from the greedy-by-size best-fit heuristic: tensors in decreasing size
each take the smallest gap, among tensors whose lifetimes overlap theirs, that fits (Pisarchyk & Lee, "Efficient
Memory Management for Deep Neural Net Inference", 2020, §4 "Greedy by Size"). The lower bound is the largest
sum of live (aligned) bytes at any step: no plan can be smaller.
"""

from __future__ import annotations

from dataclasses import dataclass


def align(n: int, alignment: int) -> int:
    """``n`` rounded up to a multiple of ``alignment`` (bytes); 0 stays 0."""
    return (n + alignment - 1) // alignment * alignment


@dataclass
class Block:
    name: str
    size: int  # bytes, aligned
    first: int
    last: int
    offset: int = -1


def overlaps(a: Block, b: Block) -> bool:
    return a.first <= b.last and b.first <= a.last


def plan_greedy_by_size(blocks: list[Block]) -> int:
    """Assign ``offset`` to every block (in place); returns the arena size in bytes."""
    placed: list[Block] = []
    arena = 0
    for blk in sorted(blocks, key=lambda b: (-b.size, b.first, b.name)):
        first, last = blk.first, blk.last
        live = sorted((p for p in placed if p.first <= last and first <= p.last), key=lambda p: p.offset)  # overlaps
        best, best_gap, cursor = None, None, 0
        for p in live:
            gap = p.offset - cursor
            if gap >= blk.size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, p.offset + p.size)
        blk.offset = best if best is not None else cursor
        arena = max(arena, blk.offset + blk.size)
        placed.append(blk)
    return arena


def plan_no_reuse(blocks: list[Block]) -> int:
    """Every block its own range (reuse off); returns the arena size in bytes."""
    cursor = 0
    for blk in sorted(blocks, key=lambda b: (b.first, b.name)):
        blk.offset = cursor
        cursor += blk.size
    return cursor


def plan_conservative(blocks: list[Block]) -> int:
    """Reuse a freed block only by a tensor of exactly the same (aligned) size, first-come first-served in
    order of first use (the classic "same-size free list"); returns the arena size in bytes."""
    free: dict[int, list[tuple[int, int]]] = {}  # size -> [(free from step, offset)]
    cursor = 0
    for blk in sorted(blocks, key=lambda b: (b.first, b.name)):
        cands = [c for c in free.get(blk.size, []) if c[0] <= blk.first]
        if cands:
            pick = min(cands, key=lambda c: (c[1], c[0]))
            free[blk.size].remove(pick)
            blk.offset = pick[1]
        else:
            blk.offset, cursor = cursor, cursor + blk.size
        free.setdefault(blk.size, []).append((blk.last + 1, blk.offset))
    return cursor


def place_exclusive(blocks: list[Block], start: int) -> int:
    """Give each block its own range from ``start`` on (disable_reuse); returns the new arena end."""
    cursor = start
    for blk in sorted(blocks, key=lambda b: (b.first, b.name)):
        blk.offset, cursor = cursor, cursor + blk.size
    return cursor


POLICIES = {"off": plan_no_reuse, "conservative": plan_conservative, "aggressive": plan_greedy_by_size}


def live_bytes(blocks: list[Block]) -> dict[int, int]:
    """{step: bytes live at that step} over the steps where something starts or ends."""
    events: dict[int, int] = {}
    for b in blocks:
        events[b.first] = events.get(b.first, 0) + b.size
        events[b.last + 1] = events.get(b.last + 1, 0) - b.size
    out, live = {}, 0
    for step in sorted(events):
        live += events[step]
        out[step] = live
    return out


def lower_bound(blocks: list[Block]) -> int:
    """max over steps of the bytes live at that step."""
    if not blocks:
        return 0
    events: dict[int, int] = {}
    for b in blocks:
        events[b.first] = events.get(b.first, 0) + b.size
        events[b.last + 1] = events.get(b.last + 1, 0) - b.size
    live = peak = 0
    for step in sorted(events):
        live += events[step]
        peak = max(peak, live)
    return peak


def find_conflicts(blocks: list[Block]) -> list[tuple[str, str]]:
    """Pairs of blocks whose byte ranges overlap while both are live (a correct plan has none)."""
    out = []
    bs = sorted(blocks, key=lambda b: b.offset)
    for i, a in enumerate(bs):
        for b in bs[i + 1:]:
            if b.offset >= a.offset + a.size:
                break
            if overlaps(a, b):
                out.append((a.name, b.name))
    return out
