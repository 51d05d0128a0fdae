"""The signoff policy: a TOML file of written criteria a model must meet before it ships.

Every section is optional; a section that is present adds its criteria. Unknown sections and keys are refused
with a one-line :class:`toolkit.core.errors.ConfigError` suggesting the closest valid name.
Names are checked twice: the policy alone at load time (:func:`load_policy` / :func:`policy_from_dict`: sections,
keys, types, ranges, the device profile), and against the model once it is loaded, before any input runs
(:func:`check_policy_model`: output names of ``[outputs.NAME]``, node names of ``[layers] ignore``, tensor names
of ``[fp16_overflow] allow``).

Example::

    [policy]
    name = "resnet_small mixed precision"   # free text, shown in the report

    # [outputs]                            # conditions may be strings (toolkit.compare.metrics.grammar), as
    # "*" = "CosineSimilarity>=0.999, logits:MaxAbsoluteError<=1e-2"   # --thresholds / tune --target write them;
                                           # OUTPUT: before an item bounds that output; the keys may also be
                                           # output names; or, equivalently, tables as below:
    [outputs."*"]                          # every graph output ("*"), or one table per output name
    CosineSimilarity = 0.999               # a metric of toolkit.compare.metrics.METRICS: the limit is a minimum
    RelativeEuclideanDistance = 0.01       # for higher-is-better metrics and a maximum for lower-is-better ones
                                           # (ranges: CosineSimilarity -1..1, ExactMatchRate 0..1, errors >= 0)
    [outputs.logits]                       # a named output overrides "*" for the metrics it sets (the others
    CosineSimilarity = 0.99                # still come from "*"): one criterion per output and metric
                                           # (:func:`output_limits`). ExactMatchRate applies to integer/bool
                                           # outputs, every other metric to float ones: "*" applies each metric
                                           # to the outputs of its kind, a named output must be of its kind

    [layers]
    max_abnormal = 5                       # tensors abnormal or overflowing (worst input), at most
    min_cosine = 0.99                      # every float tensor's CosineSimilarity, at least (not comparable fails)
    thresholds = "CosineSimilarity<0.999"  # abnormal lines for max_abnormal (the grammar of --thresholds; the
                                           # command line's --thresholds items apply after these)
    ignore = ["some_node"]                 # node names excluded from the layer criteria

    [tasks]
    required_pass_rate = 0.95              # share of input sets whose task checks all pass (0..1)
    metrics = ["mypkg.checks:my_check"]    # extra task checks (module:function), added to the zoo's own

    [fp16_overflow]
    allow = []                             # FP16-stored tensors allowed to overflow (default: none)

    [memory]
    max_arena_bytes = 8_000_000            # plan.arena_bytes, at most
    allow_conflicts = false                # default false: overlapping live tensors fail

    [latency]                              # judged on the worst distinct input shape of the input sets
    max_ms = 5.0                           # simulated device latency of one inference, ms (the profile schedule)
    min_throughput = 200.0                 # simulated device-bound throughput, requests/s (pipelined schedule)
    device = "atlas300i_pro"               # device profile: a built-in name or a .json file (relative to the policy)
    requests = 32                          # requests simulated for the throughput figure
    source = "schedule"                    # schedule (default; or omit source) | host: max_ms bounds the host wall
    statistic = "p50"                      #   time of the simulated run instead, p50 (default) | mean | max over
                                           #   input sets (host takes no device, requests or min_throughput)

    [placement]
    allowed_cpu_ops = ["NonMaxSuppression"]  # op types allowed on CPU (AI_CPU); others fail
"""

from __future__ import annotations

import difflib
import hashlib
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.compare.metrics import HIGHER_IS_BETTER, LOWER_IS_BETTER, METRICS
from toolkit.compare.metrics.applies import metric_applies, output_dtypes
from toolkit.compare.metrics.grammar import SHORT_FORMS, closest_metric, good_op, parse_conditions
from toolkit.compare.metrics.thresholds import parse_thresholds
from toolkit.compare.tasks import load_task
from toolkit.config.schema import _check_op_type
from toolkit.core.boundedjson import read_limited_bytes, toml_loads
from toolkit.core.errors import ConfigError, UsageError
from toolkit.core.text import suggest
from toolkit.core.userpaths import check_path
from toolkit.profile.device import DEFAULT_DEVICE, builtin_devices, load_device
from toolkit.signoff.criteria import CRITERIA

