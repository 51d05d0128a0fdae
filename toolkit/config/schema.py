"""Compile/run configuration, with the converter's option names.

A config is a JSON or TOML file (or a dict) whose keys are the fields of :class:`Config`. Unknown keys and
invalid values are refused with a :class:`toolkit.core.errors.ConfigError` that suggests the closest valid name.

Paths inside a config file (``keep_dtype``, ``modify_mixlist``, ``fusion_switch_file``) are resolved
relative to the config file's folder.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from toolkit.config.cache_mode import default_mode
from toolkit.config.keep_dtype import normalise_keep_dtype, parse_keep_entry
from toolkit.core.boundedjson import json_loads, read_limited, toml_loads
from toolkit.core.errors import ConfigError
from toolkit.core.text import suggest
from toolkit.core.textfile import not_regular_reason
from toolkit.core.userpaths import check_path

PRECISION_MODES = ("force_fp32", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype", "allow_mix_precision")
IMPL_MODES = ("high_precision", "high_performance")
OVERFLOW_MODES = ("inf_nan", "saturation")
REUSE_POLICIES = ("off", "conservative", "aggressive", "greedy")  # "greedy": older name of "aggressive"
#: Largest size input_shape / gears may give a dim (ONNX dims are int64).
_MAX_DIM = 2**63 - 1


def _cache_mode_default() -> str:
    return default_mode()


@dataclass
class Config:
    """Every option the compiler and runtimes read.

    Attributes:
        precision_mode: one of :data:`PRECISION_MODES`; default ``allow_mix_precision`` (white ops FP16,
            black ops FP32, gray ops follow their input).
        keep_dtype: node names (or ``OpName::<name>``) or ``OpType::<op>`` entries kept in FP32 (a list, or a
            file with one per line; toolkit.precision.options). ``OpName::`` is dropped when read.
        modify_mixlist: ``{"black-list": {"to-add": [...], "to-remove": [...]}, "white-list": {...},
            "gray-list": {...}}`` (a dict, or a JSON file), edits to the default lists.
        op_select_implmode: ``high_performance`` (default, as the converter: FP16 kernels of reductions and
            normalisations accumulate in FP16) or ``high_precision`` (FP32 accumulation).
        optypelist_for_implmode: when given, ``op_select_implmode`` applies only to these op types; all
            other ops keep the default ``high_performance`` (as the converter).
        overflow_mode: ``inf_nan`` (IEEE, default) or ``saturation`` (FP16 results clamp to ±65504).
        fusion_level: 0 none, 1 BatchNorm folding + buffer fusion, 2 everything (default).
        fusion_switch_file: the converter's fusion switch JSON ({"Switch": {"GraphFusion": {...}, "UBFusion": {...}}}).
        input_shape: converter syntax ``"x:1,3,640,640;mask:1,16"``; binds dynamic dims for compile. Each input
            once, sizes 1..2**63-1; checked against the model at compile (toolkit.compiler.passes.bind_shapes:
            known input names, static dims, one size per shared symbolic dim; ConfigError).
        memory_reuse: ``aggressive`` (default: greedy-by-size best-fit offsets, in-place elementwise outputs,
            views for Reshape/Flatten/Squeeze/Unsqueeze/Identity), ``conservative`` (a freed block is reused by
            a tensor of the same size only) or ``off`` (every tensor its own range). ``greedy`` is accepted as
            the older name of ``aggressive``.
        memory_alignment: arena offset alignment in bytes (default 512).
        disable_reuse: tensor, node or kernel names whose tensors (a node's: its kernel's outputs) get
            exclusive arena ranges: never shared, never in-place, never a view.
        device_memory_bytes: device memory in bytes; a plan whose arena is larger is a compile error
            (default ``None``: no limit).
        dynamic_batch_size: batch gears, converter syntax ``"1,2,4,8"``; ``input_shape`` marks the batch dim
            (dim 0) of every batched input with -1. One plan per gear (toolkit.gears).
        dynamic_dims: dims gears, converter syntax ``"128;256;512"``: one ';'-separated group per gear, each
            giving ','-separated values for all -1 dims of ``input_shape`` in order (``"128,128;256,256"`` for
            two). Not together with ``dynamic_batch_size``.
        pad_value: value padded inputs are filled with, per input: ``"mask:0;x:0"`` (or a {name: value} dict);
            inputs not named get 0 (default ``""``: all 0). Each input once, a finite number (no NaN/inf/bool).
        op_placement: ``{op type or node name: "CPU" | "NPU"}`` (default empty: every op the simulated NPU
            supports on the NPU). CPU-placed ops run in FP32 on the host with ``MemcpyD2H``/``MemcpyH2D``
            kernels around them; a node-name entry wins over an op-type entry; ops the NPU does not support
            (toolkit.precision.support) go to the CPU whatever is asked. Keys are checked against the model at
            compile time (ConfigError). See docs/placement.md.
        op_compiler_cache_mode: the compile cache: ``enable`` (default, or ``$NPUSCOPE_COMPILE_CACHE_MODE``
            when set), ``disable``, or ``force`` (rebuild and overwrite entries). See docs/compile-cache.md.
        op_compiler_cache_dir: the cache folder (default ``$NPUSCOPE_COMPILE_CACHE``, else
            ``$XDG_CACHE_HOME/npuscope/compile`` or ``~/.cache/npuscope/compile``).
    """

    precision_mode: str = "allow_mix_precision"
    keep_dtype: list[str] = field(default_factory=list)
    modify_mixlist: dict = field(default_factory=dict)
    op_select_implmode: str = "high_performance"
    optypelist_for_implmode: list[str] = field(default_factory=list)
    overflow_mode: str = "inf_nan"
    fusion_level: int = 2
    fusion_switch_file: dict = field(default_factory=dict)
    input_shape: str = ""
    memory_reuse: str = "aggressive"
    memory_alignment: int = 512
    disable_reuse: list[str] = field(default_factory=list)
    device_memory_bytes: int | None = None
    op_placement: dict[str, str] = field(default_factory=dict)
    dynamic_batch_size: str = ""
    dynamic_dims: str = ""
    pad_value: str | dict = ""
    op_compiler_cache_mode: str = field(default_factory=lambda: _cache_mode_default())
    op_compiler_cache_dir: str = ""

    #: The config file this config was read from ("" for defaults / a dict); not an option (not in to_dict).
    source: ClassVar[str] = ""
    #: Options the command line overrode (their errors do not name the file); see :meth:`with_overrides`.
    overridden: ClassVar[frozenset] = frozenset()
    #: {option: path} of the options read from their own file (keep_dtype, modify_mixlist, fusion_switch_file),
    #: named by :meth:`where`; not an option (not in to_dict).
    files: ClassVar[dict] = {}

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, data: dict[str, Any], base: Path | None = None, where: str = "config") -> "Config":
        names = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in names:
                raise ConfigError(f"{where}: unknown option '{key}'{suggest(key, names)}")
        cfg = cls(**{k: v for k, v in data.items()})
        cfg._resolve_files(base or Path.cwd(), where)
        cfg.validate(where)
        return cfg

    @classmethod
    def load(cls, path: str | Path | None) -> "Config":
        """Read a ``.json`` or ``.toml`` config; ``None`` gives the defaults. Raises ConfigError (exit 2): a file that
        does not exist, is a folder, is not JSON / TOML or holds a bad option, or a path the file system refuses
        (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way, permission
        denied)."""
        if path is None:
            return cls()
        p = Path(path)
        if str(path).strip():
            check_path(p, "config file", ConfigError, "pass a .json or .toml file to --config")
        if str(path).strip() and p.exists() and not p.is_dir() and not p.is_file():
            return cls._load_stream(p)  # a pipe, e.g. bash's --config <(echo '{...}')
        if not str(path).strip() or not p.is_file():
            what = "is a folder" if str(path).strip() and p.is_dir() else "does not exist"
            raise ConfigError(f"config file '{path}' {what}; pass a .json or .toml file to --config")
        if p.suffix.lower() not in (".json", ".toml"):
            raise ConfigError(f"config file '{p}' has suffix '{p.suffix}'; configs are .json or .toml")
        text = _read_text(p, "config", None)
        where = f"config file '{p}'"
        try:
            data = (toml_loads(text, where, ConfigError) if p.suffix.lower() == ".toml"
                    else json_loads(text, where, ConfigError))
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file '{p}' is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file '{p}' must hold an object of options, got {type(data).__name__}")
        try:
            cfg = cls.from_dict(data, p.parent, where=f"config '{p}'")
            cfg.input_shapes(dynamic=True)  # parsed where it is used; checked here too, for the file's name
        except ConfigError as exc:
            if str(p) in str(exc):
                raise
            raise ConfigError(f"config '{p}': {exc}") from None
        cfg.source = str(p)
        return cfg

    @classmethod
    def _load_stream(cls, p: Path) -> "Config":
        """A config read from a pipe or device (no suffix to go by): JSON if it parses as JSON, else TOML."""
        # a pipe is read (at most LIMITS["config"]); a device such as /dev/zero is refused before any byte is read
        text = read_limited(p, "config", ConfigError, "pass a .json or .toml file", pipes=True)
        try:
            data = json_loads(text, f"config '{p}'", ConfigError)
        except json.JSONDecodeError:
            try:
                data = toml_loads(text, f"config '{p}'", ConfigError)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config '{p}' is neither valid JSON nor valid TOML ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config '{p}' must hold an object of options, got {type(data).__name__}")
        cfg = cls.from_dict(data, Path.cwd(), where=f"config '{p}'")
        cfg.source = str(p)
        return cfg

    def with_overrides(self, **overrides) -> "Config":
        """A copy with the options given (not None) replaced, validated as ``command line``; the copy keeps
        :attr:`source` and records the replaced names in :attr:`overridden`. Raises ConfigError."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if not given:
            return self
        data = self.to_dict()
        data.update(given)
        cfg = Config.from_dict(data, where="command line")
        cfg.source, cfg.overridden = self.source, frozenset(given) | self.overridden
        cfg.files = {k: v for k, v in self.files.items() if k not in cfg.overridden}
        return cfg

    def origin(self, *options: str) -> str:
        """Where ``options`` were set, for messages: ``config 'a.toml'`` when read from a file, ``command line``
        when the command line overrode one of them, else ``config``."""
        if any(o in self.overridden for o in options):
            return "command line"
        return f"config '{self.source}'" if self.source else "config"

    def where(self, option: str) -> str:
        """``option`` prefixed with the config file it came from (``config 'a.toml': input_shape``), for
        errors found later (e.g. against the model at compile time); just ``option`` for defaults/dicts. An
        option read from its own file also names it (``config 'a.toml': keep_dtype file 'keep.txt'``)."""
        origin = self.origin(option)
        text = option if origin == "config" else f"{origin}: {option}"
        if option in self.files and option not in self.overridden:
            text += f" file '{self.files[option]}'"
        return text

    def _resolve_files(self, base: Path, where: str) -> None:
        files = {}
        if isinstance(self.keep_dtype, str):
            files["keep_dtype"] = self.keep_dtype
            self.keep_dtype = _read_lines(base / self.keep_dtype, "keep_dtype", where)
        if isinstance(self.modify_mixlist, str):
            files["modify_mixlist"] = self.modify_mixlist
            self.modify_mixlist = _read_json(base / self.modify_mixlist, "modify_mixlist", where)
        if isinstance(self.fusion_switch_file, str) and self.fusion_switch_file:
            files["fusion_switch_file"] = self.fusion_switch_file
            self.fusion_switch_file = _read_json(base / self.fusion_switch_file, "fusion_switch_file", where)
        if files:
            self.files = files
        if isinstance(self.optypelist_for_implmode, str):
            self.optypelist_for_implmode = [s.strip() for s in self.optypelist_for_implmode.split(",") if s.strip()]

    def validate(self, where: str = "config") -> None:
        """Raise ConfigError for any value outside its allowed set."""
        for name, allowed in (("precision_mode", PRECISION_MODES), ("op_select_implmode", IMPL_MODES),
                              ("overflow_mode", OVERFLOW_MODES), ("memory_reuse", REUSE_POLICIES)):
            val = getattr(self, name)
            if val not in allowed:
                raise ConfigError(f"{where}: {name} = '{val}' is not valid{suggest(str(val), allowed)}")
        for name, typ, what in (("precision_mode", str, "a string"), ("op_select_implmode", str, "a string"),
                                ("overflow_mode", str, "a string"), ("memory_reuse", str, "a string"),
                                ("input_shape", str, 'a string like "x:1,3,224,224"'),
                                ("modify_mixlist", dict, "an object (or a JSON file path)"),
                                ("fusion_switch_file", dict, "an object (or a JSON file path)")):
            if not isinstance(getattr(self, name), typ):
                raise ConfigError(f"{where}: {name} = {getattr(self, name)!r}; expected {what}")
        for name in ("keep_dtype", "optypelist_for_implmode"):
            val = getattr(self, name)
            if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
                raise ConfigError(f"{where}: {name} = {val!r}; expected a list of strings (or a file path)")
        for key, edits in self.modify_mixlist.items():
            if not isinstance(edits, dict) or not all(isinstance(v, list) and all(isinstance(o, str) for o in v)
                                                      for v in edits.values()):
                raise ConfigError(f"{where}: modify_mixlist['{key}'] must be {{\"to-add\": [op types], "
                                  "\"to-remove\": [op types]}")
            for ops in edits.values():
                for op in ops:
                    _check_op_type(op, f"{where}: modify_mixlist['{key}']")

        for entry in self.keep_dtype:
            try:
                parsed = parse_keep_entry(entry)
            except ValueError:
                raise ConfigError(f"{where}: keep_dtype has an empty entry {entry!r}; give node names, "
                                  "'OpName::name' or 'OpType::X' entries, one per line in a keep_dtype file") from None
            if parsed.kind == "type":
                _check_op_type(parsed.value, f"{where}: keep_dtype entry '{entry}'")
        self.keep_dtype = normalise_keep_dtype(self.keep_dtype)
        for op in self.optypelist_for_implmode:
            _check_op_type(op, f"{where}: optypelist_for_implmode")
        if isinstance(self.fusion_level, bool) or self.fusion_level not in (0, 1, 2):
            raise ConfigError(f"{where}: fusion_level = {self.fusion_level!r}; expected 0 (none), 1 (BN folding + "
                              "buffer fusion) or 2 (all)")
        if isinstance(self.memory_alignment, bool) or not isinstance(self.memory_alignment, int) or \
                self.memory_alignment <= 0 or \
                self.memory_alignment & (self.memory_alignment - 1):
            raise ConfigError(f"{where}: memory_alignment = {self.memory_alignment!r}; expected a power of two in bytes, e.g. 512")
        if not isinstance(self.disable_reuse, list) or not all(isinstance(x, str) for x in self.disable_reuse):
            raise ConfigError(f"{where}: disable_reuse must be a list of tensor, node or kernel names")
        if self.device_memory_bytes is not None and (not isinstance(self.device_memory_bytes, int)
                                                     or self.device_memory_bytes <= 0):
            raise ConfigError(f"{where}: device_memory_bytes = {self.device_memory_bytes!r}; expected a positive "
                              "number of bytes, e.g. 8589934592, or null for no limit")
        if not isinstance(self.keep_dtype, list):
            raise ConfigError(f"{where}: keep_dtype must be a list of node names / 'OpType::X' or a file path")
        _check_placement(self.op_placement, where)
        if self.op_compiler_cache_mode not in ("enable", "disable", "force"):
            raise ConfigError(f"{where}: op_compiler_cache_mode = {self.op_compiler_cache_mode!r} is not valid"
                              f"{suggest(str(self.op_compiler_cache_mode), ['enable', 'disable', 'force'])}")
        if not isinstance(self.op_compiler_cache_dir, str):
            raise ConfigError(f"{where}: op_compiler_cache_dir = {self.op_compiler_cache_dir!r}; expected a folder path")
        for key in self.modify_mixlist:
            if key not in ("black-list", "white-list", "gray-list"):
                raise ConfigError(f"{where}: modify_mixlist key '{key}'{suggest(key, ['black-list', 'white-list', 'gray-list'])}")
            for op in self.modify_mixlist[key]:
                if op not in ("to-add", "to-remove"):
                    raise ConfigError(f"{where}: modify_mixlist['{key}'] key '{op}'{suggest(op, ['to-add', 'to-remove'])}")
        _check_mixlist_conflicts(self.modify_mixlist, where)

        self.input_shapes(dynamic=True)  # validates the syntax
        # fusion_switch_file's pass names and the gear options are checked by their owners where the config is
        # used: toolkit.compiler.fusion_switch.check_config, toolkit.gears.spec.validate_gears

    # ---------------------------------------------------------------- derived
    def input_shapes(self, dynamic: bool = False) -> dict[str, tuple[int, ...]]:
        """Parse ``input_shape`` ("x:1,3,224,224;y:1,16") into {name: dims}. ``dynamic=True`` keeps the -1 dims
        that gears bind (toolkit.gears); otherwise a -1 is refused. Raises ConfigError."""
        out: dict[str, tuple[int, ...]] = {}
        if not dynamic and any(d == -1 for dims in self.input_shapes(dynamic=True).values() for d in dims):
            raise ConfigError(f"input_shape '{self.input_shape}' has -1 dims bound by gears (dynamic_batch_size / "
                              "dynamic_dims); only 'compile' and 'run' choose a gear: give concrete sizes with "
                              "--input-shape for this command")
        for part in filter(None, (s.strip() for s in self.input_shape.split(";"))):
            name, sep, dims = part.rpartition(":")
            name = name.strip()
            if name in out:
                raise ConfigError(f"input_shape '{self.input_shape}' gives input '{name}' twice; give each input "
                                  "once, e.g. \"x:1,16,64;mask:1,16\"")
            try:
                if not sep or not name or not dims.strip():
                    raise ValueError
                out[name] = tuple(int(d) for d in dims.split(","))
                if any((d < 1 and not (dynamic and d == -1)) or d > _MAX_DIM for d in out[name]):
                    raise ValueError
            except ValueError:
                raise ConfigError(f"input_shape entry '{part}' is not 'name:d0,d1,...' with sizes >= 1 (or -1 for "
                                  f"a gear dim) and <= {_MAX_DIM}; e.g. \"x:1,3,640,640\"") from None
        return out

    def switch(self, level: str, pass_name: str) -> bool:
        """Whether a fusion pass is on per the fusion switch file (level 'GraphFusion' or 'UBFusion')."""
        table = (self.fusion_switch_file or {}).get("Switch", {}).get(level, {})
        return table.get(pass_name, table.get("ALL", "on")) == "on"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: Values of ``op_placement``.
