"""Which metric applies to which tensor: a graph output's dtype class and a metric's (ExactMatchRate on
integer/bool, the others on float)."""

from __future__ import annotations

from onnx import helper

from toolkit.compare.metrics.registry import METRICS
from toolkit.core.dtypes import dtype_class


def output_dtypes(model) -> dict[str, tuple[str, str]]:
    """{graph output name: (numpy dtype name, dtype class)} of ``model`` (onnx.ModelProto) for the tensor outputs
    whose element type the model declares; dtype class as toolkit.compare.metrics.dtype_class: "float",
    "integer" (ints, uints, bool) or "other" (string...). Outputs of unknown type are left out."""
    out = {}
    for o in model.graph.output:
        elem = o.type.tensor_type.elem_type if o.type.HasField("tensor_type") else 0
        try:
            dt = helper.tensor_dtype_to_np_dtype(elem)
        except (KeyError, ValueError, TypeError):
            continue
        out[o.name] = (str(getattr(dt, "name", dt)), dtype_class(dt))
    return out


def metric_applies(metric: str, dclass: str | None) -> bool:
    """Whether ``metric`` can be computed on a tensor of dtype class ``dclass`` (METRICS[metric].dtype_class:
    ExactMatchRate on integer/bool, the others on float); an unknown class (None) is not refused."""
    return dclass is None or METRICS[metric].dtype_class == dclass
