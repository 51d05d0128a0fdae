"""Shape gears from a Config, in the converter's syntax.

Two exclusive forms (the converter's ``--dynamic_batch_size`` / ``--dynamic_dims``):

- ``dynamic_batch_size = "1,2,4,8"``: ``input_shape`` has -1 as dim 0 of every batched input
  (``"x:-1,3,224,224"``); a gear is one batch size, given to every -1.
- ``dynamic_dims = "128;256;512"``: one ';'-separated group per gear; a group holds one ','-separated value per
  -1 of ``input_shape``, in the order they appear (``"x:1,-1;mask:1,-1"`` with ``"128,128;256,256"``). A group
  of one value for several -1 dims is refused, as the converter does.

Rules (as the converter's): 2..100 gears, every value a positive integer, no gear twice, not both forms,
-1 dims only with gears and gears only with -1 dims. ``pad_value`` (``"mask:0;x:0"`` or ``{"mask": 0}``) names
the value padded positions of each input get (default 0); it must name inputs of ``input_shape``, each once, with
a finite number. Against the model (:func:`check_against_model`, before any gear compiles): every -1 sits on a
dim the model leaves dynamic, and a symbolic dim shared by several inputs gets one value per gear.
Every violation is one :class:`toolkit.core.errors.ConfigError` line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from toolkit.compiler.passes.bind_shapes import check_input_shapes
from toolkit.core.errors import ConfigError
from toolkit.core.text import suggest

#: Gear count bounds of the converter: more than one, at most 100.
MIN_GEARS, MAX_GEARS = 2, 100
#: Largest gear value (ONNX dims are int64).
MAX_DIM = 2**63 - 1


@dataclass(frozen=True)
class GearSpec:
    """Parsed gears.

    Attributes:
        kind: ``"batch"`` (dynamic_batch_size) or ``"dims"`` (dynamic_dims).
        template: {input name: dims with -1 for gear dims}, from ``input_shape``, in its order.
        slots: one (input name, axis) per -1 of ``template``, in ``input_shape`` order.
        gears: one tuple of values per gear (len == len(slots)), in the order the config lists them.
        pad_values: {input name: fill value} for inputs of ``template`` (default 0.0).
    """

    kind: str
    template: dict[str, tuple[int, ...]]
    slots: tuple[tuple[str, int], ...]
    gears: tuple[tuple[int, ...], ...]
    pad_values: dict[str, float]

    def shapes(self, gear: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """{input name: concrete shape} of one gear."""
        out = {name: list(dims) for name, dims in self.template.items()}
        for (name, axis), value in zip(self.slots, gear):
            out[name][axis] = value
        return {k: tuple(v) for k, v in out.items()}

    def input_shape(self, gear: tuple[int, ...]) -> str:
        """The converter's ``input_shape`` string of one gear ("x:1,128;mask:1,128")."""
        return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in self.shapes(gear).items())

    def elements(self, gear: tuple[int, ...]) -> int:
        """Total input elements of one gear (the size used to order gears: the smallest fitting one runs)."""
        return sum(math.prod(s) for s in self.shapes(gear).values())

    def describe(self) -> str:
        """The gears as the config gives them, e.g. 'dynamic_dims "16;32;64"'."""
        if self.kind == "batch":
            return f'dynamic_batch_size "{",".join(str(g[0]) for g in self.gears)}"'
        return f'dynamic_dims "{";".join(",".join(map(str, g)) for g in self.gears)}"'


def label(gear: tuple[int, ...]) -> str:
    """A file-name-safe gear label: ``(128,)`` -> ``"128"``, ``(2, 64)`` -> ``"2x64"``."""
    return "x".join(str(v) for v in gear)


def has_gears(config) -> bool:
    """Whether ``config`` sets dynamic_batch_size or dynamic_dims."""
    return bool(str(config.dynamic_batch_size or "").strip() or str(config.dynamic_dims or "").strip())


def _ints(text: str, what: str, where: str) -> tuple[int, ...]:
    vals = []
    for tok in text.split(","):
        tok = tok.strip()
        try:
            v = int(tok)
        except ValueError:
            v = 0
        if not 1 <= v <= MAX_DIM:
            raise ConfigError(f"{where}: {what} value '{tok}' is not a positive integer; e.g. "
                              + ('dynamic_batch_size "1,2,4,8"' if what == "dynamic_batch_size" else
                                 'dynamic_dims "128;256;512"'))
        vals.append(v)
    return tuple(vals)


def _check_count(gears, option: str, where: str) -> None:
    if not MIN_GEARS <= len(gears) <= MAX_GEARS:
        raise ConfigError(f"{where}: {option} gives {len(gears)} gear(s); the converter takes {MIN_GEARS} to "
                          f"{MAX_GEARS} (use a static input_shape for one shape)")
    dup = sorted({g for g in gears if gears.count(g) > 1})
    if dup:
        raise ConfigError(f"{where}: {option} repeats gear {','.join(map(str, dup[0]))}; list each gear once")


