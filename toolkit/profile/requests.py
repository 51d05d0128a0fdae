"""The requests of ``npuscope profile``: one compiled plan per distinct feed shape (toolkit.commands.profile's
module docstring explains the whole run).

Request i: ``pre(i)`` (timed for real) gives its feed, or it takes input set i mod n of --inputs (an .npz, a folder
of them or a loader script: toolkit.source.input_sets; without --inputs the model's realistic input or seeded
random data); the feed runs on the plan compiled for *its* shapes and ``post``
(timed for real) gets *that request's* outputs (a fresh copy). A plan is compiled the first time its shapes are
seen (one warm-up and one measured run); a feed equal to the previous one of its plan reuses its outputs. More
than :data:`MAX_PLANS` distinct shapes are refused (InputError).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from toolkit.core.errors import InputError
from toolkit.engine import Session, shapes_of
from toolkit.inputs import check_feed, input_specs
from toolkit.inputs.validate import conform_feed
from toolkit.profile import e2e
from toolkit.profile.schedule import makespan_us
from toolkit.source import input_sets

#: At most this many distinct feed shapes (one compiled plan each) per run.
MAX_PLANS = 8
#: At most this many --inputs sets (all held in memory; the requests take them in turn).
MAX_INPUT_SETS = 1000


def run_measured(m, config, feed, progress, note: str = ""):
    """(Session, RunResult of a measured run after one warm-up run)."""
    progress(f"compiling and building kernels{note}")
    sess = Session(m, config, input_shapes=shapes_of(feed))
    progress(f"running {len(sess.plan.kernels)} kernels (warm-up + measured run)")
    sess.run(feed)
    return sess, sess.run(feed)


@dataclass
class PlanRun:
    """One compiled plan and what profiling it gave.

    Attributes:
        label: the feed shapes it was compiled for, ``name:d0,d1,...`` per input joined with ';' (a list feed:
            ``name:list``, None: ``name:none``).
        sess: the toolkit.engine.Session; kernel_ms: measured host wall time per kernel (ms, plan order) of its
            measured run (after one warm-up run), on the first request of these shapes.
        requests: the requests (0-based) fed these shapes.
        costs / graph / events: cost table, device task graph and one request's simulated schedule (filled by
            :func:`_price`).
    """

    label: str
    sess: object
    kernel_ms: list[float]
    requests: list[int] = field(default_factory=list)
    costs: pd.DataFrame | None = None
    graph: object = None
    events: pd.DataFrame | None = None
    _feed: dict | None = field(default=None, repr=False)  # the last feed run and its outputs (outputs_for)
    _outputs: dict | None = field(default=None, repr=False)

    @property
    def device_ms(self) -> float:
        """Simulated time of one request's schedule on this plan, ms."""
        return makespan_us(self.events) / 1e3

    def outputs_for(self, feed: dict) -> dict:
        """The outputs of ``feed`` (a fresh copy each call, so a post-processing that edits them in place
        cannot change another request's): reused when ``feed`` equals the last feed run, else run."""
        if self._feed is None or not _same_feed(feed, self._feed):
            self._remember(feed, self.sess.run(feed).outputs)
        return _copy(self._outputs)

    def _remember(self, feed: dict, outputs: dict) -> None:
        self._feed, self._outputs = _copy(feed), _copy(outputs)


def _copy(values: dict) -> dict:
    import copy

    return {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else copy.deepcopy(v)) for k, v in values.items()}


def _same_feed(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            nan = np.issubdtype(x.dtype, np.inexact) and x.dtype == y.dtype
            if x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=bool(nan)):
                return False
        elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray) or x is not y:
            return False
    return True


def feed_label(feed: dict, names: list[str]) -> str:
    """``name:d0,d1,...`` per input of ``feed`` in ``names`` order, joined with ';' (``name:list`` for a sequence
    feed, ``name:none`` for an empty optional)."""
    parts = []
    for n in names:
        v = feed.get(n)
        if v is None:
            parts.append(f"{n}:none")
        elif isinstance(v, list):
            parts.append(f"{n}:list")
        else:
            parts.append(f"{n}:{','.join(str(d) for d in np.shape(v))}")
    return ";".join(parts)


