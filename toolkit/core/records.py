"""Records shared by every layer: a diagnostic :class:`Finding`, a compile pass's :class:`PassLog` and the
compile cache's :class:`CacheRecord` of one compile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict


@dataclass
class Finding:
    """A diagnostic: severity (info/warning/error), kind, subject, evidence dict, recommendation."""

    severity: str
    kind: str
    subject: str
    evidence: dict
    recommendation: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PassLog:
    name: str
    ran: bool
    reason: str
    ops_before: int
    ops_after: int
    kernels_after: int
    changed: int
    ms: float
    log: list[str]


class CacheRecord(TypedDict, total=False):
    """What the compile cache did for one compile (``CompileResult.cache``; written by
    toolkit.cache.compile_cache, read by the kernel session source and the reports)."""

    key: str  # the compile key (sha256 hex)
    status: str  # "hit" | "miss" | "patched"
    mode: str  # op_compiler_cache_mode: "enable" | "force"
    dir: str  # the cache folder
    model: object  # the compiled graph (onnx.ModelProto) this record belongs to
    log: list[str]  # the "cache: ..." compile-log lines
    base: str  # a patched compile: the key of the compile it was patched from
    stale_nodes: list[str]  # a patched compile: nodes whose kernels the patch changed
    kernel_hits: int  # kernel sessions loaded from entries
    kernel_misses: int  # kernel sessions built
