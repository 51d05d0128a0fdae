"""End to end: the user's pre- and post-processing, timed for real, around the simulated device schedule.

``--pre file.py:fn`` names ``fn(request: int) -> feed`` (a dict {input name: array}, or one array for a
single-input model); ``--post file.py:fn`` names ``fn(outputs: dict[str, np.ndarray]) -> anything``. Both are
called once per request and timed with ``time.perf_counter`` on this host (TimeKind ``measured``); the
device part is the simulated schedule of one request on the plan of its feed shapes (TimeKind ``simulated``;
requests fed different shapes run different plans: ``devices`` in :func:`run_e2e`).

Two schedules over N requests (toolkit.profile.schedule):

- **serial**: one host thread runs pre(i), waits for the device work of request i, runs post(i), then
  pre(i+1): latency = pre + device + post per request.
- **pipelined**: three stages — pre-processing (stream ``pre``), the device work of a request (its input
  copies, NPU kernels, CPU-placed ops and output copies) and post-processing (stream ``host``) — handing
  requests over through queues of depth one. A stage may start request i+1 once it has finished request i
  and the next stage has *taken* request i (started it), so at most one finished request waits between two
  stages. The next stage takes request i as soon as everything it waits for has ended, so:

  - pre(i+1) waits for pre(i) and for what the device work of request i waits for besides pre(i): the device
    work of request i−1 and post(i−2) (a device blocked by a slow post-processing blocks pre-processing too);
  - the first device tasks of request i+1 (its input copies) wait for pre(i+1), for the device work of
    request i (one request on the device at a time) and for post(i−1);
  - post(i) waits for the device work of request i and for post(i−1).

  Latency therefore converges to a few service times whatever N is, and throughput approaches the rate of the
  slowest stage, 1 / max(pre, device work, post). Steady-state latency, with pre time p, device work d and post
  time q (by hand from the rules above): p + d + q when pre-processing is the slowest stage (nothing waits);
  2d + q when the device is (pre(i) starts when request i−1 goes onto the device); 3q when post-processing is
  (pre(i) starts when post(i−3) ends). So with no --pre (p = 0) and a post-processing longer than the device
  work, the pipelined latency is 3q against the serial d + q: requests queue behind the slow post-processing.

Latency of request i = end of post(i) − start of pre(i); throughput = N / (end of the last task − start of the
first) in requests per second. :func:`latency_table` gives columns Schedule, p50(ms), p90(ms), p99(ms),
Throughput(req/s) (percentiles: numpy's linear interpolation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from toolkit.core import usercode
from toolkit.core.errors import InputError, UsageError
from toolkit.core.userpaths import check_path
from toolkit.inputs.validate import check_keys, feed_arrays
from toolkit.profile.schedule import Task, offset_tasks, simulate

LATENCY_COLUMNS = ["Schedule", "p50(ms)", "p90(ms)", "p99(ms)", "Throughput(req/s)"]
BREAKDOWN_COLUMNS = ["Stage", "Ms", "TimeKind"]
STAGE_NAMES = {"pre": "pre-processing", "h2d": "host-to-device", "device": "device", "d2h": "device-to-host",
               "cpu": "CPU ops", "post": "post-processing"}


# ---------------------------------------------------------------- loading user callables
def load_callable(spec: str, option: str, default_fn: str) -> Callable:
    """The function named by ``spec`` = ``file.py[:function]`` (default function ``default_fn``).

    Raises:
        InputError: empty spec, not a .py file, missing file, a path the file system refuses
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied), the module raises on import, no such function, or the name is not callable. One
            line naming ``option`` and the fix.
    """
    if not spec or not str(spec).strip():
        raise UsageError(f"{option} is empty; give file.py:function, e.g. {option} prepost.py:{default_fn}")
    path_text, sep, fn_name = str(spec).rpartition(":") if ".py:" in str(spec) else (str(spec), "", "")
    fn_name = fn_name or default_fn
    path = Path(path_text)
    if path.suffix != ".py":
        raise InputError(f"{option} '{spec}' is not file.py:function; e.g. {option} prepost.py:{default_fn}")
    check_path(path, f"{option} file", InputError, f"give an existing file.py:function to {option}")
    if not path.is_file():
        raise InputError(f"{option} file '{path}' does not exist")
    module = _import_file(path, option)
    fn = getattr(module, fn_name, None)
    if fn is None:
        raise InputError(f"{option} file '{path}' defines no function '{fn_name}'")
    if not callable(fn):
        raise InputError(f"{option} '{path}:{fn_name}' is a {type(fn).__name__}, not a function")
    return fn


def _import_file(path: Path, option: str):
    """The user's module (toolkit.core.usercode.import_file: whatever its top level raises, sys.exit() included, is
    an InputError "<option> file '<path>' raised <type> on import: ...")."""
    name = f"_npuscope_{option.strip('-')}_{abs(hash(str(path.resolve())))}"
    return usercode.import_file(path, name, f"{option} file '{path}'", InputError)


# ---------------------------------------------------------------- timing for real
@dataclass
class Timed:
    """Measured wall times (ms, one per request) and the last value returned."""

    ms: list[float]
    value: object


def time_call(fn: Callable, args: tuple, option: str, request: int) -> tuple[float, object]:
    """(wall time in ms, value) of one call ``fn(*args)`` for request number ``request``.

    Raises:
        InputError: ``fn`` raised anything but KeyboardInterrupt (SystemExit included: toolkit.core.usercode),
            naming ``option`` and the request.
    """
    t0 = time.perf_counter()
    value = usercode.call(fn, *args, what=option, error=InputError, exceptions=True, when=f"on request {request}")
    return (time.perf_counter() - t0) * 1e3, value


def time_calls(fn: Callable, args: list, option: str) -> Timed:
    """Call ``fn(*a)`` for each ``a`` in ``args``, timing each call (ms). Raises InputError if it raises."""
    ms, value = [], None
    for i, a in enumerate(args):
        t, value = time_call(fn, a, option, i)
        ms.append(t)
    return Timed(ms, value)


def as_feed(value, input_names: list[str], option: str = "--pre", source: str = "") -> dict[str, np.ndarray]:
    """A pre-processing result as a feed dict {input name: array}. Its keys are checked as an npz's are
    (toolkit.inputs.validate.check_keys): a key that is not a model input is refused, never dropped, as is a
    missing one; the caller then checks dtypes and shapes (toolkit.inputs.check_feed). ``source`` names the
    result in messages (default ``option``).

    Raises:
        InputError: not a dict (nor one array for a single-input model), missing or unexpected keys, or a
            value numpy cannot turn into an array (toolkit.inputs.validate.feed_arrays).
    """
    from types import SimpleNamespace

    if isinstance(value, np.ndarray) and len(input_names) == 1:
        value = {input_names[0]: value}
    if not isinstance(value, dict):
        want = "a dict {input name: array}" + (" or one array" if len(input_names) == 1 else "")
        raise InputError(f"{option} returned {type(value).__name__}; expected {want}")
    check_keys(list(value), [SimpleNamespace(name=n) for n in input_names], source or option)
    return feed_arrays(value, source or option)


# ---------------------------------------------------------------- schedules over N requests
def _roots(tasks: list[Task]) -> list[int]:
    return [i for i, t in enumerate(tasks) if not t.deps]


def _sinks(tasks: list[Task]) -> list[int]:
    used = {d for t in tasks for d in t.deps}
    return [i for i in range(len(tasks)) if i not in used]


def request_tasks(device: list[Task], pre_ms: float, post_ms: float, mode: str) -> list[Task]:
    """Tasks of one request: pre, the device tasks (roots made to wait for pre), post (after every device
    task). Indices are local (pre = 0)."""
    pre_stream = "pre" if mode == "pipelined" else "host"
    out = [Task("pre-processing", pre_stream, pre_ms * 1e3, stage="pre")]
    dev = offset_tasks(device, 1, 0)
    for t in dev:
        if not t.deps:
            t.deps = [0]
    out += dev
    out.append(Task("post-processing", "host", post_ms * 1e3, list(range(1, len(out))), stage="post"))
    return out


@dataclass
class _Marks:
    """Global indices of one request's pre task, device roots, device sinks (device work done) and post task."""

    pre: int
    roots: list[int]
    sinks: list[int]
    post: int


