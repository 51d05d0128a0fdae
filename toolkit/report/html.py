"""The HTML report: one page beside the report folder's shared plotly.js bundle (toolkit.report.assets: no
CDN, opens offline from its folder).

``render_report(diag, out_dir)`` builds the figures (toolkit.report.figures), turns the Diagnosis into plain
data (toolkit.report.context) and renders the jinja2 templates of the top-level ``templates/`` folder
(packaged as ``toolkit.templates``). Autoescape is on for every template: model-derived names are always
escaped. The only strings marked safe are ours: figure JSON escaped for a
``<script type="application/json">`` element (``<``, ``>`` and ``&`` become ``\\u003c``-style escapes, so no
``</script>`` can end the element early).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

import jinja2
from markupsafe import Markup

from toolkit.compare.diagnosis import Diagnosis
from toolkit.core.csvjson import atomic_write_text
from toolkit.report import context, figures, graph
from toolkit.report.assets import PLOTLY_FILE, write_plotly

TEMPLATE = "report.html.j2"
_JSON_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                        0x2028: "\\u2028", 0x2029: "\\u2029"}


def templates_dir() -> Path:
    """The folder holding report.html.j2: the installed ``toolkit/templates`` package data, else the
    top-level ``templates/`` of a source checkout. Raises FileNotFoundError naming both places."""
    tried = []
    try:
        spec = importlib.util.find_spec("toolkit.templates")
    except ModuleNotFoundError:
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(loc) / TEMPLATE).is_file():
            return Path(loc)
        tried.append(str(loc))
    source = Path(__file__).resolve().parents[2] / "templates"
    if (source / TEMPLATE).is_file():
        return source
    tried.append(str(source))
    raise FileNotFoundError(f"report template '{TEMPLATE}' not found in {' or '.join(tried)}; reinstall npuscope "
                            "(pip install .) so the templates are packaged")


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """jinja2's file cache of compiled templates (a file per template path, reused only while the source
    checksum matches). Compiling the report templates costs ~35 ms per process; a failed write only costs the
    next run that compile again."""

    def dump_bytecode(self, bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


#: Options of :func:`environment`; they shape the compiled code, so they are part of the bytecode file names.
_ENV_OPTIONS = {"autoescape": True, "undefined": jinja2.StrictUndefined, "trim_blocks": True, "lstrip_blocks": True}


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """A :class:`_BytecodeCache` in jinja2's per-user temporary folder (``<tmp>/_jinja2-cache-<uid>``, mode
    0700); files named after the jinja2 version and the environment options. None when no safe folder exists."""
    tag = hashlib.sha256(repr(sorted((k, getattr(v, "__name__", v)) for k, v in _ENV_OPTIONS.items()))
                         .encode()).hexdigest()[:12]
    try:
        return _BytecodeCache(pattern=f"npuscope-{jinja2.__version__}-{tag}-%s.cache")
    except (OSError, RuntimeError):
        return None


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The jinja2 environment: autoescape on for every template, undefined names raise; compiled templates
    kept between runs (:func:`_bytecode_cache`)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                              bytecode_cache=_bytecode_cache(), **_ENV_OPTIONS)


def script_json(text: str) -> Markup:
    """JSON text made safe inside ``<script type="application/json">`` (still valid, equal JSON)."""
    return Markup(text.translate(_JSON_SCRIPT_ESCAPES))


def plotly_src(out_dir: Path | None) -> str:
    """The ``src`` of the plotly.js script of a page written into ``out_dir``: the bundle is copied there once
    (toolkit.report.assets.write_plotly). Without ``out_dir`` (an HTML string for the caller to place) the
    page still names ``plotly.min.js`` beside itself."""
    return write_plotly(out_dir) if out_dir is not None else PLOTLY_FILE


def build_figures(diag: Diagnosis) -> dict[str, figures.FigureSpec]:
    """{"layers", "precision", "kernels", "graph"} figures of a diagnosis, as plotly figure data (``.to_json()``
    for plotly.js, ``.to_figure()`` for a plotly.graph_objects.Figure)."""
    lines = diag.summary.get("thresholds") if isinstance(diag.summary.get("thresholds"), dict) else None
    return {
        "layers": figures.layer_error_spec(diag.table, origin=context.origin_mask(diag), lines=lines),
        "precision": figures.precision_spec(diag.precision),
        "kernels": figures.kernel_time_spec(diag.kernel_times, top=context.KERNEL_TOP),
        "graph": graph.graph_spec(diag.neighbourhood, diag.table, diag.summary.get("origin_nodes") or []),
    }


def figure_blocks(figs: dict) -> dict[str, dict]:
    """{key: {"id": "fig-<key>", "json": script-safe figure JSON}}: what the ``figure`` template macro takes."""
    return {key: {"id": f"fig-{key}", "json": script_json(fig.to_json())} for key, fig in figs.items()}


def render_html(diag: Diagnosis, out_dir: Path | None = None, page: str = "index.html") -> str:
    """The report as an HTML string (``out_dir`` is used to show artifact sizes; ``page``: the report's own file
    name there, listed as "this page")."""
    src = plotly_src(out_dir)  # first: the artifacts table shows the bundle's size
    figs = figure_blocks(build_figures(diag))
    ctx = context.build_context(diag, Path(out_dir) if out_dir is not None else None, figs, page)
    return environment().get_template(TEMPLATE).render(**ctx, plotly_src=src)


def render_report(diag: Diagnosis, out_dir: Path, filename: str = "index.html") -> Path:
    """Write the HTML report of ``diag`` to ``out_dir/filename`` (atomically) and return its path.

    The folder is created if missing. Links in the artifacts section are relative to ``out_dir``; write the
    CSV/JSON tables first (toolkit.core.csvjson.write_tables) and list them in ``diag.artifacts`` to link them.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / filename
    atomic_write_text(path, render_html(diag, out_dir, filename))
    return path
