"""Attribution: which rows of a real device profile belong to which kernel of our plan (and ONNX nodes).

Inputs: a device profile brought to the op_summary schema (toolkit.profile.optable; read from msprof's
op_summary_*.csv or torch_npu's kernel_details.csv by :func:`read_device_profile`), optionally msprof's
fusion_op_*.csv (``Fusion Op`` → ``Original Ops``), and the cost table of our plan (toolkit.profile.cost).

Each device row is matched, in this order (the first rule that applies wins):

1. ``name`` — its Op Name is a kernel's name or the name of one of the kernel's original ONNX nodes;
2. ``original_ops`` — its Op Name is a fused device op whose Original Ops (fusion_op CSV) name nodes of the plan:
   the row goes to every kernel holding one of them (the device may fuse more than we do);
3. ``type_shape`` — its OP Type (device names normalised: Conv2D → Conv, MatMulV2 → MatMul, ...:
   :data:`DEVICE_TYPES`; a fused kernel "Conv+Add+Relu" is of type Conv too) and Output Shapes (an NC1HWC0
   5-D shape matches the 4-D NCHW one with ``C1 = ceil(C / C0)``) equal a kernel's that no rule 1/2 row claimed; rows with the same candidate kernels are assigned to
   them round-robin in execution order (Task Start Time(us), else file order), so a profile of several
   iterations gives each kernel one row per iteration. A row without Output Shapes matches on its type alone.

A row none of these rules places stays in the ``unmatched`` table with its reason; rows whose Time Kind is not
``device`` are unmatched too (a simulated or host-measured time is no device time).

Rows and kernels joined by a match form *units* (connected components: a device op spanning two of our kernels,
or two device ops for one fused kernel of ours). A unit's device time is the sum of its rows' Task Duration(us)
divided by its number of iterations (occurrences of the same name; for type/shape rows, passes through the key's
kernels). A kernel's DeviceUs is its unit's device time, shared between the unit's kernels in proportion to
their simulated time when a unit has several.

:data:`KERNEL_COLUMNS` (one row per plan kernel, plan order): Index, Kernel, OpType, OpClass, Nodes, Placement,
Precision, Match (name / original_ops / type_shape / none), DeviceOps (';'-joined Op Names), DeviceRows,
Iterations, TaskType and BlockDim (the device's, most frequent), DeviceDtypes (Input Data Types of its first
row), SimulatedUs (the cost model's, µs), DeviceUs (µs per iteration; NaN when no row matched), Ratio
(SimulatedUs / DeviceUs), Unit (unit id, -1 when unmatched), UnitKernels (kernels in its unit).
:data:`UNMATCHED_COLUMNS`: Row (0-based row of the profile), Op Name, OP Type, Task Type,
Task Duration(us), Output Shapes, Reason. :data:`UNIT_COLUMNS`: Unit, Kernels (';'-joined plan indices),
Rows, Iterations, DeviceUs, SimulatedUs, Match, TaskType.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit.core.errors import InputError
from toolkit.core.userpaths import check_path
from toolkit.logs.detect import detect_format
from toolkit.logs.profdirs import output_folder
from toolkit.logs.parsers import fusion_op_csv, kernel_details_csv, op_summary_csv
from toolkit.profile.optable import op_summary_frame

KERNEL_COLUMNS = ["Index", "Kernel", "OpType", "OpClass", "Nodes", "Placement", "Precision", "Match", "DeviceOps",
                  "DeviceRows", "Iterations", "TaskType", "BlockDim", "DeviceDtypes", "SimulatedUs", "DeviceUs",
                  "Ratio", "Unit", "UnitKernels"]
UNMATCHED_COLUMNS = ["Row", "Op Name", "OP Type", "Task Type", "Task Duration(us)", "Output Shapes", "Reason"]
UNIT_COLUMNS = ["Unit", "Kernels", "Rows", "Iterations", "DeviceUs", "SimulatedUs", "Match", "TaskType"]
#: Device (CANN / GE) op types and the ONNX op type each stands for; any other type is compared as it is,
#: after dropping a trailing ``V2``/``V3`` and a final ``D`` when that gives an ONNX type of the plan.
DEVICE_TYPES = {
    "Conv2D": "Conv", "Conv3D": "Conv", "DepthwiseConv2D": "Conv", "Conv2DTranspose": "ConvTranspose",
    "Conv2DTransposeD": "ConvTranspose", "Deconvolution": "ConvTranspose", "MatMulV2": "MatMul",
    "MatMulV3": "MatMul", "BatchMatMul": "MatMul", "BatchMatMulV2": "MatMul", "FullyConnection": "Gemm",
    "Pooling": "MaxPool", "MaxPoolV3": "MaxPool", "AvgPoolV2": "AveragePool", "AvgPool": "AveragePool",
    "RealDiv": "Div", "ReduceMeanD": "ReduceMean", "ReduceSumD": "ReduceSum", "ReduceMaxD": "ReduceMax",
    "SoftmaxV2": "Softmax", "ConcatD": "Concat", "ConcatV2D": "Concat", "ConcatV2": "Concat",
    "TransposeD": "Transpose", "SplitD": "Split", "SplitVD": "Split", "PadD": "Pad", "PadV3": "Pad",
    "ResizeBilinearV2": "Resize", "ResizeNearestNeighborV2": "Resize", "Upsample": "Resize", "HardSwish": "HardSwish",
    "HardSigmoid": "HardSigmoid", "LayerNorm": "LayerNormalization", "LayerNormV3": "LayerNormalization",
    "BNInference": "BatchNormalization", "BNInferenceD": "BatchNormalization", "Swish": "Sigmoid",
    "StridedSliceD": "Slice", "StridedSlice": "Slice", "GatherV2": "Gather", "GatherV2D": "Gather",
    "TileD": "Tile", "ClipByValue": "Clip", "Maximum": "Max", "Minimum": "Min", "Muls": "Mul", "Adds": "Add",
}


@dataclass
class Attribution:
    """What :func:`attribute` found (tables as in the module docstring)."""

    kernels: pd.DataFrame
    units: pd.DataFrame
    unmatched: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def matched_rows(self) -> int:
        return int(self.units["Rows"].sum()) if len(self.units) else 0


# ---------------------------------------------------------------- reading
def _profile_table(folder: Path) -> Path:
    """The one op_summary_*.csv / kernel_details.csv of a profiler folder (toolkit.logs.profdirs.output_folder).
    Raises InputError for none or several (one per device: give the file)."""
    out = output_folder(folder)
    found = sorted([*out.glob("op_summary*.csv"), *out.glob("kernel_details*.csv")])
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(f"device profile folder '{folder}' holds no op_summary_*.csv or kernel_details.csv "
                         f"(looked in '{out}'); give the file, or export the profile with msprof --export")
    raise InputError(f"device profile folder '{folder}' holds {len(found)} tables ({', '.join(f.name for f in found[:4])}"
                     f"{' ...' if len(found) > 4 else ''}); give the one of the device to audit")


def read_device_profile(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """(op summary of a real device's profile, its ``attrs["table"]`` "op_summary" or "kernel_details", notes):
    msprof op_summary_*.csv
    (toolkit.logs.parsers.op_summary_csv) or torch_npu kernel_details.csv (toolkit.logs.parsers.kernel_details_csv),
    told apart by their headers (toolkit.logs.detect). ``path`` may be the profiler's folder (a PROF_* folder,
    its mindstudio_profiler_output, an ASCEND_PROFILER_OUTPUT or the folder above one: toolkit.logs.profdirs)
    holding exactly one such table.

    Raises:
        InputError: the file is missing, not a CSV of either format (the columns each needs are named), holds
            no readable row, or holds the rows of several devices (Device_id); a path the file system refuses
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied).
    """
    p = Path(path)
    check_path(p, "device profile", InputError, "give an msprof op_summary_*.csv or a torch_npu kernel_details.csv "
               "(or the profiler folder holding one)")
    if p.is_dir():
        p = _profile_table(p)
    if not p.is_file():
        raise InputError(f"device profile '{p}' does not exist or is not a file; give an msprof op_summary_*.csv "
                         "or a torch_npu kernel_details.csv (or the profiler folder holding one)")
    try:
        found = detect_format(p).parser
    except (OSError, ValueError) as exc:
        raise InputError(f"device profile '{p}' cannot be read: {exc}") from None
    name = found.name if found is not None else ""
    readers = {op_summary_csv.NAME: op_summary_csv.parse, kernel_details_csv.NAME: kernel_details_csv.parse}
    if name not in readers:
        raise InputError(f"device profile '{p}' is neither an op_summary CSV (columns 'Op Name', 'Task Duration(us)') "
                         "nor a kernel_details CSV (columns 'Name', 'Type', 'Accelerator Core', 'Duration(us)')")
    try:
        res = readers[name](p)
    except (OSError, ValueError) as exc:
        raise InputError(f"device profile '{p}': {exc}") from None
    if res.op_summary.empty:
        raise InputError(f"device profile '{p}' has no readable row ({res.malformed} malformed: "
                         f"{'; '.join(res.notes[-3:]) or 'no data rows'})")
    _refuse_several_devices(p, res.op_summary)
    notes = [f"{p.name}: read as {name}, {res.records} row(s)"] + [f"{p.name}: {n}" for n in res.notes]
    if res.malformed:
        notes.append(f"{p.name}: {res.malformed} malformed row(s) skipped")
    res.op_summary.attrs["table"] = {op_summary_csv.NAME: "op_summary", kernel_details_csv.NAME: "kernel_details"}[name]
    return res.op_summary, notes


def _refuse_several_devices(p: Path, summary: pd.DataFrame) -> None:
    """Raise InputError when the rows name more than one Device_id: each device runs the whole model, so their
    rows would be averaged into one kernel's time as if they were iterations of one device."""
    if "Device_id" not in summary.columns:
        return
    ids = [d for d in dict.fromkeys(summary["Device_id"].fillna("").astype(str).str.strip()) if d]
    if len(ids) > 1:
        counts = summary["Device_id"].fillna("").astype(str).str.strip().value_counts()
        shown = ", ".join(f"{d} ({int(counts[d])} rows)" for d in ids[:6])
        raise InputError(f"device profile '{p}' holds the rows of {len(ids)} devices (Device_id {shown}); each runs "
                         "the whole model, so their times would be averaged as iterations of one: give one device's "
                         f"table (its device_{ids[0]} folder, or the rows whose Device_id is {ids[0]})")


