"""The public entry points of the engine: load → compile → run, as plain functions. The one place where the
compiler, the compile cache and the runtime meet: :func:`compile_model` is the compiler wrapped by the compile
cache, :func:`npu_runtime` a runtime whose kernels come through the cache's session source.

    >>> from toolkit.engine import Session
    >>> s = Session("model.onnx", config=Config(precision_mode="force_fp16"), input_shapes={"x": (1, 3, 32, 32)})
    >>> result = s.run({"x": x})            # RunResult: outputs, dumps, kernel_ms
"""

from __future__ import annotations

import os

import numpy as np
import onnx

from toolkit.cache.compile_cache import compile_model
from toolkit.cache.kernel_entries import session_source
from toolkit.compiler.context import CompileResult
from toolkit.config.schema import Config
from toolkit.ir.load import check_model_proto, load_model
from toolkit.runtime.host_memory import check_host_memory, host_memory_bytes
from toolkit.runtime.npu import NpuRuntime, RunResult

__all__ = ["Session", "as_model", "check_host_memory", "compile_model", "host_memory_bytes", "npu_runtime",
           "shapes_of", "simulate"]


def as_model(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """(checked ModelProto, path string) from a path or an already-loaded model (the field checks of
    toolkit.ir.load.check_model_proto: non-UTF-8 strings, unknown dtypes, tensor sizes; sparse initializers
    made dense). Raises ModelError."""
    if isinstance(model, onnx.ModelProto):
        return check_model_proto(model), ""
    return load_model(model), str(model)


def npu_runtime(compiled: CompileResult, progress=None) -> NpuRuntime:
    """An NpuRuntime for ``compiled`` whose kernel sessions come through the compile cache's kernel entries
    (toolkit.cache.kernel_entries.session_source; none when the plan's config disables the cache)."""
    return NpuRuntime(compiled, progress=progress, sessions=session_source)


def shapes_of(feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """{input name: shape} of the tensor feeds; sequence (list) and empty-optional (None) feeds have no shape
    to bind and are left out (np.shape of a ragged list would raise)."""
    return {k: tuple(np.shape(v)) for k, v in feeds.items() if isinstance(v, (np.ndarray, np.generic, int, float))}


class Session:
    """A compiled model ready to run in simulated NPU mode.

    Args:
        model: path to an ``.onnx`` file or a loaded ``onnx.ModelProto``.
        config: compile options (defaults: allow_mix_precision, fusion level 2).
        input_shapes: {input name: dims} binding dynamic dims (default: the model's static shapes).
        compiled: an existing CompileResult of this model to run instead of compiling (e.g. from
            toolkit.compiler.pipeline.recompile_precision).
        model_path: the file a loaded ``model`` came from (recorded in the plan, so ``memcheck --plan`` and
            ``run --plan`` find the model); ignored when ``model`` is a path.

    Raises:
        ModelError, ConfigError, InputError: see toolkit.core.errors.
    """

    def __init__(self, model, config: Config | None = None, input_shapes=None, progress=None,
                 compiled: CompileResult | None = None, model_path: str = ""):
        self.model, self.path = as_model(model)
        self.path = self.path or str(model_path)  # a loaded model: the file it came from, recorded in plan.json
        self.config = config or Config()
        self.compiled: CompileResult = compiled or compile_model(self.model, self.config, input_shapes=input_shapes,
                                                                 model_path=self.path)
        check_host_memory(self.compiled.plan)
        self.runtime = npu_runtime(self.compiled, progress=progress)

    @property
    def plan(self):
        return self.compiled.plan

    def run(self, feeds: dict[str, np.ndarray], dump: bool = False) -> RunResult:
        return self.runtime.run(feeds, dump=dump)


def simulate(model, feeds: dict[str, np.ndarray], config: Config | None = None, dump: bool = False) -> RunResult:
    """Compile ``model`` for the shapes of ``feeds`` and run it once in simulated NPU mode."""
    return Session(model, config, input_shapes=shapes_of(feeds)).run(feeds, dump=dump)
