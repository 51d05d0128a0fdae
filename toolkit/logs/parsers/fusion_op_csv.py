"""msprof's fusion_op CSV (``fusion_op_*.csv``: which original operators each fused device operator stands for).

Format (CANN profiling data reference, "fusion_op (Operator Fusion Information)"; msprof's export header):
``[Device_id,] Model Name, Model ID, Fusion Op, Original Ops, Memory Input(KB), Memory Output(KB),
Memory Weight(KB), Memory Workspace(KB), Memory Total(KB)``. ``Original Ops`` lists the base operators' names
joined with ``;`` (msprof joins them so when exporting).

No per-task times, so ``op_summary`` is empty; the rows go to table ``fusion_ops`` with columns Model Name,
Fusion Op, Original Ops (names stripped, re-joined with ';'). Detected by a header holding ``Fusion Op`` and
``Original Ops``. Malformed rows (counted, skipped, reason in a note): more or fewer fields than the header, no
Fusion Op, no Original Ops. A header naming a column it reads twice is refused (ValueError: ambiguous).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from toolkit.logs.csvread import header, malformed_mask, read_counted
from toolkit.logs.registry import Parser, ParseResult, register_parser

NAME = "fusion_op_csv"
DESCRIPTION = "profiler fusion_op CSV (Fusion Op, Original Ops: the original ops behind each fused device op)"
COLUMNS = ["Model Name", "Fusion Op", "Original Ops"]


def detect(path: Path, head: str) -> bool:
    return {"Fusion Op", "Original Ops"} <= set(header(head))


def split_ops(text: str) -> list[str]:
    """The names of an ``Original Ops`` cell (';'-separated, blanks dropped)."""
    return [n.strip() for n in str(text).split(";") if n.strip()]


def parse(path: Path) -> ParseResult:
    """Read a fusion_op CSV (module docstring)."""
    read = read_counted(Path(path), COLUMNS)
    df = read.frame
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = ""
    ops = df["Original Ops"].map(lambda s: ";".join(split_ops(s)))
    ok, why = malformed_mask({"no Fusion Op": df["Fusion Op"].str.strip() == "", "no Original Ops": ops == ""})
    table = pd.DataFrame({"Model Name": df["Model Name"].str.strip(), "Fusion Op": df["Fusion Op"].str.strip(),
                          "Original Ops": ops})[ok.to_numpy()].reset_index(drop=True)
    return ParseResult(str(path), NAME, tables={"fusion_ops": table}, records=len(table),
                       malformed=read.malformed + int((~ok).sum()),
                       notes=[f"{len(table)} fused device op(s)"] + read.notes + why)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
