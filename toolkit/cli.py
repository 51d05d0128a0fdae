"""The ``npuscope`` command line: parses arguments and calls the public API (no logic of its own).

Exit codes: 0 success (for diagnose/compare: verdict PASS or WARN), 1 bad input or a failing verdict,
2 usage error (unknown option, bad config), 3 internal error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from toolkit.errors import UserError


_VERBOSITY = {"progress": None}  # None: show progress when stderr is a terminal


def _progress(msg: str) -> None:
    show = _VERBOSITY["progress"]
    if show is None:
        show = sys.stderr.isatty()
    if show:
        click.echo(f"[npuscope {time.strftime('%H:%M:%S')}] {msg}", err=True)


def _config(config_path, **overrides):
    from toolkit.config import Config

    cfg = Config.load(config_path)
    data = cfg.to_dict()
    data.update({k: v for k, v in overrides.items() if v is not None})
    return Config.from_dict(data, where="command line") if overrides else cfg


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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="npuscope")
@click.option("-v", "--verbose", is_flag=True, help="Show progress even when stderr is not a terminal.")
@click.option("-q", "--quiet", is_flag=True, help="Never show progress.")
def cli(verbose, quiet):
    """npuscope: compile ONNX models for a simulated NPU, run them in mixed precision next to an FP32
    onnxruntime reference, and find where and why accuracy is lost.

    MODEL may be a file, a bundled sample (resnet_small, transformer_block, detector_head) or a zoo name
    (ppocr_det, ppocr_rec, ppocr_cls: downloaded and sha256-checked on first use)."""
    from toolkit.runtime.ort_env import enable_global_thread_pool

    _VERBOSITY["progress"] = False if quiet else (True if verbose else None)
    enable_global_thread_pool()


@cli.command("compile")
@click.argument("model", required=False)
@common
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-<time>/.")
def compile_cmd(model, config_path, precision_mode, fusion_level, input_shape, out):
    """Compile MODEL and write plan.json, compile.log and fusion_result.json."""
    from toolkit import api

    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = api.compile_command(model, cfg, out, progress=_progress)
    for line in res["summary"]:
        click.echo(line)
    click.echo(f"wrote {res['out']}")


@cli.command("run")
@click.argument("model", required=False)
@common
@click.option("--inputs", type=click.Path(), help="Input .npz (keys = model input names). Default: the model's "
              "registered realistic input, else seeded random data.")
@click.option("--seed", default=0, show_default=True, help="Seed for generated inputs.")
@click.option("--val-range", help='Range of generated inputs per input, e.g. "x:[0,1];mask:[0,1]".')
@click.option("--dump", "dump_dir", type=click.Path(), help="Write every kernel output as <tensor>.npy into this new folder.")
@click.option("--output", "output", type=click.Path(), help="Where to write the outputs .npz (must not exist). "
              "Default <out>/outputs.npz.")
@click.option("--out", help="Output folder (must be new or empty). Default reports/<model>-<time>/.")
def run_cmd(model, config_path, precision_mode, fusion_level, input_shape, inputs, seed, val_range, dump_dir,
            output, out):
    """Run MODEL in simulated NPU mode and write its outputs (npz) and, with --dump, every kernel output."""
    from toolkit import api

    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = api.run_command(model, cfg, inputs=inputs, seed=seed, val_range=val_range, dump_dir=dump_dir,
                          output=output, out=out, progress=_progress)
    for line in res["summary"]:
        click.echo(line)


def _diag_options(fn):
    opts = [
        click.option("--inputs", type=click.Path(), help="Input .npz, or a folder of .npz (the first is used). "
                     "Default: the model's registered realistic input, else seeded random data."),
        click.option("--seed", default=0, show_default=True, help="Seed for generated inputs (recorded)."),
        click.option("--val-range", help='Range of generated inputs per input, e.g. "x:[0,1];mask:[0,1]".'),
        click.option("--thresholds", help='Abnormal lines, e.g. "CosineSimilarity<0.999,MaxAbsoluteError>1e-2" '
                     "(defaults: the compare tool's)."),
        click.option("--task-metric", "task_metrics", multiple=True, help="Extra task check module:function (repeatable)."),
        click.option("--out", help="Report folder (must be new or empty). Default reports/<model>-<time>/."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _diag(model, config_path, precision_mode, fusion_level, input_shape, inputs, seed, val_range, thresholds,
          task_metrics, out, html):
    from toolkit import api

    cfg = _config(config_path, precision_mode=precision_mode, fusion_level=fusion_level, input_shape=input_shape)
    res = api.diagnose_command(model, cfg, inputs=inputs, seed=seed, val_range=val_range, thresholds=thresholds,
                               task_metrics=task_metrics, out=out, html=html, progress=_progress)
    for line in res["summary"]:
        click.echo(line)
    if res["verdict"] == "FAIL":
        sys.exit(1)


@cli.command("diagnose")
@click.argument("model", required=False)
@common
@_diag_options
def diagnose_cmd(**kw):
    """Compile MODEL, run the FP32 reference and the NPU plan on the same inputs, compare every tensor and
    write an HTML report (plus CSV/JSON). Exit code 1 when the verdict is FAIL."""
    _diag(html=True, **kw)


@cli.command("compare")
@click.argument("model", required=False)
@common
@_diag_options
def compare_cmd(**kw):
    """Like diagnose, without HTML: result.csv, summary.json, findings.json for scripts and CI."""
    _diag(html=False, **kw)


def main(argv=None) -> None:
    """Console entry point: user mistakes print one line and exit 1/2; internal errors exit 3."""
    try:
        cli.main(args=argv, prog_name="npuscope", standalone_mode=False)
    except UserError as exc:
        click.echo(f"npuscope: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("npuscope: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        msg = " ".join(exc.format_message().split())
        click.echo(f"npuscope: error: {msg}" + (" (see --help)" if isinstance(exc, click.UsageError) else ""), err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except KeyboardInterrupt:
        click.echo("npuscope: interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # a bug in npuscope, not the user's fault
        import traceback

        traceback.print_exc()
        click.echo(f"npuscope: internal error ({type(exc).__name__}: {exc}); please report it with the traceback above",
                   err=True)
        sys.exit(3)