#: What a count-typed key takes (TOML integers only: 1.5 or 2.0 are refused), as its messages say it.
WHOLE_GE0 = "a whole number >= 0"
REQUESTS_RANGE = "a whole number 1..10000"
#: {section: {key: (python types accepted, description)}}; "outputs" is special (a table per output name).
SCHEMA: dict[str, dict[str, tuple]] = {
    "policy": {"name": ((str,), "free text"), "description": ((str,), "free text")},
    "layers": {"max_abnormal": ((int,), WHOLE_GE0), "min_cosine": ((int, float), "0..1"),
               "ignore": ((list,), "list of node names"),
               "thresholds": ((str,), "abnormal lines as --thresholds writes them, e.g. 'CosineSimilarity<0.999'")},
    "tasks": {"required_pass_rate": ((int, float), "0..1"), "metrics": ((list,), "list of module:function")},
    "fp16_overflow": {"allow": ((list,), "list of tensor names")},
    "memory": {"max_arena_bytes": ((int,), f"{WHOLE_GE0} (bytes)"), "allow_conflicts": ((bool,), "true/false")},
    "latency": {"max_ms": ((int, float), "ms > 0"), "min_throughput": ((int, float), "requests/s > 0"),
                "device": ((str,), "a built-in device name or a .json file"), "requests": ((int,), REQUESTS_RANGE),
                "source": ((str,), "schedule | host"), "statistic": ((str,), "p50 | mean | max")},
    "placement": {"allowed_cpu_ops": ((list,), "list of op types")},
}
SECTIONS = ("outputs",) + tuple(SCHEMA)
LATENCY_STATISTICS = ("p50", "mean", "max")
LATENCY_SOURCES = ("schedule", "host")
#: Metrics a policy may bound (those with a direction).
BOUNDABLE = tuple(n for n, s in METRICS.items() if s.direction in (HIGHER_IS_BETTER, LOWER_IS_BETTER))
#: (low, high) a limit must lie in, from each metric's range (toolkit.compare.metrics METRICS[...].unit):
#: the two higher-is-better metrics are bounded; every lower-is-better one is an error >= 0.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    n: {"CosineSimilarity": (-1.0, 1.0), "ExactMatchRate": (0.0, 1.0)}.get(n, (0.0, math.inf)) for n in BOUNDABLE}
#: List keys whose items must be strings: {(section, key): what the strings name}.
STRING_LISTS = {("layers", "ignore"): "node names", ("tasks", "metrics"): "module:function names",
                ("fp16_overflow", "allow"): "tensor names", ("placement", "allowed_cpu_ops"): "op types"}


@dataclass
class Policy:
    """A parsed, validated policy.

    Attributes:
        data: the policy as read (sections → keys → values), embedded verbatim in summary.json.
        path: the file it came from ("" for a dict).
        sha256: sha256 of the file bytes (of the canonical TOML-less repr for a dict).
    """

    data: dict
    path: str = ""
    sha256: str = ""
    sections: list[str] = field(default_factory=list)
    #: the [outputs] section as tables {output: {metric: limit}} (condition strings parsed; a strict condition's
    #: limit is the neighbouring double, None a limit removed with METRIC=off); None without [outputs]
    outputs: dict | None = None

    @property
    def name(self) -> str:
        return str(self.data.get("policy", {}).get("name", Path(self.path).stem if self.path else "policy"))

    def section(self, name: str) -> dict | None:
        if name == "outputs" and self.outputs is not None:
            return self.outputs
        return self.data.get(name)

    def thresholds(self) -> str | None:
        """The ``[layers] thresholds`` text (abnormal lines), or None."""
        return (self.data.get("layers") or {}).get("thresholds")