def _marks(device: list[Task], base: int) -> _Marks:
    post = base + len(device) + 1
    if not device:
        return _Marks(base, [], [base], post)
    return _Marks(base, [base + 1 + j for j in _roots(device)], [base + 1 + j for j in _sinks(device)], post)


def _pipeline_deps(req: list[Task], marks: list[_Marks]) -> None:
    """Add the hand-over rules of the pipelined schedule (module docstring) to request ``len(marks) - 1``."""
    i, me = len(marks) - 1, marks[-1]
    if i >= 1:
        prev = marks[i - 1]
        # pre(i) waits until the device can take request i-1: device work of i-2 done and post(i-3) done
        req[0].deps = sorted({prev.pre, *(marks[i - 2].sinks if i >= 2 else []),
                              *([marks[i - 3].post] if i >= 3 else [])})
        extra = set(prev.sinks) | ({marks[i - 2].post} if i >= 2 else set())
        for g in me.roots:
            t = req[g - me.pre]
            t.deps = sorted(set(t.deps) | extra)
        req[-1].deps = sorted(set(req[-1].deps) | {prev.post})


def e2e_tasks(device: list[Task], pre_ms: list[float], post_ms: list[float], mode: str,
              devices: list[list[Task]] | None = None) -> list[Task]:
    """All tasks of N requests in issue order (module docstring); ``mode`` 'serial' or 'pipelined'.
    ``devices``: one device task list per request (requests fed different shapes run different plans);
    None: every request runs ``device``."""
    tasks: list[Task] = []
    marks: list[_Marks] = []
    for i, (pre, post) in enumerate(zip(pre_ms, post_ms)):
        base = len(tasks)
        dev = device if devices is None else devices[i]
        req = offset_tasks(request_tasks(dev, pre, post, mode), base, i)
        marks.append(_marks(dev, base))
        if mode == "pipelined":
            _pipeline_deps(req, marks)
        elif i:
            req[0].deps = [base - 1]
        tasks += req
    return tasks


