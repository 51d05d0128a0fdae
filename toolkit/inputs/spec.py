"""What a model expects as input: one :class:`InputSpec` per graph input that is not an initializer."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from toolkit.core.errors import ModelError

#: dim_param values exporters use for "unknown" (paddle2onnx writes "?"; it also writes dim_value -1).
_UNNAMED = ("", "?")

#: A dimension: an int when static, a str (the symbolic name, e.g. "batch") or None (unnamed) when dynamic.
Dim = int | str | None


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One model input as the ONNX graph declares it.

    Attributes:
        name: graph input name.
        dtype: numpy dtype of the tensor element type (e.g. ``np.dtype("float32")``).
        shape: one entry per axis: int (static size), str (symbolic dynamic dim) or None (unnamed dynamic
            dim, also for ``dim_param "?"`` and negative ``dim_value``); ``None`` for the whole shape when the
            model declares no rank.
    """

    name: str
    dtype: np.dtype
    shape: tuple[Dim, ...] | None

    @property
    def is_static(self) -> bool:
        """True when the rank and every dimension are known ints."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def describe(self) -> str:
        """Short text such as ``x: float32[batch,3,640,640]`` for messages."""
        if self.shape is None:
            return f"{self.name}: {self.dtype.name}[?rank]"
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype.name}[{dims}]"


def _dims(tensor_type: onnx.TypeProto.Tensor) -> tuple[Dim, ...] | None:
    if not tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param not in _UNNAMED:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


class InputSpecs(list):
    """A list of :class:`InputSpec` that also names the model's graph inputs that carry an initializer
    (``defaults``): ONNX lets a runtime override those; npuscope runs them with the model's value, so they are
    not feedable, and a feed naming one is refused with that reason (toolkit.inputs.validate.check_keys)."""

    def __init__(self, specs=(), defaults=()):
        super().__init__(specs)
        self.defaults = tuple(defaults)


def input_specs(model: onnx.ModelProto) -> InputSpecs:
    """The feedable inputs of ``model`` in graph order (graph inputs minus initializers; those are listed in
    the result's ``defaults``).

    Raises:
        ModelError: an input is not a dense tensor (sequence, map, optional, sparse) or has no element type.
    """
    init_names = {t.name for t in model.graph.initializer} | {t.values.name for t in model.graph.sparse_initializer}
    specs, defaults = [], []
    for value in model.graph.input:
        if value.name in init_names:
            defaults.append(value.name)
            continue
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type" or value.type.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
            raise ModelError(
                f"graph input {value.name!r} is a {kind or 'untyped value'}, expected a dense tensor with an "
                "element type; npuscope feeds tensors only: re-export the model with tensor inputs"
            )
        elem = value.type.tensor_type.elem_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        specs.append(InputSpec(value.name, dtype, _dims(value.type.tensor_type)))
    return InputSpecs(specs, defaults)