def load_policy(path: str | Path) -> Policy:
    """Read and validate a TOML policy (a ``[latency] device`` .json file is relative to the policy's folder).
    Raises ConfigError (one line) for a missing/invalid file, key, value or device profile, or a policy or device
    path the file system refuses (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file
    on the way, permission denied)."""
    p = Path(path)
    check_path(p, "policy file", ConfigError, "check the --policy path")
    if not p.exists() or p.is_dir():
        raise ConfigError(f"policy file '{p}' {'is a folder' if p.is_dir() else 'does not exist'}; check the "
                          "--policy path")

    # only a regular file within LIMITS["config"]: a FIFO, device or a link to /dev/zero is refused, never read
    raw = read_limited_bytes(p, "policy file", ConfigError, "give the policy as a regular UTF-8 TOML file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"policy file '{p}' is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                          "save it as UTF-8 (a byte-order mark is fine)") from None
    try:
        data = toml_loads(text, f"policy '{p}'", ConfigError)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"policy '{p}' is not valid TOML: {exc}") from None
    pol = policy_from_dict(data, where=f"policy '{p}'", base_dir=p.parent)
    pol.path, pol.sha256 = str(p), hashlib.sha256(raw).hexdigest()
    check_task_metrics(pol)
    return pol


def check_task_metrics(policy: Policy) -> None:
    """Import every ``[tasks] metrics`` entry (``module:function``) now, so that a bad one is refused naming the
    policy file and key before any input runs (not later as if given by --task-metric).

    Raises:
        ConfigError: the entry is not module:function, cannot be imported, or is not callable.
    """
    where = f"policy '{policy.path}'" if policy.path else "policy"
    for spec in (policy.section("tasks") or {}).get("metrics", []):
        load_task(spec, f"{where}: [tasks] metrics entry '{spec}'", ConfigError)


def policy_from_dict(data: dict, where: str = "policy", base_dir: str | Path | None = None) -> Policy:
    """Validate ``data`` (see module docstring) and wrap it. A ``[latency] device`` .json path is resolved
    against ``base_dir`` (default: the working directory) and loaded (toolkit.profile.device.load_device), so a
    bad device is refused here, not after the inputs ran. Raises ConfigError."""
    outputs = None
    for sec, body in data.items():
        if sec not in SECTIONS:
            raise ConfigError(f"{where}: unknown section [{sec}]{suggest(sec, SECTIONS)}")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: [{sec}] must be a table, got {type(body).__name__}")
        if sec == "outputs":
            outputs = _check_outputs(body, where)
        else:
            _check_section(sec, body, where)
        if sec == "latency":
            _check_device(body, where, base_dir)
        empty = _holds_no_criterion(sec, body, outputs)
        if empty:
            raise ConfigError(f"{where}: [{sec}] holds no criterion; {empty}, or remove the section")
    criteria_sections = [s for s in data if s != "policy"]
    if not criteria_sections:
        sections = ", ".join(f"[{s}]" for s in criterion_sections())
        raise ConfigError(f"{where}: no criteria; add at least one of {sections}")
    digest = hashlib.sha256(repr(sorted(data.items())).encode()).hexdigest()
    return Policy(data=data, sha256=digest, sections=criteria_sections, outputs=outputs)


def _holds_no_criterion(sec: str, body: dict, outputs: dict | None) -> str:
    """'' when section ``sec`` (validated) makes at least one criterion, else what to add: an ``[outputs]``
    without a limit (every limit ``off``, or no table), a ``[layers]`` without max_abnormal / min_cosine (only
    ``ignore``), a ``[memory]`` with allow_conflicts = true and no max_arena_bytes would be judged on nothing."""
    if sec == "outputs" and not any(v is not None for t in (outputs or {}).values() for v in t.values()):
        return 'add a limit, e.g. "*" = "CosineSimilarity>=0.999"'
    if sec == "layers" and not {"max_abnormal", "min_cosine"} & set(body):
        return "add max_abnormal or min_cosine"
    if sec == "memory" and "max_arena_bytes" not in body and body.get("allow_conflicts", False):
        return "add max_arena_bytes, or drop allow_conflicts = true"
    return ""


def criterion_sections() -> list[str]:
    """The policy sections that hold criteria: those of the criteria registry (toolkit.signoff.criteria.CRITERIA),
    in its order."""
    # imported here: criteria imports this module

    return list(CRITERIA)


