"""``npuscope compile``: compile MODEL and write plan.json, compile.log and fusion_result.json."""

from __future__ import annotations

from toolkit.commands.common import REPORTS_DIR, _noop
from toolkit.commands.gears import compile_gears_command
from toolkit.config.schema import Config
from toolkit.core.artifacts import check_out, output_dir, write_compile_artifacts
from toolkit.core.text import compile_summary
from toolkit.engine import compile_model
from toolkit.gears.spec import has_gears
from toolkit.ir.load import load_model
from toolkit.source import default_input_shapes, resolve_model


def compile_command(model: str | None, config: Config, out: str | None = None, progress=_noop) -> dict:
    """Compile and write plan.json, compile.log, fusion_result.json, compile_findings.json. With gears in the
    config (dynamic_batch_size / dynamic_dims): one plan per gear (toolkit.commands.gears.compile_gears_command).
    Without input_shape, a zoo model's or sample's dynamic dims are bound to its registered input's shape, as
    run / diagnose feed it (toolkit.source.default_input_shapes)."""
    check_out(out)  # a taken --out is refused before the model is read
    if has_gears(config):
        return compile_gears_command(model, config, out, progress=progress)
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)
    shapes = {} if config.input_shapes() else default_input_shapes(src, m)
    progress("compiling" + (f" for the registered input shapes {shapes}" if shapes else ""))
    compiled = compile_model(m, config, model_path=str(src.path), input_shapes=shapes or None)
    with output_dir(out, REPORTS_DIR, f"{src.name}-compile") as folder:
        files = write_compile_artifacts(compiled, folder)
    bound = [f"input shapes: {', '.join(f'{k} {v}' for k, v in shapes.items())} (registered input; "
             "--input-shape changes them)"] if shapes else []
    return {"summary": bound + compile_summary(compiled), "out": folder, "files": files, "compiled": compiled}
