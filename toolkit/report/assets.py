"""Files a report folder shares between its pages: the plotly.js bundle, written once beside them.

Every HTML page of a report folder (index.html, signoff.html, tune.html, profile.html, memory.html, gears.html,
regress.html) loads ``plotly.min.js`` from its own folder with ``<script src="plotly.min.js">`` instead of
inlining the 4.6 MB bundle: a folder of several pages holds it once, and each page stays small. The file is the
installed plotly package's own ``plotly/package_data/plotly.min.js`` (the bundle ``plotly.offline`` inlines),
copied byte for byte, so the pages still open offline from the folder (no CDN).
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import tempfile
from pathlib import Path

#: File name of the shared bundle, beside the pages that load it.
PLOTLY_FILE = "plotly.min.js"


def plotly_bundle() -> Path:
    """The installed plotly package's plotly.min.js. Raises FileNotFoundError (naming the path and the fix)
    when the package data is missing."""
    path = Path(str(importlib.resources.files("plotly") / "package_data" / PLOTLY_FILE))
    if not path.is_file():
        raise FileNotFoundError(f"plotly.js bundle '{path}' not found; reinstall plotly (pip install --force-reinstall "
                                "plotly)")
    return path


def write_plotly(folder: str | Path) -> str:
    """Copy the plotly.js bundle into ``folder`` as ``plotly.min.js`` unless a file of the same size is there
    already (written atomically: a temporary file renamed into place). Returns the ``src`` a page in ``folder``
    uses, "plotly.min.js". A file of that name that is not a regular file is left alone (the page then shows
    its 'charts need plotly.min.js' note)."""
    folder = Path(folder)
    src = plotly_bundle()
    dest = folder / PLOTLY_FILE
    if dest.is_symlink() or (dest.exists() and not dest.is_file()):
        return PLOTLY_FILE
    if dest.is_file() and dest.stat().st_size == src.stat().st_size:
        return PLOTLY_FILE
    fd, tmp = tempfile.mkstemp(prefix=".plotly-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return PLOTLY_FILE