def _check_section(sec: str, body: dict, where: str) -> None:
    keys = SCHEMA[sec]
    for key, val in body.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key '{key}' in [{sec}]{suggest(key, keys)}")
        types, desc = keys[key]
        if isinstance(val, bool) and bool not in types or not isinstance(val, types):
            raise ConfigError(f"{where}: [{sec}] {key} = {val!r}; expected {desc}")
        if (sec, key) in STRING_LISTS and not all(isinstance(v, str) and v for v in val):
            raise ConfigError(f"{where}: [{sec}] {key} = {val!r}; expected a list of {STRING_LISTS[sec, key]} "
                              "(non-empty strings)")
        if (sec, key) == ("layers", "thresholds"):
            try:
                parse_thresholds(val)
            except UsageError as exc:
                raise ConfigError(f"{where}: [layers] thresholds = {val!r}: {exc}") from None
        if (sec, key) == ("placement", "allowed_cpu_ops"):
            for op in val:  # ONNX op types, as the config's op type options (toolkit.config.schema._check_op_type)
                _check_op_type(op, f"{where}: [placement] allowed_cpu_ops")
    _check_ranges(sec, body, where)


def _check_ranges(sec: str, body: dict, where: str) -> None:
    bad = None
    if sec == "layers" and body.get("max_abnormal", 0) < 0:
        bad = ("max_abnormal", WHOLE_GE0)
    if sec == "layers" and not 0 <= body.get("min_cosine", 0) <= 1:
        bad = ("min_cosine", "0..1")
    if sec == "tasks" and not 0 <= body.get("required_pass_rate", 1) <= 1:
        bad = ("required_pass_rate", "a share 0..1, e.g. 0.95")
    if sec == "memory" and body.get("max_arena_bytes", 0) < 0:
        bad = ("max_arena_bytes", f"{WHOLE_GE0} (bytes)")
    if sec == "latency":
        bad = _check_latency(body, where) or bad
    if bad:
        raise ConfigError(f"{where}: [{sec}] {bad[0]} = {body[bad[0]]!r}; expected {bad[1]}")


def _check_latency(body: dict, where: str) -> tuple[str, str] | None:
    if "max_ms" not in body and "min_throughput" not in body:
        raise ConfigError(f"{where}: [latency] needs max_ms (simulated latency budget in ms, e.g. max_ms = 5.0) "
                          "and/or min_throughput (requests/s)")
    src = body.get("source", "schedule")
    if src not in LATENCY_SOURCES:
        raise ConfigError(f"{where}: [latency] source = '{src}' is not valid{suggest(src, LATENCY_SOURCES)}")
    if body.get("statistic", "p50") not in LATENCY_STATISTICS:
        st = body["statistic"]
        raise ConfigError(f"{where}: [latency] statistic = '{st}' is not valid{suggest(st, LATENCY_STATISTICS)}")
    if src == "host" and ("min_throughput" in body or "max_ms" not in body):
        raise ConfigError(f"{where}: [latency] source = 'host' bounds host wall time with max_ms only; "
                          "min_throughput is a simulated-schedule figure: omit source (the default) or set "
                          "source = 'schedule'")
    ignored = [k for k in ("device", "requests") if k in body]
    if src == "host" and ignored:
        raise ConfigError(f"{where}: [latency] source = 'host' measures this host's wall time, so "
                          f"{' and '.join(ignored)} would be ignored; remove {' and '.join(ignored)}, or omit source "
                          "(the default, 'schedule') to simulate the device")
    for key, ok, desc in (("max_ms", lambda v: v > 0, "ms > 0"), ("min_throughput", lambda v: v > 0, "requests/s > 0"),
                          ("requests", lambda v: 1 <= v <= 10_000, REQUESTS_RANGE)):
        if key in body and not (ok(body[key]) and body[key] == body[key] and abs(body[key]) != float("inf")):
            return key, desc
    return None


