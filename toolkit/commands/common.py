"""What several commands share: the default reports folder, output-path checks, a plan given with --plan."""

from __future__ import annotations

from pathlib import Path

from toolkit.compiler.fusion_switch import check_config
from toolkit.config.schema import Config
from toolkit.core.artifacts import check_out
from toolkit.core.errors import UsageError
from toolkit.core.userpaths import check_path
from toolkit.dataset.store import check_store_out
from toolkit.engine import Session, compile_model, npu_runtime, shapes_of
from toolkit.gears.spec import validate_gears
from toolkit.memcheck.planio import attach_plan, plan_where
from toolkit.memcheck.planio import plan_config as _plan_config
from toolkit.source import several_sets

REPORTS_DIR = Path("reports")


def _noop(msg: str) -> None:
    pass


def count_change(what: str, delta: int) -> str:
    """``"Casts added 2"``, ``"Casts removed 1"`` or ``"Casts unchanged"`` for a signed change ``delta``."""
    delta = int(delta)
    return f"{what} {'added' if delta > 0 else 'removed'} {abs(delta)}" if delta else f"{what} unchanged"


def check_output_paths(output: str | None, dump_dir: str | None, out: str | None) -> None:
    """Refuse, before any work (UsageError, exit 2), an ``--save-outputs`` file that exists, is the ``--dump`` folder
    or lies inside it, is the ``--out`` folder itself, or whose folder does not exist (and is not ``--out``,
    which the command creates), and a ``--save-outputs``, ``--dump`` or ``--out`` path the file system refuses
    (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way, permission
    denied)."""
    if not output:
        return
    st = check_path(output, "--save-outputs", fix="choose another --save-outputs")
    for path, what in ((dump_dir, "--dump"), (out, "--out")):
        if path:
            check_path(path, what, fix=f"choose another {what} (a new or empty folder)")
    o = Path(output).resolve()
    if st is not None:
        raise UsageError(f"output file '{output}' already exists; choose another --save-outputs")
    if dump_dir and (o == Path(dump_dir).resolve() or Path(dump_dir).resolve() in o.parents):
        raise UsageError(f"--save-outputs '{output}' and --dump '{dump_dir}' must be different paths (the dump folder "
                         "must be new or empty); give each its own path")
    if out and o == Path(out).resolve():
        raise UsageError(f"--save-outputs and --out both name '{output}'; --save-outputs is a .npz file, --out a "
                         "folder")
    parent = Path(output).parent
    if not parent.is_dir() and not (out and o.parent == Path(out).resolve()):
        raise UsageError(f"--save-outputs '{output}': folder '{parent}' does not exist; create it or choose another "
                         "path")


def check_out_for(out: str | None, inputs: str | None) -> None:
    """The early ``--out`` check of a command taking ``--inputs``: a folder of inputs is a dataset run, whose
    ``--out`` may hold a run to resume (toolkit.dataset.store.check_store_out), and so is a loader script, else
    toolkit.core.artifacts.check_out. Raises UsageError (exit 2)."""
    if several_sets(inputs):
        check_store_out(out)
    else:
        check_out(out)


def _single_input_only(jobs: int, ray: str | None, percentiles: str | None) -> None:
    given = [o for o, on in (("--jobs", jobs != 1), ("--ray", bool(ray)), ("--percentiles", percentiles is not None)) if on]
    if given:
        raise UsageError(f"{', '.join(given)} apply to dataset runs only; pass --inputs FOLDER (a folder of .npz "
                         "files) or --inputs loader.py:function")


def plan_config(plan, where) -> Config:
    """The Config a plan.json was compiled with (toolkit.memcheck.planio.plan_config)."""
    return _plan_config(plan, where)


def _session_with_plan(m, plan, plan_path, config: Config | None, arrays):
    """An engine Session whose runtime executes ``plan`` (a loaded Plan, read from the file ``plan_path``;
    config: the plan's own when None)."""
    cfg = config if config is not None else plan_config(plan, plan_path)
    sess = Session.__new__(Session)
    sess.model, sess.path, sess.config = m, "", cfg
    fresh = compile_model(m, cfg, input_shapes=shapes_of(arrays))
    sess.compiled = attach_plan(fresh, plan, where=plan_where(plan_path))
    sess.runtime = npu_runtime(sess.compiled)
    return sess


def load_config(path: str | None, **overrides) -> Config:
    """The config of a command: ``path`` (JSON or TOML; None for the defaults) with the command line's
    ``overrides`` (options that are not None), checked in full: the schema (toolkit.config.schema), the fusion
    switch file's pass names (toolkit.compiler.fusion_switch.check_config) and the gear options
    (toolkit.gears.spec.validate_gears). Raises ConfigError."""
    return checked(Config.load(path).with_overrides(**overrides))


def config_from_dict(data: dict, **kwargs) -> Config:
    """:meth:`Config.from_dict` (same arguments) followed by :func:`checked`. Raises ConfigError."""
    return checked(Config.from_dict(data, **kwargs))


def checked(config: Config) -> Config:
    """``config`` after the checks that need another package's vocabulary: the fusion switch file's pass names
    (toolkit.compiler.fusion_switch.check_config) and the gear options (toolkit.gears.spec.validate_gears).
    Returns ``config``; raises ConfigError naming where the option came from."""
    check_config(config)
    validate_gears(config, config.origin("dynamic_batch_size", "dynamic_dims"))
    return config