def read_fusion_ops(path: str | Path) -> dict[str, list[str]]:
    """{fused device op: [original op names]} of an msprof fusion_op_*.csv (toolkit.logs.parsers.fusion_op_csv).

    Raises:
        InputError: missing file, not a fusion_op CSV (needs 'Fusion Op' and 'Original Ops'), or no readable row;
            a path the file system refuses (toolkit.core.userpaths.check_path: a name too long, a symbolic link
            loop, a file on the way, permission denied).
    """
    p = Path(path)
    check_path(p, "fusion_op file", InputError, "give an msprof fusion_op_*.csv")
    if not p.is_file():
        raise InputError(f"fusion_op file '{p}' does not exist or is not a file")
    try:
        found = detect_format(p).parser
        res = fusion_op_csv.parse(p) if found is not None and found.name == fusion_op_csv.NAME else None
    except (OSError, ValueError) as exc:
        raise InputError(f"fusion_op file '{p}': {exc}") from None
    if res is None:
        raise InputError(f"fusion_op file '{p}' has no 'Fusion Op' and 'Original Ops' columns (msprof fusion_op_*.csv)")
    table = res.tables["fusion_ops"]
    if table.empty:
        raise InputError(f"fusion_op file '{p}' has no readable row")
    return {str(f): fusion_op_csv.split_ops(o) for f, o in zip(table["Fusion Op"], table["Original Ops"])}