def _check_outputs(body: dict, where: str) -> dict:
    """Validate ``[outputs]`` and return it as tables {output: {metric: limit}} (see :attr:`Policy.outputs`)."""
    table: dict[str, dict] = {}
    for out, limits in body.items():
        if not isinstance(limits, dict) and out in METRICS:
            raise ConfigError(f"{where}: [outputs] {out} = {limits!r}: '{out}' was read as an output name (each key "
                              "of [outputs] names a graph output); for limits on every output write "
                              f"\"*\" = \"{out}{good_op(out)}{_example_limit(out)}\" under [outputs], or [outputs.\"*\"] "
                              f"with {out} = {_example_limit(out)} under it")
        if isinstance(limits, str):
            for target, metric, limit in _condition_string(out, limits, where):
                table.setdefault(target, {})[metric] = limit
            continue
        if not isinstance(limits, dict) or not limits:
            raise ConfigError(f"{where}: [outputs.\"{out}\"] must be a table of metric = limit, e.g. CosineSimilarity = "
                              "0.999, or a condition string, e.g. \"CosineSimilarity>=0.999\"")
        for short, limit in limits.items():
            metric = SHORT_FORMS.get(short, short)
            if metric not in BOUNDABLE:
                close = closest_metric(metric, BOUNDABLE)  # as the condition grammar suggests (short forms too)
                hint = f" (did you mean '{close}'?)" if close else suggest(metric, BOUNDABLE)
                raise ConfigError(f"{where}: [outputs.\"{out}\"] unknown metric '{metric}'{hint}")
            if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                raise ConfigError(f"{where}: [outputs.\"{out}\"] {metric} = {limit!r}; expected a number")
            lo, hi = METRIC_RANGES[metric]
            if not (math.isfinite(limit) and lo <= limit <= hi):
                rng = f"{lo:g}..{hi:g}" if math.isfinite(hi) else f"a finite number >= {lo:g}"
                raise ConfigError(f"{where}: [outputs.\"{out}\"] {metric} = {limit!r} is outside the metric's range; "
                                  f"expected {rng} ({METRICS[metric].unit})")
            table.setdefault(out, {})[metric] = limit
    return table


def _condition_string(key: str, text: str, where: str) -> list[tuple[str, str, float | None]]:
    """[(output, metric, limit)] of an ``[outputs]`` condition string (``KEY = "CosineSimilarity>=0.999, ..."``):
    the inclusive limit of each condition (:attr:`toolkit.compare.metrics.grammar.Condition.line`), None for
    ``METRIC=off``; an item's ``OUTPUT:`` prefix names its output (under ``"*"``; under an output name it must
    be that name). Raises ConfigError naming the key and the item."""
    try:
        conditions = parse_conditions(text, "condition", allowed=BOUNDABLE)
    except UsageError as exc:
        raise ConfigError(f"{where}: [outputs] {key} = {text!r}: {exc}") from None
    if not conditions:
        raise ConfigError(f"{where}: [outputs] {key} = {text!r} holds no condition; e.g. \"CosineSimilarity>=0.999\"")
    out = []
    for c in conditions:
        if key != "*" and c.output not in (None, key):
            raise ConfigError(f"{where}: [outputs] {key} = {text!r}: item '{c.text}' names output '{c.output}' under "
                              f"the key of output '{key}'; drop the prefix, or move the item to \"*\"")
        out.append((c.output or key, c.metric, None if c.off else c.line))
    return out


def _example_limit(metric: str) -> str:
    """A plausible limit of ``metric`` for an example in a message (0.999 for higher-is-better, 0.01 else)."""
    return "0.999" if METRICS[metric].direction == HIGHER_IS_BETTER else "0.01"


def _check_device(body: dict, where: str, base_dir: str | Path | None) -> None:
    """Load ``[latency] device`` now (a .json path resolved against ``base_dir`` and stored back resolved)."""
    if "device" not in body:
        return
    spec, names = body["device"], builtin_devices()
    fix = f"give a built-in device ({', '.join(names)}) or a .json device profile, or omit device for {DEFAULT_DEVICE}"
    if spec in names:
        return
    if not spec.strip():
        raise ConfigError(f"{where}: [latency] device = ''; {fix}")
    if not spec.lower().endswith(".json"):
        raise ConfigError(f"{where}: [latency] device = {spec!r} is neither a built-in device{suggest(spec, names)} "
                          "nor a .json file")
    path = Path(base_dir) / spec if base_dir is not None else Path(spec)
    check_path(path, f"{where}: [latency] device file", ConfigError, fix)
    if not path.is_file():
        raise ConfigError(f"{where}: [latency] device = {spec!r}: file '{path}' does not exist; {fix}")
    try:
        load_device(path)
    except ConfigError as exc:
        raise ConfigError(f"{where}: [latency] device = {spec!r}: {exc}") from None
    body["device"] = str(path)


