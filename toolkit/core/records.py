"""Records shared by every layer: a diagnostic :class:`Finding` and a compile pass's :class:`PassLog`."""

from __future__ import annotations

from dataclasses import dataclass


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
