"""Find the dump files of a device dump's nested folder layout (a hook of :mod:`toolkit.dumps.readers`).

The device writes its dumps under ``{dump_path}/{time}/{device_id}/{om_model_name}/{model_id}/{iteration}/``
(CANN "dump data" docs). A side given as a folder that holds no file itself but such a tree is read from the one
folder inside it that holds files; when several do (several iterations, devices or models) the side is refused
with the folders listed, so the user picks one instead of the tool guessing.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.core.errors import InputError

#: the layout has five levels; a little slack for an extra folder above or below
MAX_DEPTH = 7
#: folders visited before giving up (a dump tree of one model run has a handful)
MAX_FOLDERS = 10_000
LAYOUT = "{time}/{device_id}/{om_model}/{model_id}/{iteration}/"


def nested_dump_folder(root: Path, label: str, holds_dumps=bool) -> Path | None:
    """The single folder under ``root`` (at most :data:`MAX_DEPTH` levels, symbolic links to folders not
    followed) whose file names ``holds_dumps(names) -> bool`` takes for dumps (default: any file); None when no
    folder below does. Raises InputError when several do, naming them (relative to ``root``), or when the tree is
    too large to search."""
    found, visited = [], 0
    for top, dirs, files in os.walk(root, followlinks=False):
        visited += 1
        if visited > MAX_FOLDERS:
            raise InputError(f"{label} holds no dump itself and more than {MAX_FOLDERS} folders below it; give the "
                             f"folder that holds the dumps ({LAYOUT})")
        depth = len(Path(top).relative_to(root).parts)
        if depth >= MAX_DEPTH:
            dirs[:] = []
        dirs.sort()
        if files and depth > 0 and holds_dumps(sorted(files)):
            found.append(Path(top))
    if len(found) > 1:
        shown = ", ".join(f"'{p.relative_to(root).as_posix()}'" for p in found[:4])
        more = f" and {len(found) - 4} more" if len(found) > 4 else ""
        raise InputError(f"{label} holds no dump itself but dumps in {len(found)} nested folders ({shown}{more}); "
                         f"give one of them as the side (device layout {LAYOUT})")
    return found[0] if found else None