def _hint(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    if close:
        return f" (did you mean '{close[0]}'?)"
    shown = sorted(choices)[:8]
    return f" (the model has {len(choices)}: {', '.join(shown)}{', ...' if len(choices) > 8 else ''})"


def _check_output_dtypes(section: dict, dtypes: dict[str, tuple[str, str]], n_outputs: int, where: str) -> None:
    """Refuse a metric that cannot be computed on the output(s) it bounds (see :func:`metric_applies`); a "*"
    metric only when every one of the ``n_outputs`` outputs has a known dtype and none fits."""
    def kind(metric):
        return "integer/bool" if METRICS[metric].dtype_class == "integer" else "float"

    for target, limits in section.items():
        for metric in limits:
            if target != "*" and target in dtypes and not metric_applies(metric, dtypes[target][1]):
                raise ConfigError(f"{where}: [outputs.\"{target}\"] {metric}: output '{target}' is "
                                  f"{dtypes[target][0]}, but {metric} applies to {kind(metric)} tensors only; "
                                  f"{_metric_fix(dtypes[target][1])}")
            fits = [o for o, (_, c) in dtypes.items() if metric_applies(metric, c)]
            if target == "*" and dtypes and not fits and len(dtypes) == n_outputs:
                shown = ", ".join(f"'{o}' {d}" for o, (d, _) in list(dtypes.items())[:6])
                raise ConfigError(f"{where}: [outputs.\"*\"] {metric} applies to {kind(metric)} tensors only, and "
                                  f"no output of the model is one (outputs: {shown}); remove it or bound a metric "
                                  "of the outputs' kind")


def _metric_fix(dclass: str) -> str:
    if dclass == "integer":
        return "bound ExactMatchRate (share of equal elements, 0..1) on an integer output"
    if dclass == "float":
        return "bound a float metric such as CosineSimilarity or MaxAbsoluteError on a float output"
    return "no comparison metric applies to this output's dtype: remove the limit"


def check_policy_model(policy: Policy, model) -> None:
    """Refuse names of ``policy`` that are not in ``model`` (an onnx.ModelProto, as loaded): ``[outputs.NAME]``
    (graph outputs), ``[layers] ignore`` (node names), ``[fp16_overflow] allow`` (tensor names: graph inputs,
    node outputs, initializers); and output metrics that cannot be computed on the output's dtype
    (ExactMatchRate on a float output, a float metric on an integer/bool one, any metric on a string output;
    for ``"*"``, a metric that fits no output: :func:`output_limits` applies "*" to the outputs it fits).
    Call it once the model is loaded, before any input runs.

    Raises:
        ConfigError: one line naming the policy, the section, the unknown name and the closest model name, or
            the output, its dtype and the metric.
    """
    where = f"policy '{policy.path}'" if policy.path else "policy"
    g = model.graph
    outputs = [o.name for o in g.output]
    for name in policy.section("outputs") or {}:
        if name != "*" and name not in outputs:
            raise ConfigError(f"{where}: [outputs.\"{name}\"] names no output of the model{_hint(name, outputs)}; "
                              "use one of its outputs or \"*\" for all")
    _check_output_dtypes(policy.section("outputs") or {}, output_dtypes(model), len(outputs), where)
    nodes = [n.name for n in g.node if n.name]
    for name in (policy.section("layers") or {}).get("ignore", []):
        if name not in set(nodes):
            raise ConfigError(f"{where}: [layers] ignore names '{name}', which is not a node of the model"
                              f"{_hint(name, nodes)}; ignore takes node names")
    tensors = list(dict.fromkeys([i.name for i in g.input] + [t for n in g.node for t in n.output if t]
                                 + [i.name for i in g.initializer]))
    for name in (policy.section("fp16_overflow") or {}).get("allow", []):
        if name not in set(tensors):
            raise ConfigError(f"{where}: [fp16_overflow] allow names '{name}', which is not a tensor of the model"
                              f"{_hint(name, tensors)}; allow takes tensor names")