def parse_pad_values(value, names, where: str = "config") -> dict[str, float]:
    """``pad_value`` ("mask:0;x:-1" or {"mask": 0}) as {input name: float}; inputs not named get 0.0.

    Raises:
        ConfigError: bad syntax, a name given twice, a value that is not a finite number (NaN, inf, 1e400, a
        boolean, a list), or a name not in ``names`` (the inputs of input_shape).
    """
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str):
        items = []
        for part in filter(None, (s.strip() for s in value.split(";"))):
            name, sep, val = part.rpartition(":")
            if not sep or not name.strip():
                raise ConfigError(f"{where}: pad_value entry '{part}' is not 'name:value'; e.g. \"mask:0;x:0\"")
            items.append((name.strip(), val.strip()))
    else:
        raise ConfigError(f"{where}: pad_value = {value!r}; expected a string like \"mask:0;x:0\" or an object")
    out = {n: 0.0 for n in names}
    given: set[str] = set()
    for name, val in items:
        if name not in out:
            hint = suggest(str(name), names) if names else ""
            raise ConfigError(f"{where}: pad_value names '{name}', which is not an input of input_shape "
                              f"({', '.join(names) or 'none'}){hint if 'did you mean' in hint else ''}")
        if name in given:
            raise ConfigError(f"{where}: pad_value gives '{name}' twice; give each input one pad value")
        given.add(name)
        out[name] = _pad_number(name, val, where)
    return out


def _pad_number(name: str, val, where: str) -> float:
    """One finite pad value: a number, or (string form) its decimal text. Raises ConfigError."""
    if isinstance(val, bool) or not isinstance(val, (int, float, str)):
        raise ConfigError(f"{where}: pad_value for '{name}' is {val!r}; expected a number, e.g. 0")
    try:
        num = float(val)
    except (ValueError, OverflowError):
        raise ConfigError(f"{where}: pad_value for '{name}' is {val!r}; expected a number, e.g. 0") from None
    if math.isnan(num):
        raise ConfigError(f"{where}: pad_value for '{name}' is NaN; padding must be a number (NaN would leak "
                          "into every reduction)")
    if not math.isfinite(num):
        raise ConfigError(f"{where}: pad_value for '{name}' is {val!r}, which is not finite; padding must be a "
                          "finite number (an infinity leaks into every reduction), e.g. 0")
    return num


def parse_gears(config, where: str = "config") -> GearSpec | None:
    """The :class:`GearSpec` of ``config``, or None when it has no gears. Raises ConfigError (module rules)."""
    for name, example in (("dynamic_batch_size", '"1,2,4,8"'), ("dynamic_dims", '"128;256;512"')):
        if not isinstance(getattr(config, name), str):
            raise ConfigError(f"{where}: {name} = {getattr(config, name)!r}; expected a string like {example} "
                              "(the converter's syntax)")
    batch, dims = config.dynamic_batch_size.strip(), config.dynamic_dims.strip()
    template = config.input_shapes(dynamic=True)
    slots = tuple((n, a) for n, d in template.items() for a, v in enumerate(d) if v == -1)
    if batch and dims:
        raise ConfigError(f"{where}: dynamic_batch_size and dynamic_dims are exclusive (as in the converter); "
                          "keep one")
    if not batch and not dims:
        if slots:
            raise ConfigError(f"{where}: input_shape '{config.input_shape}' has -1 dims but no gears; add "
                              "dynamic_dims (e.g. \"128;256\") or dynamic_batch_size, or give concrete sizes")
        if config.pad_value:
            raise ConfigError(f"{where}: pad_value is set but no gears pad anything; add dynamic_dims or "
                              "dynamic_batch_size, or drop pad_value")
        return None
    option = "dynamic_batch_size" if batch else "dynamic_dims"
    if not slots:
        raise ConfigError(f"{where}: {option} needs input_shape with -1 for each gear dim, e.g. "
                          + ('"x:-1,3,224,224"' if batch else '"x:1,-1;mask:1,-1"')
                          + f"; got input_shape '{config.input_shape}'")
    if batch:
        wrong = [f"{n} dim {a}" for n, a in slots if a != 0]
        if wrong:
            raise ConfigError(f"{where}: dynamic_batch_size binds the batch dim (dim 0) only, but input_shape has -1 "
                              f"at {', '.join(wrong)}; use dynamic_dims for other dims")
        gears = tuple((v,) * len(slots) for v in _ints(batch, option, where))
    else:
        groups = [g.strip() for g in dims.split(";")]
        gears = tuple(_ints(g, option, where) for g in groups)
        bad = [(i, g) for i, g in enumerate(gears) if len(g) != len(slots)]
        if bad:
            i, g = bad[0]
            raise ConfigError(f"{where}: dynamic_dims gear {i + 1} '{groups[i]}' has {len(g)} value(s) but "
                              f"input_shape has {len(slots)} -1 dim(s) "
                              f"({', '.join(f'{n}[{a}]' for n, a in slots)}); give one value per -1 in each group")
    _check_count(list(gears), option, where)
    pads = parse_pad_values(config.pad_value or "", list(template), where)
    return GearSpec("batch" if batch else "dims", template, slots, gears, pads)


def check_against_model(spec: GearSpec, model, where: str = "config") -> None:
    """Refuse gears the model cannot take, before anything compiles (so compile and a lazy run agree):
    ``input_shape`` naming an input the model lacks (did-you-mean), a rank or a static dim that disagrees, a -1
    on a dim that is static in the model, or a gear giving one symbolic dim (``"seq"`` on x[1] and mask[1])
    two sizes. Raises ConfigError (toolkit.compiler.passes.bind_shapes.check_input_shapes)."""
    check_input_shapes(model, spec.template, where=f"{where}: input_shape", gear_dims=True)
    option = "dynamic_batch_size" if spec.kind == "batch" else "dynamic_dims"
    for i, gear in enumerate(spec.gears):
        check_input_shapes(model, spec.shapes(gear), where=f"{where}: {option} gear {i + 1} '{','.join(map(str, gear))}'")


def validate_gears(config, where: str = "config") -> None:
    """Config.validate's hook: raise ConfigError for any gear rule broken (module docstring)."""
    parse_gears(config, where)