PLACEMENTS = ("CPU", "NPU")


def _check_placement(table, where: str) -> None:
    """Refuse an ``op_placement`` that is not {non-empty name: "CPU" | "NPU"} (names are checked at compile time,
    against the model, by the place_ops pass)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: op_placement = {table!r}; expected an object {{op type or node name: "
                          "\"CPU\" | \"NPU\"}, e.g. {\"NonZero\": \"CPU\"}")
    for key, val in table.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{where}: op_placement key {key!r}; expected an op type or a node name")
        if val not in PLACEMENTS:
            hint = f" (did you mean '{val.upper()}'?)" if isinstance(val, str) and val.upper() in PLACEMENTS else ""
            raise ConfigError(f"{where}: op_placement['{key}'] = {val!r}; expected 'CPU' or 'NPU'{hint}")


#: Levels of the fusion switch file (its parser and checks: toolkit.compiler.fusion_switch).
FUSION_LEVELS = ("GraphFusion", "UBFusion")


def _check_mixlist_conflicts(mixlist: dict, where: str) -> None:
    """Refuse a modify_mixlist that adds one op type to two lists (e.g. black and white), or adds and removes
    it in the same list: the converter's result would depend on the order the edits are applied."""
    owner: dict[str, str] = {}
    for key, edits in mixlist.items():
        added, removed = set(edits.get("to-add", ())), set(edits.get("to-remove", ()))
        for op in sorted(added & removed):
            raise ConfigError(f"{where}: modify_mixlist['{key}'] both adds and removes '{op}'; keep one of them")
        for op in sorted(added):
            if op in owner:
                raise ConfigError(f"{where}: modify_mixlist adds '{op}' to both '{owner[op]}' and '{key}'; an op type "
                                  "belongs to one list: remove it from one of them")
            owner[op] = key


