"""Device profiles: the figures the cost model (toolkit.profile.cost) turns FLOPs and bytes into time.

A profile is a JSON object with the fields of :class:`DeviceProfile`. Two are built in
(``toolkit/profile/devices/*.json``): ``atlas300i_pro`` (an inference card, the default) and ``ascend910``
(a training card). Each built-in says in its ``source`` object where every figure comes from: a vendor's
published peak, a value derived from published ones, or a labelled assumption to measure and override.

A user profile is a ``.json`` file with every field, or with ``"base": "<built-in name>"`` and only the
fields it changes::

    {"base": "atlas300i_pro", "name": "my-card", "launch_overhead_us": 6.5, "host_gflops": 20}

A profile read from a user's file is labelled by the file name and the name inside (:func:`file_label`:
``my-card.json``, or ``slow.json (name 'atlas300i_pro')`` for a file that kept a built-in's name), so evidence
computed on it cannot be mistaken for the built-in's.

Units: TFLOPS = 1e12 floating-point operations per second; GB/s = 1e9 bytes per second; µs.
Errors are :class:`toolkit.core.errors.ConfigError` with one line naming the file, the field and the fix. A field
given twice in one file is refused (JSON would silently keep the last), and every ``unsupported_ops`` entry must
be an ONNX op type (``onnx.defs.get_all_schemas``; case-sensitive), the closest one suggested otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.core.boundedjson import json_loads, read_limited
from toolkit.core.errors import ConfigError
from toolkit.core.text import suggest
from toolkit.core.textfile import not_regular_reason
from toolkit.core.userpaths import check_path

DEVICES_DIR = Path(__file__).with_name("devices")
DEFAULT_DEVICE = "atlas300i_pro"


@dataclass(frozen=True)
class DeviceProfile:
    """Throughputs, bandwidths and fixed costs of a simulated device and its host.

    Attributes:
        name: short name: a built-in's file stem, or for a user file its :func:`file_label`.
        description: one sentence.
        cube_fp16_tflops / cube_fp32_tflops: cube (matrix) unit peak for FP16 / FP32 kernels, TFLOPS.
        vector_fp16_tflops / vector_fp32_tflops: vector unit peak, TFLOPS.
        memory_bandwidth_gbps: device memory bandwidth, GB/s.
        launch_overhead_us: fixed cost added to every device kernel (task launch), µs.
        h2d_bandwidth_gbps / d2h_bandwidth_gbps: host-to-device / device-to-host copy bandwidth, GB/s.
        host_device_latency_us: fixed cost of one copy, µs.
        host_gflops: host CPU FP32 throughput for CPU-placed ops, GFLOPS.
        host_memory_bandwidth_gbps: host memory bandwidth for CPU-placed ops, GB/s.
        host_op_overhead_us: fixed cost of one CPU-placed op, µs.
        unsupported_ops: ONNX op types this device cannot run (they fall back to the CPU).
        source: {field: where the figure comes from}.
    """

    name: str
    description: str
    cube_fp16_tflops: float
    cube_fp32_tflops: float
    vector_fp16_tflops: float
    vector_fp32_tflops: float
    memory_bandwidth_gbps: float
    launch_overhead_us: float
    h2d_bandwidth_gbps: float
    d2h_bandwidth_gbps: float
    host_device_latency_us: float
    host_gflops: float
    host_memory_bandwidth_gbps: float
    host_op_overhead_us: float
    unsupported_ops: tuple[str, ...] = ()
    source: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["unsupported_ops"] = list(self.unsupported_ops)
        return d


#: Numeric fields: rates (> 0) and fixed costs (>= 0).
RATE_FIELDS = ("cube_fp16_tflops", "cube_fp32_tflops", "vector_fp16_tflops", "vector_fp32_tflops",
               "memory_bandwidth_gbps", "h2d_bandwidth_gbps", "d2h_bandwidth_gbps", "host_gflops",
               "host_memory_bandwidth_gbps")
COST_FIELDS = ("launch_overhead_us", "host_device_latency_us", "host_op_overhead_us")
FIELDS = tuple(f.name for f in dataclasses.fields(DeviceProfile))

#: Sanity range (inclusive) and unit of every numeric field: far wider than any real device, narrow enough
#: that a typo (1e-300 GB/s, 1e300 µs) is refused instead of turning into absurd times (docs/profile.md).
_TFLOPS, _GBPS, _US = (0.001, 100000.0, "TFLOPS"), (0.01, 100000.0, "GB/s"), (0.0, 100000.0, "µs")
RANGES: dict[str, tuple[float, float, str]] = {
    **{f: _TFLOPS for f in ("cube_fp16_tflops", "cube_fp32_tflops", "vector_fp16_tflops", "vector_fp32_tflops")},
    **{f: _GBPS for f in ("memory_bandwidth_gbps", "h2d_bandwidth_gbps", "d2h_bandwidth_gbps",
                          "host_memory_bandwidth_gbps")},
    "host_gflops": (0.01, 1000000.0, "GFLOPS"),
    **{f: _US for f in COST_FIELDS},
}


def builtin_devices() -> list[str]:
    """Names of the built-in profiles (sorted)."""
    return sorted(p.stem for p in DEVICES_DIR.glob("*.json"))


def load_device(spec: str | Path | None = None) -> DeviceProfile:
    """The profile named ``spec``: a built-in name, a ``.json`` file, or ``None`` for :data:`DEFAULT_DEVICE`.

    Raises:
        ConfigError: unknown name, unreadable or invalid JSON, unknown/missing field, a value that is not a
            finite number inside its :data:`RANGES` entry, a path the file system refuses
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied).
    """
    spec = DEFAULT_DEVICE if spec is None else str(spec)
    if spec in builtin_devices():
        return _from_file(DEVICES_DIR / f"{spec}.json")
    p = Path(spec)
    if p.suffix.lower() != ".json":
        raise ConfigError(f"--device '{spec}' is neither a built-in device{suggest(spec, builtin_devices())} "
                          "nor a .json file")
    check_path(p, "device file", ConfigError, f"give a built-in name ({', '.join(builtin_devices())}) or an "
               "existing .json file")
    if not p.is_file():
        why = f"is {not_regular_reason(p)}" if p.exists() or p.is_symlink() else "does not exist"
        raise ConfigError(f"device file '{p}' {why}; give a built-in name ({', '.join(builtin_devices())}) "
                          "or an existing .json file")
    return _from_file(p)


def file_label(path: Path, name: str) -> str:
    """Label of a user device file: its file name, plus the name inside when that is not the file's stem
    (``mine.json``; ``slow.json (name 'atlas300i_pro')``)."""
    return path.name if name == path.stem else f"{path.name} (name '{name}')"


def _from_file(path: Path) -> DeviceProfile:
    try:
        # a regular file within LIMITS["config"], nested at most MAX_DEPTH (toolkit.core.boundedjson): /dev/zero is refused
        data = json_loads(read_limited(path, "device file", ConfigError, "save it as UTF-8 JSON"),
                          f"device file '{path}'", ConfigError, object_pairs_hook=lambda pairs: _unique_keys(pairs, path))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"device file '{path}' is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"device file '{path}' must hold a JSON object of fields, got {type(data).__name__}")
    dev = device_from_dict(data, where=f"device file '{path}'")
    if path.resolve().parent != DEVICES_DIR.resolve():
        dev = dataclasses.replace(dev, name=file_label(path, dev.name))
    return dev


def _unique_keys(pairs: list[tuple[str, object]], path: Path) -> dict:
    """``json.loads`` object hook: the object as a dict, refusing a key given twice (JSON parsers would keep
    the last one silently, RFC 8259 §4 leaves it undefined). Raises ConfigError naming the key."""
    out: dict = {}
    for key, val in pairs:
        if key in out:
            raise ConfigError(f"device file '{path}': field '{key}' is given twice; keep one")
        out[key] = val
    return out


def onnx_op_types() -> set[str]:
    """Names of every ONNX op type onnx knows (``onnx.defs.get_all_schemas``: the default domain, ai.onnx.ml
    and the preview domains)."""
    import onnx.defs

    return {s.name for s in onnx.defs.get_all_schemas()}


def device_from_dict(data: dict, where: str = "device") -> DeviceProfile:
    """Build and validate a profile from a dict (``base`` merges a built-in first). Raises ConfigError."""
    data = dict(data)
    base = data.pop("base", None)
    if base is not None:
        if base not in builtin_devices():
            raise ConfigError(f"{where}: base '{base}' is not a built-in device{suggest(str(base), builtin_devices())}")
        merged = load_device(base).to_dict()
        merged["source"] = {**merged["source"], **{k: f"overridden in {where}" for k in data if k in FIELDS}}
        merged.update(data)
        data = merged
    for key in data:
        if key not in FIELDS:
            raise ConfigError(f"{where}: unknown field '{key}'{suggest(key, FIELDS)}")
    missing = [f for f in FIELDS if f not in data and f not in ("unsupported_ops", "source", "description")]
    if missing:
        raise ConfigError(f"{where}: missing field(s) {', '.join(missing)}; give them or start from "
                          f"\"base\": \"{DEFAULT_DEVICE}\"")
    _check_values(data, where)
    data["unsupported_ops"] = tuple(data.get("unsupported_ops", ()))
    data.setdefault("description", "")
    data.setdefault("source", {})
    return DeviceProfile(**data)


def _check_values(data: dict, where: str) -> None:
    if not isinstance(data["name"], str) or not data["name"].strip():
        raise ConfigError(f"{where}: name must be a non-empty string")
    for name in RATE_FIELDS + COST_FIELDS:
        val = data[name]
        lo, hi, unit = RANGES[name]
        ok = isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val)
        if not ok or not lo <= val <= hi:
            raise ConfigError(f"{where}: {name} = {val!r}; expected a number in {lo:g}..{hi:g} {unit} "
                              "(sanity ranges: docs/profile.md)")
    ops = data.get("unsupported_ops", [])
    if not isinstance(ops, (list, tuple)) or not all(isinstance(o, str) for o in ops):
        raise ConfigError(f"{where}: unsupported_ops must be a list of ONNX op type names")
    known = onnx_op_types() if ops else set()
    for op in ops:
        if op not in known:
            raise ConfigError(f"{where}: unsupported_ops names '{op}', which is not an ONNX op type"
                              f"{suggest(op, known)}; op types are case-sensitive ('Relu')")
    if not isinstance(data.get("source", {}), dict):
        raise ConfigError(f"{where}: source must be an object {{field: where the figure comes from}}")
