"""A cap on the text parse-log stores: one log record of 30 MB must not be copied whole into every CSV, JSON
and the HTML report.

Any stored text longer than :data:`MAX_TEXT_CHARS` (2,000) characters keeps its first 2,000 characters
followed by the marker ``… [truncated: N characters]`` (N = the original length), so readers see both that it
was cut and how long it was; clipping clipped text again changes nothing. Applied by the plog parser as it reads (memory stays bounded) and by
toolkit.commands.parse_log to every text cell of every table and of the op summary, whatever parser made it.
"""

from __future__ import annotations

import re

import pandas as pd

MAX_TEXT_CHARS = 2000


def marker(length: int) -> str:
    """The text appended to a truncated value of ``length`` characters."""
    return f" … [truncated: {length:,} characters]"


_CLIPPED = re.compile(r" … \[truncated: [\d,]+ characters\]")


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` itself when at most ``limit`` characters (or already clipped: idempotent), else its first
    ``limit`` characters + :func:`marker`."""
    if not isinstance(text, str) or len(text) <= limit or _CLIPPED.fullmatch(text, limit):
        return text
    return text[:limit] + marker(len(text))


def clip_frame(df: pd.DataFrame, limit: int = MAX_TEXT_CHARS) -> tuple[pd.DataFrame, int]:
    """(``df`` with every text cell longer than ``limit`` clipped (:func:`clip`), number of clipped cells,
    including those a parser had clipped already);
    the same object when nothing is too long, else a copy. Non-text columns are untouched."""
    out, n = df, 0
    for col in df.columns:
        s = df[col]
        if s.dtype.kind not in "OSU" and not isinstance(s.dtype, pd.StringDtype):
            continue
        try:
            long = (s.str.len() > limit).fillna(False).astype(bool)  # vectorised; NaN for non-text cells
        except AttributeError:  # an object column without any text
            continue
        if long.any():
            n += int(long.sum())  # every long cell ends up clipped (now, or already by a parser)
            new = s[long].map(lambda v: clip(v, limit))
            changed = new != s[long]
            if changed.any():
                out = out.copy() if out is df else out
                out.loc[new.index[changed], col] = new[changed]
    return out, n
