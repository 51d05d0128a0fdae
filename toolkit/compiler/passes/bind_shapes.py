"""Bind dynamic input dims to concrete values before compiling (the converter's ``input_shape``)."""

from __future__ import annotations

import onnx

from toolkit.errors import InputError, ModelError


def _static(d) -> bool:
    """A dim with a known size (exporters write unknown dims as dim_param, no value, or dim_value -1)."""
    return d.HasField("dim_value") and d.dim_value >= 0


def bind_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    """Set every graph input's dims from ``shapes`` (in place).

    Raises:
        InputError: a name that is not a model input, a rank or a static dim that disagrees.
        ModelError: an input keeps a dynamic dim that ``shapes`` does not bind.
    """
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    names = [i.name for i in inputs]
    for name in shapes:
        if name not in names:
            raise InputError(f"input_shape names '{name}', which is not a model input; inputs are {names}")
    for vi in inputs:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        dims = list(tt.shape.dim)
        want = shapes.get(vi.name)
        if want is None:
            if not tt.HasField("shape"):
                raise ModelError(f"input '{vi.name}' has no declared shape; give it with --input-shape {vi.name}:d0,d1,...")
            dyn = [d.dim_param or "?" for d in dims if not _static(d)]
            if dyn:
                raise ModelError(f"input '{vi.name}' has dynamic dims {dyn}; bind them with --input-shape "
                                 f"\"{vi.name}:{','.join(str(d.dim_value) if _static(d) else 'N' for d in dims)}\" "
                                 "or pass inputs")
            continue
        if tt.HasField("shape") and len(dims) != len(want):
            raise InputError(f"input '{vi.name}' has rank {len(dims)} in the model but {len(want)} was given {tuple(want)}")
        for i, (d, w) in enumerate(zip(dims, want)):
            if _static(d) and d.dim_value != w:
                raise InputError(f"input '{vi.name}' dim {i} is {d.dim_value} in the model but {w} was given; "
                                 f"the model expects shape {tuple(x.dim_value or x.dim_param for x in dims)}")
        tt.ClearField("shape")
        for w in want:
            tt.shape.dim.add().dim_value = int(w)