# ---------------------------------------------------------------- shapes and types
def parse_shapes(text) -> list[tuple[int, ...] | None]:
    """Shapes of a profiler shape cell: ';' between tensors, ',' between dims (``"1,3,8,8;4"``); a tensor that
    does not parse is None; an empty cell gives []."""
    text = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    text = text.strip().strip('"')
    if not text:
        return []
    out: list[tuple[int, ...] | None] = []
    for part in text.split(";"):
        dims = [d.strip() for d in part.strip().strip("[]()").split(",") if d.strip()]
        try:
            out.append(tuple(int(d) for d in dims))
        except ValueError:
            out.append(None)
    return out


def same_shape(device: tuple[int, ...] | None, ours: tuple[int, ...] | None) -> bool:
    """Equal shapes, or a 5-D NC1HWC0 device shape (N, C1, H, W, C0) for our 4-D NCHW (N, C, H, W) with
    ``C1 == ceil(C / C0)`` (the layout pads C to a multiple of C0)."""
    if device is None or ours is None:
        return False
    if tuple(device) == tuple(ours):
        return True
    if len(device) == 5 and len(ours) == 4 and device[4] > 0:
        n, c1, h, w, c0 = device
        return (n, h, w) == (ours[0], ours[2], ours[3]) and c1 == math.ceil(ours[1] / c0)
    return False