@dataclass
class Requests:
    """Every request's plan and measured times: plans by label in first-seen order; plan_of[i] = label of
    request i; pre_ms / post_ms per request (empty when not given)."""

    plans: dict[str, PlanRun]
    plan_of: list[str]
    pre_ms: list[float]
    post_ms: list[float]


def _feed_sets(m, src, config, inputs, seed, val_range, progress) -> list[dict]:
    """The feeds requests take in turn without --pre: every set of --inputs (an .npz, a folder, a loader:
    toolkit.source.input_sets), else the usual default feed."""
    sets = input_sets(m, src, inputs, seed, val_range, config.input_shapes(), MAX_INPUT_SETS,
                      f"profile's limit ({MAX_INPUT_SETS}); requests take the sets in turn, so a few that cover "
                      "the shapes to profile are enough")
    progress(f"inputs: {sets[0][0]}" if len(sets) == 1 else f"inputs: {len(sets)} sets from {inputs}, taken in turn")
    return [arrays for _, arrays in sets]


def _pre_feed(pre_fn, i: int, specs) -> tuple[float, dict]:
    """(measured ms, checked feed) of pre(i): checked as an npz is (toolkit.inputs.check_feed: a key that is no
    model input, a missing one, a wrong dtype or shape is an InputError), after the same conforming
    (toolkit.inputs.validate.conform_feed: big-endian arrays made native, str arrays for string inputs)."""
    source = f"--pre result of request {i}"
    ms, value = e2e.time_call(pre_fn, (i,), "--pre", i)
    feed = conform_feed(e2e.as_feed(value, [s.name for s in specs], source=source), specs)
    check_feed(feed, specs, source)
    return ms, feed


def _plan_for(plans: dict[str, PlanRun], label: str, m, config, feed, i: int, progress) -> PlanRun:
    """The plan of ``label``, compiled (warm-up + measured run on ``feed``) the first time it is seen.

    Raises:
        InputError: a new label when :data:`MAX_PLANS` plans exist already.
    """
    if label in plans:
        return plans[label]
    if len(plans) >= MAX_PLANS:
        raise InputError(f"--pre / --inputs gave a feed of shape {label} on request {i}, the {len(plans) + 1}th distinct "
                         f"shape; profile compiles one plan per feed shape, at most {MAX_PLANS}: pad the inputs to "
                         "a few fixed shapes in pre-processing, or profile each shape on its own")
    note = f" for feed {label} (request {i})" if plans else ""
    sess, res = run_measured(m, config, feed, progress, note)
    plan = plans[label] = PlanRun(label, sess, res.kernel_ms)
    plan._remember(feed, res.outputs)
    return plan


def run_requests(m, src, config, pre_fn, post_fn, requests, inputs, seed, progress, val_range=None) -> Requests:
    """Run every request as the module docstring says: pre(i) (timed) gives its feed, the plan of the feed's
    shapes runs it, post(i) (timed) gets *its* outputs. Without --pre request i takes input set i mod n of
    --inputs (one set: every request uses it)."""
    specs = input_specs(m)
    names = [s.name for s in specs]
    fixed = None if pre_fn else _feed_sets(m, src, config, inputs, seed, val_range, progress)
    if pre_fn is not None or post_fn is not None:
        progress(f"running {requests} request(s) through the user's "
                 + " and ".join(x for x, f in (("pre", pre_fn), ("post", post_fn)) if f) + "-processing")
    out = Requests({}, [], [], [])
    for i in range(requests):
        if pre_fn is not None:
            ms, feed = _pre_feed(pre_fn, i, specs)
            out.pre_ms.append(ms)
        else:
            feed = fixed[i % len(fixed)]
        label = feed_label(feed, names)
        plan = _plan_for(out.plans, label, m, config, feed, i, progress)
        plan.requests.append(i)
        out.plan_of.append(label)
        if post_fn is not None:
            out.post_ms.append(e2e.time_call(post_fn, (plan.outputs_for(feed),), "--post", i)[0])
    return out
