"""ReferenceRunner: the FP32 golden run with onnxruntime (CPU), every intermediate tensor exposed.

Graph optimisations are off so that ONNX tensor names survive. Intermediate tensors are added as graph
outputs using types from ONNX shape inference; pass ``only`` to expose a subset.
"""

from __future__ import annotations

import numpy as np
import onnx

from toolkit.core.errors import ModelError
from toolkit.ir.shape_inference import infer_light
from toolkit.ir.weights import for_onnxruntime, mapped_initializers
from toolkit.ort import ort_values
from toolkit.ort.ort_env import ORT_ERRORS, make_session
from toolkit.ort.terminate import reraise_if_terminated, run_options

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


def inferred_types(model: onnx.ModelProto) -> dict:
    """{tensor: ValueInfoProto} that ONNX shape inference (non-strict) gives the tensors of ``model``'s top-level
    graph; {} where inference fails."""
    try:
        inferred = infer_light(model, strict_mode=False)
    except Exception:
        return {}
    return {v.name: v for v in inferred.graph.value_info}


def exposed_tensors(model: onnx.ModelProto, types: dict, only=None, float_only: bool = False) -> list[str]:
    """The tensors a :class:`ReferenceRunner` exposes besides the graph outputs, in node order: every output of a
    top-level node of ``model`` whose tensor type ``types`` knows (:func:`inferred_types`), the graph outputs
    themselves excepted; only those in ``only`` when given, only float ones with ``float_only``. Outputs of
    nodes with a ``sparse_value`` attribute are left out (onnxruntime keeps them sparse and its readers fail)."""
    existing = {o.name for o in model.graph.output}
    wanted = set(only) if only is not None else None
    out: list[str] = []
    for node in model.graph.node:
        if any(a.name == "sparse_value" for a in node.attribute):
            continue
        for o in node.output:
            if not o or o in existing or (wanted is not None and o not in wanted):
                continue
            vi = types.get(o)
            if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
                continue
            if float_only and vi.type.tensor_type.elem_type not in FLOAT_TYPES:
                continue
            out.append(o)
    return out


class ReferenceRunner:
    """FP32 onnxruntime reference.

    Args:
        model: the (loaded) model; not modified. Weights left on disk by the loader are read by onnxruntime
            from their memory maps (toolkit.ir.weights), never copied into the serialised model.
        only: tensor names to expose (default: every tensor a top-level node produces whose type shape
            inference knows).
        expose: False to expose only the graph outputs.
        float_only: expose float tensors only.
        types: {tensor: ValueInfoProto} to expose them with (default: :func:`inferred_types` of ``model``); a
            segment's runner (toolkit.ort.segments) passes the whole model's.
    """

    def __init__(self, model: onnx.ModelProto, only=None, expose: bool = True, float_only: bool = False,
                 types: dict | None = None):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        if types is None:
            types = inferred_types(m)
        self.exposed: list[str] = exposed_tensors(m, types, only, float_only) if expose else []
        for o in self.exposed:
            out = m.graph.output.add()
            out.CopyFrom(types[o])
            out.type.tensor_type.ClearField("shape")
        self.output_names = [o.name for o in m.graph.output]
        # outputs onnxruntime's run() cannot return as numpy (bfloat16, float8, int4...) or returns sparse
        self._ortvalues = any(ort_values.is_exotic_elem(o.type.tensor_type.elem_type) for o in m.graph.output)
        # weights left on disk (toolkit.ir.weights): onnxruntime reads our memory maps of them in place (from
        # several folders: handed over as external initializers, which it copies)
        maps = mapped_initializers(m)
        folder = for_onnxruntime(m)
        try:
            self.session = make_session(m.SerializeToString(), optimize=False, folder=folder,
                                        shared=maps if folder else None, external=None if folder else maps)
        except ORT_ERRORS as exc:  # onnxruntime refuses the model itself (e.g. a value_info type the op contradicts)
            why = " ".join(str(exc).split()).split(" : ", 2)[-1][:300]
            raise ModelError(f"onnxruntime cannot load the model for the FP32 reference ({why}); fix the model "
                             "(a declared type or shape that its ops contradict is the usual cause)") from None

    def run(self, feeds: dict[str, np.ndarray], options=None) -> dict[str, np.ndarray]:
        """{tensor name: array} for graph outputs and exposed intermediates ({} without running when there are
        none: a segment of a subset run whose tensors are neither compared nor read later). ``options``: the
        onnxruntime RunOptions to run with (default toolkit.ort.terminate.run_options(), which a signal
        terminates).

        Raises:
            ModelError: onnxruntime fails on these inputs (:func:`cannot_run`)."""
        if not self.output_names:
            return {}
        options = run_options() if options is None else options
        try:
            if self._ortvalues or ort_values.needs_ortvalues(feeds.values()):
                outs = ort_values.run(self.session, self.output_names, feeds, options=options)
            else:
                outs = [ort_values.to_numpy(o) for o in self.session.run(self.output_names, feeds, options)]
        except ORT_ERRORS as exc:
            reraise_if_terminated(exc)
            raise cannot_run(feeds, exc) from None
        return dict(zip(self.output_names, outs))


def cannot_run(feeds: dict, exc: BaseException, npuscope_error: str = "") -> ModelError:
    """The one-line error for inputs onnxruntime cannot run the model on (``exc``: its error, whose reason it puts
    last): the inputs' shapes, the reason, and for integer inputs (indices, ids) the --val-range that fixes
    generated ones. ``npuscope_error``: the name of the simulated run's own error, when that failed first. The
    error keeps onnxruntime's as its ``onnxruntime_error`` attribute."""
    why = " ".join(str(exc).split()).split("Status Message:")[-1].strip()
    why = why if len(why) <= 200 else "..." + why[-200:]
    shapes = ", ".join(f"{k}{tuple(getattr(v, 'shape', ()))}" for k, v in feeds.items())
    ints = [k for k, v in feeds.items() if getattr(getattr(v, "dtype", None), "kind", "") in "iu"
            and getattr(v, "size", 0)]
    hint = (f"; an integer input used as an index or id ({', '.join(ints)}) needs values the model takes: "
            f"give --val-range \"{ints[0]}:[0,N]\" with N the largest index it takes, or real --inputs"
            if ints else "")
    err = ModelError(f"the model cannot run inputs {shapes}: onnxruntime fails on them"
                     f"{' too' if npuscope_error else ''} ({why}); check --input-shape / the inputs against the "
                     f"model{hint}" + (f" (npuscope: {npuscope_error})" if npuscope_error else ""))
    err.onnxruntime_error = exc
    return err