def onnx_type(device_type: str, known: set[str]) -> str:
    """The ONNX op type a device op type stands for (:data:`DEVICE_TYPES`; else the type itself, or without a
    trailing V2/V3/D when that is an op type in ``known``)."""
    t = str(device_type).strip()
    if t in known:
        return t
    if t in DEVICE_TYPES:
        return DEVICE_TYPES[t]
    for suffix in ("V2", "V3", "D"):
        if t.endswith(suffix) and t[: -len(suffix)] in known:
            return t[: -len(suffix)]
    return t


# ---------------------------------------------------------------- matching
class _Matcher:
    def __init__(self, summary: pd.DataFrame, costs: pd.DataFrame, fusion_ops: dict[str, list[str]]):
        self.rows = summary.reset_index(drop=True)
        self.costs = costs.reset_index(drop=True)
        self.fusion_ops = fusion_ops
        self.by_name: dict[str, int] = {}
        for i, (kernel, nodes) in enumerate(zip(self.costs["Kernel"], self.costs["Nodes"])):
            self.by_name.setdefault(str(kernel), i)
        for i, nodes in enumerate(self.costs["Nodes"]):
            for n in str(nodes).split(";"):
                if n:
                    self.by_name.setdefault(n, i)
        self.match: dict[int, tuple[list[int], str, int]] = {}  # row -> (kernels, rule, iteration)
        self.reasons: dict[int, str] = {}
        self.known_types = {t for op in self.costs["OpType"] for t in _types(op)}

    def run(self) -> None:
        kinds = self.rows["Time Kind"].fillna("").astype(str).str.strip().replace("", "device")
        seen: Counter = Counter()
        for r, name in enumerate(self.rows["Op Name"].astype(str)):
            if kinds[r] != "device":
                self.reasons[r] = f"Time Kind '{kinds[r]}' is not a device time"
                continue
            hit = self._by_name(name.strip())
            if hit is not None:
                self.match[r] = (hit[0], hit[1], seen[name])
                seen[name] += 1
        self._by_type_shape([r for r in range(len(self.rows)) if r not in self.match and r not in self.reasons])

    def _by_name(self, name: str):
        if name in self.by_name:
            return [self.by_name[name]], "name"
        if name in self.fusion_ops:
            originals = self.fusion_ops[name]
            kernels = sorted({self.by_name[o] for o in originals if o in self.by_name})
            if kernels:
                return kernels, "original_ops"
        return None

    def _claimed(self) -> set[int]:
        return {k for ks, _rule, _it in self.match.values() for k in ks}

    def _by_type_shape(self, rows: list[int]) -> None:
        claimed = self._claimed()
        free = [i for i in range(len(self.costs)) if i not in claimed and self.costs.at[i, "Stream"] != "copy"]
        starts = self.rows["Task Start Time(us)"]
        rows = sorted(rows, key=lambda r: (starts[r] if not math.isnan(starts[r]) else math.inf, r)) \
            if starts.notna().any() else rows
        passes: Counter = Counter()
        for r in rows:
            row = self.rows.iloc[r]
            op = onnx_type(row["OP Type"], self.known_types)
            out = parse_shapes(row["Output Shapes"])
            cands = [i for i in free if op in _types(self.costs.at[i, "OpType"]) and self._shapes_fit(out, i)]
            if not cands:
                self.reasons[r] = self._why_not(row, op, out)
                continue
            key = (op, tuple(cands))  # one rotation per candidate set, however the device spells the shape
            k = cands[passes[key] % len(cands)]
            self.match[r] = ([k], "type_shape", passes[key] // len(cands))
            passes[key] += 1

    def _shapes_fit(self, device_out: list, i: int) -> bool:
        if not device_out:
            return True
        ours = parse_shapes(self.costs.at[i, "OutputShapes"])
        return len(ours) == len(device_out) and all(same_shape(d, o) for d, o in zip(device_out, ours))

    def _why_not(self, row, op: str, out: list) -> str:
        name = str(row["Op Name"]).strip()
        if name in self.fusion_ops:
            return (f"fused device op: none of its Original Ops ({';'.join(self.fusion_ops[name])[:120]}) is a node "
                    "or kernel of the plan")
        same = self.costs[[op in _types(t) for t in self.costs["OpType"]]]
        if same.empty and "memcpy" in f"{op} {name}".lower():
            return (f"a memory copy row ('{name[:80]}', {op or 'no type'}): host-device transfers are tasks, not "
                    "kernels of the plan (npuscope's own op_summary marks its MemcpyH2D/MemcpyD2H rows "
                    "'simulated' in its Time Kind column)")
        if same.empty:
            return (f"no plan kernel named '{name[:80]}' or holding a node of that name, and no kernel of type "
                    f"{op or '?'} (an op the device inserted, e.g. a format conversion?)")
        shapes = sorted(set(same["OutputShapes"].astype(str)))[:3]
        return (f"no plan kernel named '{name[:80]}'; no free kernel of type {op} with Output Shapes "
                f"'{row['Output Shapes']}' (the plan's {len(same)} {op} kernel(s) write {', '.join(shapes)}"
                f"{' ...' if len(same) > 3 else ''}; the others were claimed by name)")


def _types(op_type) -> set[str]:
    """A kernel's op type and, for a fused kernel named by its ops ("Conv+Add+Relu"), its anchor op ("Conv")."""
    t = str(op_type)
    return {t, t.split("+")[0]}


def _units(m: _Matcher) -> tuple[list[list[int]], list[list[int]]]:
    """Connected components of the row-kernel match graph: ([kernels], [rows]) per unit, by first kernel."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for r, (ks, _rule, _it) in m.match.items():
        for k in ks:
            parent[find(("r", r))] = find(("k", k))
    groups: dict = defaultdict(lambda: ([], []))
    for r, (ks, _rule, _it) in m.match.items():
        groups[find(("r", r))][1].append(r)
        for k in ks:
            if k not in groups[find(("k", k))][0]:
                groups[find(("k", k))][0].append(k)
    comps = sorted(((sorted(k), sorted(r)) for k, r in groups.values()), key=lambda c: c[0][0])
    return [c[0] for c in comps], [c[1] for c in comps]


def _mode(values) -> object:
    vals = [v for v in values if not (isinstance(v, float) and math.isnan(v)) and v != ""]
    return Counter(vals).most_common(1)[0][0] if vals else ""


def attribute(summary: pd.DataFrame, costs: pd.DataFrame,
              fusion_ops: dict[str, list[str]] | None = None) -> Attribution:
    """Match a device profile's rows to the plan's kernels (module docstring).

    Args:
        summary: device rows in the op_summary schema (toolkit.profile.optable; :func:`read_device_profile`).
        costs: the plan's cost table (toolkit.profile.cost.kernel_costs; columns Kernel, Nodes, OpType,
            OutputShapes, DurationUs, Stream, ... used), one row per kernel in plan order.
        fusion_ops: {fused device op name: [original op names]} (:func:`read_fusion_ops`); default none.

    Returns:
        :class:`Attribution` (kernels, units, unmatched, notes).
    """
    summary = op_summary_frame(summary)
    m = _Matcher(summary, costs, fusion_ops or {})
    m.run()
    kernel_units, row_units = _units(m)
    sim = costs["DurationUs"].astype(float).to_numpy()
    dur = summary["Task Duration(us)"].astype(float).to_numpy()
    k_rows: dict[int, dict] = {}
    units = []
    for u, (ks, rs) in enumerate(zip(kernel_units, row_units)):
        iters = max(1, len({m.match[r][2] for r in rs}))
        dev_us = float(dur[rs].sum()) / iters
        sim_us = float(sim[ks].sum())
        rules = sorted({m.match[r][1] for r in rs})
        ttype = _mode(summary.loc[rs, "Task Type"])
        units.append([u, ";".join(map(str, ks)), len(rs), iters, dev_us, sim_us, "+".join(rules), ttype])
        share = sim[ks] / sim_us if sim_us > 0 else np.full(len(ks), 1.0 / len(ks))
        for k, s in zip(ks, share):
            k_rows[k] = {"Match": "+".join(rules), "DeviceOps": ";".join(dict.fromkeys(summary.loc[rs, "Op Name"])),
                         "DeviceRows": len(rs), "Iterations": iters, "TaskType": ttype,
                         "BlockDim": _mode(summary.loc[rs, "Block Dim"]),
                         "DeviceDtypes": str(summary.at[rs[0], "Input Data Types"]), "DeviceUs": dev_us * float(s),
                         "Unit": u, "UnitKernels": len(ks)}
    table = []
    for i, c in costs.reset_index(drop=True).iterrows():
        got = k_rows.get(i, {"Match": "none", "DeviceOps": "", "DeviceRows": 0, "Iterations": 0, "TaskType": "",
                             "BlockDim": float("nan"), "DeviceDtypes": "", "DeviceUs": float("nan"), "Unit": -1,
                             "UnitKernels": 0})
        dev = got["DeviceUs"]
        ratio = float(c["DurationUs"]) / dev if dev and not math.isnan(dev) and dev > 0 else float("nan")
        table.append({"Index": int(c["Index"]), "Kernel": c["Kernel"], "OpType": c["OpType"], "OpClass": c["OpClass"],
                      "Nodes": c["Nodes"], "Placement": c["Placement"], "Precision": c["Precision"], **got,
                      "SimulatedUs": float(c["DurationUs"]), "Ratio": ratio})
    unmatched = [[r, summary.at[r, "Op Name"], summary.at[r, "OP Type"], summary.at[r, "Task Type"],
                  summary.at[r, "Task Duration(us)"], summary.at[r, "Output Shapes"], why]
                 for r, why in sorted(m.reasons.items())]
    n_rows, n_k = len(summary), sum(1 for t in table if t["Match"] != "none")
    notes = [f"{n_rows - len(unmatched)} of {n_rows} device row(s) matched to {n_k} of {len(table)} kernel(s) "
             f"in {len(units)} unit(s); {len(unmatched)} unmatched (reasons in the unmatched table)"]
    shared = sum(1 for u in units if ";" in u[1])
    if shared:
        notes.append(f"{shared} unit(s) hold several kernels (the device fused them into one op, or one kernel "
                     "matched several rows): their device time is shared by simulated time")
    return Attribution(pd.DataFrame(table, columns=KERNEL_COLUMNS), pd.DataFrame(units, columns=UNIT_COLUMNS),
                       pd.DataFrame(unmatched, columns=UNMATCHED_COLUMNS), notes)
