"""The pass registry: a pass is a function ``run(ctx) -> PassResult`` registered with :func:`register_pass`
under its name, with what it requires from earlier passes, what it provides, what it ensures (postconditions
checked in tests), the minimum fusion level at which it runs and the fusion-switch name (converter format)
that can turn it off. The order in which passes run is :mod:`toolkit.compiler.stages`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from toolkit.compiler.context import CompileContext, PassResult

#: A postcondition: (what it checks, in words; predicate over the context after the pass ran).
Ensure = tuple[str, Callable[[CompileContext], bool]]


@dataclass
class PassInfo:
    name: str
    fn: Callable[[CompileContext], PassResult]
    requires: tuple[str, ...]
    provides: tuple[str, ...]
    min_level: int
    switch: tuple[str, str] | None  # (level, converter pass name)
    optional: bool = False  # an optimisation: if it raises, the compile goes on without it (logged)
    ensures: tuple[Ensure, ...] = ()


#: Every registered pass by name (the modules under toolkit.compiler.passes register on import).
PASSES: dict[str, PassInfo] = {}


def register_pass(name: str, *, requires=(), provides=(), ensures=(), min_level: int = 0, switch=None,
                  optional=False):
    """Decorator registering a pass function under ``name`` (see module docstring).

    ``optional=True`` marks an optimisation: when it raises, the pipeline restores the state from before the
    pass, logs why, and goes on (a valid model must compile even if an optimisation cannot handle it).
    ``ensures``: :data:`Ensure` pairs that hold after the pass ran (tests/compiler/test_stages.py checks them).
    """

    def deco(fn):
        PASSES[name] = PassInfo(name, fn, tuple(requires), tuple(provides), min_level, switch, optional,
                                tuple(ensures))
        return fn

    return deco
