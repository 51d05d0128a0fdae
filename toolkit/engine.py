"""The public entry points of the engine: load → compile → run, as plain functions.

    >>> from toolkit.engine import Session
    >>> s = Session("model.onnx", config=Config(precision_mode="force_fp16"), input_shapes={"x": (1, 3, 32, 32)})
    >>> result = s.run({"x": x})            # RunResult: outputs, dumps, kernel_ms
"""

from __future__ import annotations

import os

import numpy as np
import onnx

from toolkit.compiler.pipeline import CompileResult, compile_model
from toolkit.config import Config
from toolkit.ir.load import check_model_proto, load_model
from toolkit.runtime.npu import NpuRuntime, RunResult


def as_model(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """(checked ModelProto, path string) from a path or an already-loaded model (the field checks of
    toolkit.ir.load.check_model_proto: non-UTF-8 strings, unknown dtypes, tensor sizes; sparse initializers
    made dense). Raises ModelError."""
    if isinstance(model, onnx.ModelProto):
        return check_model_proto(model), ""
    return load_model(model), str(model)


def host_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 if unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_host_memory(plan) -> None:
    """Refuse, before allocating, a simulated arena that cannot fit in this machine's memory (ModelError)."""
    from toolkit.errors import ModelError
    from toolkit.report.console import human_bytes

    total = host_memory_bytes()
    if total and plan.arena_bytes > 0.8 * total:
        big = sorted((t for t in plan.tensors.values() if t.storage == "arena"), key=lambda t: -t.nbytes)[:3]
        raise ModelError(f"the planned device arena needs {human_bytes(plan.arena_bytes)}, more than 80% of this "
                         f"machine's {human_bytes(total)}; largest tensors: "
                         + ", ".join(f"'{t.name}' {t.shape} ({human_bytes(t.nbytes)})" for t in big)
                         + "; use smaller input shapes (--input-shape)")


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
        ModelError, ConfigError, InputError: see toolkit.errors.
    """

    def __init__(self, model, config: Config | None = None, input_shapes=None, progress=None,
                 compiled: CompileResult | None = None, model_path: str = ""):
        self.model, self.path = as_model(model)
        self.path = self.path or str(model_path)  # a loaded model: the file it came from, recorded in plan.json
        self.config = config or Config()
        self.compiled: CompileResult = compiled or compile_model(self.model, self.config, input_shapes=input_shapes,
                                                                 model_path=self.path)
        check_host_memory(self.compiled.plan)
        self.runtime = NpuRuntime(self.compiled, progress=progress)

    @property
    def plan(self):
        return self.compiled.plan

    def run(self, feeds: dict[str, np.ndarray], dump: bool = False) -> RunResult:
        return self.runtime.run(feeds, dump=dump)


def simulate(model, feeds: dict[str, np.ndarray], config: Config | None = None, dump: bool = False) -> RunResult:
    """Compile ``model`` for the shapes of ``feeds`` and run it once in simulated NPU mode."""
    return Session(model, config, input_shapes=shapes_of(feeds)).run(feeds, dump=dump)