def _check_op_type(op: str, where: str) -> None:
    """Refuse an op type that is not an ONNX op (case matters: 'MatMul', not 'matmul')."""
    import onnx

    known = {s.name for s in onnx.defs.get_all_schemas()}
    if op not in known:
        raise ConfigError(f"{where}: '{op}' is not an ONNX op type{suggest(op, known)}")


def _read_text(p: Path, what: str, where: str | None) -> str:
    """The text of a user's file (UTF-8, a BOM is skipped), a regular file of at most
    toolkit.core.boundedjson.LIMITS["config"] (a FIFO or device is refused unread). Raises ConfigError."""
    return read_limited(p, f"{where + ': ' if where else ''}{what} file", ConfigError)


def _not_a_file(p: Path) -> str:
    """'does not exist', or what ``p`` is instead of a regular file ('is not a regular file but a character
    device', 'is a broken symbolic link ...')."""
    return f"is {not_regular_reason(p)}" if p.exists() or p.is_symlink() else "does not exist"


def _read_lines(p: Path, what: str, where: str) -> list[str]:
    check_path(p, f"{where}: {what} file", ConfigError, f"fix the {what} path")
    if not p.is_file():
        raise ConfigError(f"{where}: {what} file '{p}' {_not_a_file(p)}")
    return [ln.strip() for ln in _read_text(p, what, where).splitlines() if ln.strip() and not ln.startswith("#")]


def _read_json(p: Path, what: str, where: str) -> dict:
    check_path(p, f"{where}: {what} file", ConfigError, f"fix the {what} path")
    if not p.is_file():
        raise ConfigError(f"{where}: {what} file '{p}' {_not_a_file(p)}")
    try:
        data = json_loads(_read_text(p, what, where), f"{where}: {what} file '{p}'", ConfigError)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: {what} file '{p}' is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {what} file '{p}' must hold a JSON object")
    return data
