"""kernel_times.csv of ``npuscope diagnose`` (toolkit.core.csvjson; columns Kernel, OpType, Precision,
Nodes, HostMs): host wall time of each simulated-NPU kernel, in ms.

Rows become op-summary tasks: Op Name = Kernel, OP Type = OpType, Task Type HOST_CPU (measured on this host),
Task Duration(us) = HostMs x 1000, Time Kind ``measured``, Input/Output Data Types from Precision
(fp16 → DT_FLOAT16, fp32 → DT_FLOAT: a kernel reads and stores its float tensors in its precision), Task ID =
row order. The file has no start times (diagnose sorts it by time), so these rows are not on the timeline.
Malformed rows (counted, skipped, each reason in a note): more or fewer fields than the header (never shifted:
toolkit.logs.csvread), no Kernel, or HostMs missing, not a number, negative, not finite or beyond 1e18 µs once
in µs (toolkit.logs.numbers). A header naming a column it reads twice makes the file unreadable (ValueError).
"""

from __future__ import annotations

from pathlib import Path

from toolkit.logs.csvread import header, malformed_mask, numeric, read_counted
from toolkit.logs.numbers import sane_mask
from toolkit.logs.registry import Parser, ParseResult, register_parser
from toolkit.profile.optable import op_summary_frame

NAME = "kernel_times_csv"
DESCRIPTION = "npuscope diagnose kernel_times.csv (Kernel, OpType, Precision, Nodes, HostMs)"
COLUMNS = ["Kernel", "OpType", "Precision", "Nodes", "HostMs"]
DTYPES = {"fp16": "DT_FLOAT16", "fp32": "DT_FLOAT"}


def detect(path: Path, head: str) -> bool:
    return {"Kernel", "OpType", "HostMs"} <= set(header(head))


def parse(path: Path) -> ParseResult:
    """Read a kernel_times.csv (module docstring)."""
    path = Path(path)
    read = read_counted(path, COLUMNS)
    df = read.frame
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = ""
    ms = numeric(df["HostMs"])
    us = ms.where(sane_mask(ms)) * 1000.0  # only sane values are scaled: no overflow
    ok, why = malformed_mask({"no Kernel": df["Kernel"].str.strip() == "",
                              "HostMs missing, not a number, not finite or beyond 1e18 us": ~sane_mask(us),
                              "negative HostMs": us < 0})
    good, ms = df[ok], ms[ok]
    dtype = good["Precision"].str.strip().str.lower().map(DTYPES).fillna("")
    summary = op_summary_frame({
        "Task ID": range(len(good)), "Op Name": good["Kernel"].to_numpy(), "OP Type": good["OpType"].to_numpy(),
        "Task Type": "HOST_CPU", "Task Duration(us)": (ms * 1000.0).to_numpy(),
        "Input Data Types": dtype.to_numpy(), "Output Data Types": dtype.to_numpy(), "Time Kind": "measured",
        "Source": path.name}) if len(good) else op_summary_frame([])
    return ParseResult(str(path), NAME, op_summary=summary, records=len(summary),
                       malformed=read.malformed + int((~ok).sum()),
                       notes=["host wall time of simulated-NPU kernels (measured); no start times, not on the timeline"]
                       + read.notes + why)


register_parser(Parser(NAME, DESCRIPTION, detect, parse))