def run_e2e(device: list[Task], pre_ms: list[float], post_ms: list[float], mode: str,
            devices: list[list[Task]] | None = None) -> pd.DataFrame:
    """Events of the N-request schedule (toolkit.profile.schedule.EVENT_COLUMNS); ``devices`` as in
    :func:`e2e_tasks`."""
    return simulate(e2e_tasks(device, pre_ms, post_ms, mode, devices))


def request_latencies_ms(events: pd.DataFrame) -> np.ndarray:
    """Per request: end of its last task − start of its first, ms."""
    g = events.groupby("Request")
    return ((g["EndUs"].max() - g["StartUs"].min()) / 1e3).to_numpy()


def throughput(events: pd.DataFrame) -> float:
    """Requests per second over the whole schedule."""
    span = float(events["EndUs"].max() - events["StartUs"].min())
    return events["Request"].nunique() / (span / 1e6) if span > 0 else float("inf")


def latency_table(schedules: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per schedule: p50/p90/p99 latency (ms) and throughput (req/s)."""
    rows = []
    for name, ev in schedules.items():
        lat = request_latencies_ms(ev)
        p50, p90, p99 = np.percentile(lat, [50, 90, 99])
        rows.append([name, p50, p90, p99, throughput(ev)])
    return pd.DataFrame(rows, columns=LATENCY_COLUMNS)


def breakdown(device_events: pd.DataFrame, pre_ms: list[float] | None, post_ms: list[float] | None,
              requests: int = 1) -> pd.DataFrame:
    """Per-request time per stage (ms): summed task durations of the device schedule in ``device_events``
    divided by ``requests`` (the number of requests those events hold: 1 for one request's schedule, N for the
    N-request serial schedule when requests ran different plans; simulated) and the mean measured pre/post time
    (measured). Stages that did not run are left out."""
    rows = []
    if pre_ms:
        rows.append([STAGE_NAMES["pre"], float(np.mean(pre_ms)), "measured"])
    sums = device_events.groupby("Stage")["DurationUs"].sum() / 1e3 / max(int(requests), 1)
    for stage in ("h2d", "device", "d2h", "cpu"):
        if stage in sums and (sums[stage] > 0 or stage == "device"):
            rows.append([STAGE_NAMES[stage], float(sums[stage]), "simulated"])
    if post_ms:
        rows.append([STAGE_NAMES["post"], float(np.mean(post_ms)), "measured"])
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)
