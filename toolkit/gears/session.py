"""GearSession: one compiled plan per shape gear; each run picks the smallest gear that fits, pads, slices back.

Gears are built **lazily**: a gear's plan is compiled (and its kernels built) the first time an input needs it;
``GearSession(..., eager=True)`` or :meth:`GearSession.build_all` compiles every gear up front (what
``npuscope compile`` does, one plan.json per gear).

Choosing: a gear fits when every gear dim (-1 of ``input_shape``) of the feed is <= the gear's value and every
other dim equals ``input_shape``; among fitting gears the one with the fewest input elements runs (for a single
gear dim: the smallest value >= the length). An input larger than every gear is an
:class:`toolkit.core.errors.InputError` naming the gears.

Padding: each gear input is filled with its ``pad_value`` (default 0) to the gear's shape and the given data
is copied into the leading region (``padded[:n0, :n1, ...] = data``): padding goes at the end of each padded
axis, as tokenizers pad sequences.

Slicing outputs back — the rule, per output axis, from the model's declared output shape:

1. a static dim is left as it is;
2. a symbolic dim (``dim_param``) that is also the ``dim_param`` of a gear dim of an input (``"seq"`` on
   ``x[1]`` and on ``y[1]``) takes that input's actual size: the output is sliced to its leading region;
3. anything else (another symbol, no name): shape inference for the exact input shapes
   (:func:`infer_output_shapes`) gives the exact size; the output is cut to that leading size (a time axis
   downsampled from the padded width, a flattened padded axis). When the size is unknown (data-dependent) or
   larger than the gear's, the padded positions cannot be located and the run is refused
   (:class:`toolkit.core.errors.ModelError` naming the output and axis; fix: give the output dim the input's
   dim_param, or compile that shape exactly).

Rule 3 assumes the valid positions come first along the axis; the padding-sensitivity check
(:mod:`toolkit.gears.padding`, run by ``npuscope run`` whenever it pads) compares exactly that leading region
with an exact-shape run, so an output where the assumption fails (a Transpose before the flatten, a convolution
whose window reaches the padding) is reported there as a leak. A rule-2 axis must have the gear's size in the
gear's output (else refused, same error).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import onnx

from toolkit.compiler.passes.bind_shapes import (
    UNNAMED,
    bind_input_shapes,
    check_input_shapes,
    raise_if_reference_fails,
)
from toolkit.config.schema import Config
from toolkit.core.errors import ConfigError, InputError, ModelError
from toolkit.engine import Session, as_model
from toolkit.gears.spec import GearSpec, check_against_model, label, parse_gears
from toolkit.inputs import input_specs
from toolkit.inputs.validate import check_feed, dtype_expr
from toolkit.runtime.npu import KernelRuntimeError, RunResult
from toolkit.source import resolve_model


@dataclass
class GearRun:
    """One gear run: ``outputs`` sliced back to the exact shapes; ``gear`` the gear values that ran;
    ``padded`` whether any input was padded; ``shapes`` the feed's shapes; ``run`` the gear's raw RunResult
    (outputs and dumps at the gear's shapes)."""

    outputs: dict[str, np.ndarray]
    gear: tuple[int, ...]
    padded: bool
    shapes: dict[str, tuple[int, ...]]
    run: RunResult = field(repr=False, default=None)


def pad_feeds(feeds: dict, target: dict[str, tuple[int, ...]], pad_values: dict[str, float]) -> dict:
    """``feeds`` with every input named in ``target`` padded at the end of each axis to its target shape.

    Args:
        feeds: {input name: array}; inputs not in ``target`` pass through unchanged.
        target: {input name: shape}, every dim >= the feed's.
        pad_values: {input name: fill value} (missing: 0).

    Raises:
        InputError: rank mismatch, a dim larger than the target, or a non-integer pad for an integer input.
    """
    out = dict(feeds)
    for name, shape in target.items():
        if name not in feeds:
            continue
        arr = np.asarray(feeds[name])
        if arr.ndim != len(shape) or any(a > t for a, t in zip(arr.shape, shape)):
            raise InputError(f"input '{name}' of shape {arr.shape} does not fit gear shape {tuple(shape)}")
        if arr.shape == tuple(shape):
            continue
        fill = _fill(name, arr.dtype, pad_values.get(name, 0.0))
        padded = np.full(shape, fill, dtype=arr.dtype)
        padded[tuple(slice(0, n) for n in arr.shape)] = arr
        out[name] = padded
    return out


def _fill(name: str, dtype: np.dtype, fill: float):
    """``fill`` as a value of ``dtype``. Raises InputError when the input's type cannot hold it."""
    if dtype.kind in "iub":
        info = np.iinfo(dtype) if dtype.kind != "b" else None
        if fill != int(fill) or (info is not None and not info.min <= fill <= info.max) or \
                (info is None and fill not in (0, 1)):
            raise InputError(f"pad_value {fill} for {dtype} input '{name}' is not an integer in the {dtype} range; "
                             f"set pad_value "
                             f"\"{name}:0\"")
        return int(fill)
    if dtype.kind == "f" and abs(fill) > float(np.finfo(dtype).max):
        raise InputError(f"pad_value {fill} for {dtype} input '{name}' is outside the {dtype} range "
                         f"(|x| <= {float(np.finfo(dtype).max):.6g}); choose a smaller pad value")
    return fill


def _declared_dims(vis) -> dict[str, list]:
    """{value name: [int | str | None per axis]} of graph inputs/outputs (None: unnamed dynamic dim)."""
    out = {}
    for vi in vis:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            out[vi.name] = None
            continue
        out[vi.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else
                        (d.dim_param if d.dim_param not in UNNAMED else None) for d in vi.type.tensor_type.shape.dim]
    return out


def output_rules(model: onnx.ModelProto, spec: GearSpec) -> dict[str, list[tuple]]:
    """{output name: one rule per axis}: ``("static", n)``, ``("slot", input, axis)`` (rule 2 of the module
    docstring) or ``("other", symbol or None)`` (rule 3); an output of unknown rank gets ``[("other", None)]``."""
    ins = _declared_dims(model.graph.input)
    symbol_slot = {}
    for name, axis in spec.slots:
        dims = ins.get(name) or []
        if axis < len(dims) and isinstance(dims[axis], str):
            symbol_slot.setdefault(dims[axis], (name, axis))
    rules = {}
    for name, dims in _declared_dims(model.graph.output).items():
        if dims is None:
            rules[name] = [("other", None)]
            continue
        rules[name] = [("static", d) if isinstance(d, int) else
                       ("slot", *symbol_slot[d]) if d in symbol_slot else ("other", d) for d in dims]
    return rules


def infer_output_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, list]:
    """{output name: [int | None per axis]} for the input ``shapes``: onnxruntime's symbolic shape inference
    (onnxruntime.tools.symbolic_shape_infer; it gets through more exporters' graphs), else ONNX shape inference
    with data propagation; an axis neither resolves is None."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    bind_input_shapes(m, shapes, where="inputs", error=InputError)
    found: dict[str, list] = {}
    for infer in (_ort_symbolic, _onnx_inference):
        try:
            dims = _declared_dims(infer(m).graph.output)
        except Exception:  # noqa: BLE001 - an inference that fails leaves its axes unknown
            continue
        for k, v in dims.items():
            v = [d if isinstance(d, int) else None for d in v] if v else None
            old = found.get(k)
            found[k] = v if old is None else [a if a is not None else b for a, b in zip(old, v or old)]
    return found


def _ort_symbolic(m: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    return SymbolicShapeInference.infer_shapes(m, auto_merge=True)


def _onnx_inference(m: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)


class GearSession:
    """A model compiled per gear (see module docstring).

    Example::

        gs = GearSession("transformer_seq_masked", {"input_shape": "x:1,-1,64;mask:1,-1",
                                                    "dynamic_dims": "16,16;32,32"})
        r = gs.run({"x": np.zeros((1, 10, 64), np.float32), "mask": np.ones((1, 10), np.float32)})
        r.outputs["y"].shape  # the exact shape (1, 10, ...): gear 16 ran, padded and sliced back

    Args:
        model: an ``.onnx`` path, a bundled sample or zoo name (resolved as the CLI's MODEL argument,
            :func:`toolkit.source.resolve_model`), or a loaded ``onnx.ModelProto``; its gear dims dynamic (or
            matching each gear).
        config: a :class:`toolkit.config.schema.Config`, a dict of config options (validated as a config file:
            :meth:`Config.from_dict`), or None (the defaults, which have no gears: ConfigError). It must set
            gears: ``dynamic_batch_size`` or ``dynamic_dims``, ``input_shape`` with -1 at the gear dims,
            optionally ``pad_value``.
        eager: compile and build every gear now (default False: each on first use).
        progress: optional callable(message: str).

    Raises:
        TypeError: ``model`` is not a str / os.PathLike / ModelProto, or ``config`` not a Config, dict or None.
        ConfigError: an unknown or invalid option, no gears, or gears the model cannot take
            (toolkit.gears.spec.check_against_model).
        UserError/ModelError: a model name or path that cannot be found or loaded; ModelError/InputError from
            compiling a gear.
    """

    def __init__(self, model, config: "Config | dict | None" = None, eager: bool = False, progress=None):
        self.model, self.path = _load(model)
        self.config = config = _as_config(config)
        where = config.origin("input_shape", "dynamic_dims", "dynamic_batch_size", "pad_value")
        spec = parse_gears(config, where)
        if spec is None:
            raise ConfigError("GearSession needs gears: set dynamic_dims or dynamic_batch_size and -1 dims in "
                              "input_shape")
        check_against_model(spec, self.model, where)
        self.spec: GearSpec = spec
        self.progress = progress or (lambda msg: None)
        #: gears from the fewest input elements to the most (the order gears are tried in)
        self.order = sorted(spec.gears, key=spec.elements)
        self.rules = output_rules(self.model, spec)
        self.sessions: dict[tuple[int, ...], Session] = {}
        self._inferred_cache: dict[tuple, dict] = {}
        if eager:
            self.build_all()

    def gear_config(self, gear: tuple[int, ...]) -> Config:
        """The single-shape Config a gear compiles with (input_shape bound, no gear options)."""
        return dataclasses.replace(self.config, input_shape=self.spec.input_shape(gear), dynamic_batch_size="",
                                   dynamic_dims="", pad_value="")

    def session(self, gear: tuple[int, ...]) -> Session:
        """The compiled Session of ``gear`` (compiled on first use)."""
        gear = tuple(gear)
        if gear not in self.sessions:
            if gear not in self.spec.gears:
                raise InputError(f"gear {label(gear)} is not one of {self.spec.describe()}")
            self.progress(f"compiling gear {label(gear)} ({self.spec.input_shape(gear)})")
            cfg = self.gear_config(gear)
            sess = Session(self.model, cfg, input_shapes=cfg.input_shapes())
            sess.path = self.path
            self.sessions[gear] = sess
        return self.sessions[gear]

    def build_all(self) -> dict[tuple[int, ...], Session]:
        """Compile every gear (in gear order); returns {gear: Session}."""
        for gear in self.order:
            self.session(gear)
        return self.sessions

    def feed_shapes(self, feeds: dict) -> dict[str, tuple[int, ...]]:
        """Shapes of the gear inputs of ``feeds``, checked against input_shape's static dims. Raises InputError."""
        shapes = {}
        for name, tmpl in self.spec.template.items():
            if name not in feeds:
                raise InputError(f"input '{name}' is missing; the gears bind {list(self.spec.template)}")
            shape = tuple(np.shape(feeds[name]))
            if len(shape) != len(tmpl) or any(t != -1 and t != s for t, s in zip(tmpl, shape)):
                want = ",".join("N" if t == -1 else str(t) for t in tmpl)
                raise InputError(f"input '{name}' has shape {shape} but input_shape says '{name}:{want}' "
                                 "(N = a gear dim); fix the input or input_shape")
            shapes[name] = shape

        check_input_shapes(self.model, shapes, where="inputs", error=InputError)
        return shapes

    def choose(self, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
        """The smallest gear (fewest input elements) every gear dim of ``shapes`` fits in. Raises InputError."""
        need = tuple(shapes[n][a] for n, a in self.spec.slots)
        for gear in self.order:
            if all(v <= g for v, g in zip(need, gear)):
                return gear
        where = ", ".join(f"{n}[{a}]={v}" for (n, a), v in zip(self.spec.slots, need))
        raise InputError(f"input is larger than every gear ({where}); gears are {self.spec.describe()}: add a "
                         "larger gear or shorten the input")

    def slice_outputs(self, outputs: dict, shapes: dict[str, tuple[int, ...]], gear: tuple[int, ...]) -> dict:
        """Gear outputs cut back to the exact shapes of ``shapes`` (module rules). Raises ModelError."""
        exact = None
        out = {}
        for name, arr in outputs.items():
            arr = np.asarray(arr)
            rules = self.rules.get(name, [("other", None)])
            if len(rules) != arr.ndim:
                rules = [("other", None)] * arr.ndim
            index = []
            for axis, rule in enumerate(rules):
                size = arr.shape[axis]
                if rule[0] == "static":
                    index.append(slice(None))
                elif rule[0] == "slot":
                    gear_size = self.spec.shapes(gear)[rule[1]][rule[2]]
                    if size != gear_size:
                        raise ModelError(_unmapped(name, axis, rule, size, gear, f"the gear gives {gear_size}"))
                    index.append(slice(0, shapes[rule[1]][rule[2]]))
                else:
                    exact = exact if exact is not None else self._inferred(shapes)
                    dims = exact.get(name)
                    want = dims[axis] if dims and axis < len(dims) else None
                    if want is None or want > size:
                        raise ModelError(_unmapped(name, axis, rule, size, gear,
                                                   f"the exact input gives {want if want is not None else 'an unknown size'}"))
                    index.append(slice(0, want))
            out[name] = arr[tuple(index)]
        return out

    def _inferred(self, shapes: dict) -> dict[str, list]:
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        if key not in self._inferred_cache:
            self._inferred_cache[key] = infer_output_shapes(self.model, shapes)
        return self._inferred_cache[key]

    def run(self, feeds: dict[str, np.ndarray], dump: bool = False) -> GearRun:
        """Pick the gear, pad, run, slice back.

        Args:
            feeds: ``{input name: numpy array}`` for every model input, each of the dtype the model declares
                (no casting: a float64 array for a float32 input is refused, as ``npuscope run --inputs``
                refuses it) and of the model's rank and static dims; gear dims (-1 of ``input_shape``) at
                most the largest gear's value.
            dump: keep every tensor of the gear run (``GearRun.run.dumps``, at the gear's shapes).

        Returns:
            :class:`GearRun`: ``outputs`` sliced to the exact shapes (dtypes as the model's outputs).

        Raises:
            TypeError: ``feeds`` is not a dict (e.g. one array), or a value is not a numpy array (a list).
            InputError: a missing or unexpected input name, another dtype, rank or static dim
                (toolkit.inputs.validate.check_feed), a shape that disagrees with ``input_shape``, or an input
                larger than every gear.
            ModelError: an output whose padded positions cannot be located (module docstring).
        """
        specs = check_feed_types(self.model, feeds)
        shapes = self.feed_shapes(feeds)
        check_feed(feeds, specs, "feeds")
        gear = self.choose(shapes)
        target = self.spec.shapes(gear)
        padded = any(shapes[n] != target[n] for n in shapes)
        sess = self.session(gear)
        padded_feeds = pad_feeds(feeds, target, self.spec.pad_values)
        try:
            res = sess.run(padded_feeds, dump=dump)
        except KernelRuntimeError as exc:
            raise_if_reference_fails(self.model, padded_feeds, exc)
            raise
        outputs = self.slice_outputs(res.outputs, shapes, gear) if padded else dict(res.outputs)
        return GearRun(outputs, gear, padded, shapes, res)


def _load(model) -> tuple[onnx.ModelProto, str]:
    """(ModelProto, path) of a GearSession ``model`` argument (see :class:`GearSession`). Raises TypeError."""
    import os

    if isinstance(model, onnx.ModelProto):
        return as_model(model)
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"GearSession model must be an .onnx path, a sample or zoo name, or an onnx.ModelProto; "
                        f"got {type(model).__name__}")

    return as_model(resolve_model(os.fspath(model)).path)


