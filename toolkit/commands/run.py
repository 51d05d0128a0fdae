"""``npuscope run``: run MODEL in simulated NPU mode and write its outputs (and dumps)."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import (
    REPORTS_DIR,
    _noop,
    _session_with_plan,
    check_output_paths,
    checked,
)
from toolkit.commands.gears import run_gears_command
from toolkit.compiler.passes.bind_shapes import (
    check_input_shapes,
    raise_if_reference_fails,
)
from toolkit.config.schema import Config
from toolkit.core.artifacts import (
    check_dump_dir,
    check_out,
    output_dir,
    write_compile_artifacts,
    write_dumps,
    write_npz,
)
from toolkit.core.text import compile_summary, printable
from toolkit.engine import Session, shapes_of
from toolkit.gears.spec import has_gears
from toolkit.ir.load import load_model
from toolkit.memcheck.planio import open_plan
from toolkit.memcheck.static_check import static_conflicts
from toolkit.runtime.npu import KernelRuntimeError
from toolkit.source import prepare_inputs, resolve_model


def run_command(model: str | None, config: Config | None, *, inputs: str | None = None, seed: int = 0,
                val_range: str | None = None, dump_dir: str | None = None, output: str | None = None,
                out: str | None = None, plan: str | None = None, overrides: dict | None = None,
                progress=_noop) -> dict:
    """Compile for the feed's shapes, run once in NPU mode, write outputs.npz (+ dumps). ``plan``: a
    plan.json whose memory decisions (offsets, lifetimes) replace the compiled ones (toolkit.memcheck.planio);
    ``config`` None: the plan's own recorded config (the defaults without ``plan``); ``overrides``: the command
    line's options ({option: value}, None ignored) applied on top of it (toolkit.memcheck.planio.open_plan).
    With gears in the config: the smallest fitting gear runs (toolkit.commands.gears.run_gears_command).
    ``exit_code`` in the result: 0, or 1 when the outputs are known to be wrong (a padding leak reaching an
    output, or a ``plan`` whose memory decisions overwrite live data: toolkit.memcheck.static_check, with a
    WARNING line in the summary). Raises ConfigError for an input_shape the model cannot take (unknown input, static dim, one
    symbolic dim given two sizes), InputError for inputs that do not fit the model or input_shape."""
    check_out(out)  # --out, --dump and --save-outputs are refused before the model is read
    check_dump_dir(dump_dir, out)
    check_output_paths(output, dump_dir, out)
    loaded = None
    if plan:  # config None: the plan's own (as memcheck --plan)
        loaded, model, config = open_plan(plan, model, config)
    config = checked((config if config is not None else Config()).with_overrides(**(overrides or {})))
    if has_gears(config):
        return run_gears_command(model, config, inputs=inputs, seed=seed, val_range=val_range, dump_dir=dump_dir,
                                 output=output, out=out, plan=plan, progress=progress)
    src = resolve_model(model)
    progress(f"loading {src.path}")
    m = load_model(src.path)

    check_input_shapes(m, config.input_shapes(), where=config.where("input_shape"))  # a bad input_shape is a config error (exit 2) before any data
    feed = prepare_inputs(m, src, inputs, seed, val_range, config.input_shapes())
    progress(f"inputs: {feed.origin}")
    progress("compiling and building kernels")
    if plan:
        sess = _session_with_plan(m, loaded, plan, config, feed.arrays)
    else:
        sess = Session(m, config, input_shapes=shapes_of(feed.arrays))
    sess.path = str(src.path)
    progress(f"running {len(sess.plan.kernels)} kernels")
    try:
        res = sess.run(feed.arrays, dump=bool(dump_dir))
    except KernelRuntimeError as exc:  # the model's own fault (one line) when onnxruntime fails on it too
        raise_if_reference_fails(m, feed.arrays, exc)
        raise
    with output_dir(out, REPORTS_DIR, f"{src.name}-run") as folder:
        files = write_compile_artifacts(sess.compiled, folder)
        files["outputs"] = write_npz(Path(output) if output else folder / "outputs.npz", res.outputs)
        if dump_dir:
            check_dump_dir(dump_dir, out)  # again: the folder may have been filled during the run
            files["dump"] = write_dumps(res.dumps, sess.plan, Path(dump_dir))
    summary = compile_summary(sess.compiled)
    summary.append(f"ran {len(sess.plan.kernels)} kernels in {res.total_ms:.1f} ms host time "
                   f"(kernel build {sess.runtime.build_ms:.0f} ms)")
    for name, arr in res.outputs.items():
        desc = (f"a sequence of {len(arr)} tensor(s)" if isinstance(arr, (list, tuple)) else
                "an empty optional" if arr is None else f"{arr.dtype}{list(arr.shape)}")
        summary.append(f"output {printable(name)}: {desc}")
    summary.append(f"wrote {files['outputs']}" + (f" and dumps in {files['dump']}" if dump_dir else ""))
    code = 0
    if plan:  # a plan.json given by hand: its memory decisions may overwrite live data (memcheck's static check)
        conflicts = static_conflicts(sess.plan)
        if conflicts:
            c = conflicts[0]
            summary.append(f"WARNING: the plan '{plan}' overwrites live data in {len(conflicts)} place(s) (first: kernel "
                           f"'{printable(c.writer)}' writes '{printable(c.written)}' over '{printable(c.victim)}' before "
                           f"'{printable(c.reader)}' reads it): these outputs are not the model's; see "
                           f"`npuscope memcheck MODEL --plan {plan}`")
            code = 1
    return {"summary": summary, "out": folder, "files": files, "result": res, "exit_code": code,
            "status": "outputs wrong: the plan overwrites live data" if code else "ran"}