def _as_config(config) -> Config:
    """A GearSession ``config`` argument as a Config: a Config as it is, a dict validated as a config file
    (ConfigError), None the defaults. Raises TypeError for anything else."""
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if isinstance(config, dict):
        return Config.from_dict(config, where="GearSession config")
    raise TypeError(f"GearSession config must be a toolkit.config.schema.Config, a dict of config options or None; "
                    f"got {type(config).__name__}")


def check_feed_types(model: onnx.ModelProto, feeds) -> list:
    """The model's InputSpecs (toolkit.inputs.input_specs), once ``feeds`` is known to be a dict of numpy
    arrays. :meth:`GearSession.run` then checks names, dtypes, ranks, static dims and shared symbolic dims as
    ``npuscope run --inputs`` does (:func:`toolkit.inputs.validate.check_feed`, InputError).

    Raises:
        TypeError: ``feeds`` is not a Mapping (e.g. one array), or a value is not a numpy.ndarray (a list).
    """
    from collections.abc import Mapping

    specs = input_specs(model)
    if not isinstance(feeds, Mapping):
        raise TypeError(f"feeds must be a {{input name: numpy array}} dict (the model's inputs: "
                        f"{[s.name for s in specs]}); got {type(feeds).__name__}")
    dtypes = {s.name: s.dtype for s in specs}
    for name, value in feeds.items():
        if not isinstance(value, np.ndarray):
            want = dtypes.get(name)
            expr = dtype_expr(want) if want is not None else None  # never np.object (gone from numpy)
            fix = f"np.asarray(value, dtype={expr})" if expr else "a numpy array"
            raise TypeError(f"feeds: input {name!r} is a {type(value).__name__}, not a numpy array; pass {fix}")
    return specs


def _unmapped(name, axis, rule, size, gear, why) -> str:
    sym = f"'{rule[1]}'" if rule[0] == "other" and rule[1] else "unnamed"
    return (f"output '{name}' axis {axis} ({sym}) has size {size} in gear {label(gear)} but {why}; the padded "
            "positions cannot be located: declare that output dim with the input's dim_param (e.g. 'seq') or "
            "compile this shape exactly (no gears)")


def gear_elements(spec: GearSpec) -> dict[str, int]:
    """{gear label: total input elements} (for summaries)."""
    return {label(g): spec.elements(g) for g in spec.gears}


__all__ = ["GearRun", "GearSession", "check_feed_types", "gear_elements", "infer_output_shapes", "output_rules",
           "pad_feeds"]
