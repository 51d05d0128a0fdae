"""Attribution of real device profiles (msprof op_summary, torch_npu kernel_details, msprof fusion_op) to the kernels
of resnet_small's plan. The fixtures are written here from the documented formats; every expected device time is
worked out by hand from the rows written (two iterations averaged, two rows summed, a device op spanning two
kernels shared by their simulated times, which come from the cost model)."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from toolkit.config.schema import Config
from toolkit.core.errors import InputError
from toolkit.engine import compile_model
from toolkit.ir.load import load_model
from toolkit.logs.parsers import kernel_details_csv
from toolkit.profile.attribution import attribute, onnx_type, read_device_profile, read_fusion_ops, same_shape
from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device
from toolkit.source import resolve_model

# (Op Name, OP Type, Task Type, Duration us, Output Shapes, Time Kind)
ROWS = [
    ("Cast_x__cast_fp16", "Cast", "AI_VECTOR_CORE", 5.0, "1,3,32,32", ""),         # k0 by kernel name
    ("fused_stem", "Conv2D", "AI_CORE", 10.0, "1,16,32,32", ""),                   # k1 via fusion_op originals
    ("block1_a_conv", "Conv2D", "AI_CORE", 12.0, "1,16,32,32", ""),                # k2 by kernel name
    ("block1_b_conv", "Conv2D", "AI_CORE", 6.0, "1,16,32,32", ""),                 # k3, its conv ...
    ("block1_relu", "Relu", "AI_VECTOR_CORE", 2.0, "1,16,32,32", ""),              # ... and its relu node: 6 + 2
    ("fused_block2", "Conv2D", "MIX_AIC", 20.0, "1,32,16,16", ""),                 # spans k4 and k5
    ("conv_op_1", "Conv2D", "AI_CORE", 9.0, "1,2,16,16,16", ""),                   # type+shape, NC1HWC0 -> k6
    ("conv_op_2", "Conv2D", "AI_CORE", 9.5, "1,32,16,16", ""),                     # type+shape -> k7
    ("conv_op_3", "Conv2D", "AI_CORE", 10.5, "1,32,16,16", ""),                    # type+shape -> k8
    ("trans_1", "TransData", "AI_CORE", 3.0, "1,2,16,16,16", ""),                  # unmatched: no such type
    ("fused_mystery", "Conv2D", "AI_CORE", 7.0, "1,8,4,4", ""),                    # unmatched: unknown originals
    ("conv_odd", "Conv2D", "AI_CORE", 8.0, "1,64,8,8", ""),                        # unmatched: no such shape
    ("head_pool", "ReduceMeanD", "AI_VECTOR_CORE", 4.5, "1,32,1,1", ""),           # k10 by name
    ("classifier", "MatMulV2", "AI_CORE", 4.2, "1,10", ""),                        # k13 by name
    ("Cast_head_flatten__cast_fp16", "Cast", "AI_VECTOR_CORE", 99.0, "1,32", "simulated"),  # unmatched: not device
    # second iteration of the first three
    ("Cast_x__cast_fp16", "Cast", "AI_VECTOR_CORE", 7.0, "1,3,32,32", ""),
    ("fused_stem", "Conv2D", "AI_CORE", 12.0, "1,16,32,32", ""),
    ("block1_a_conv", "Conv2D", "AI_CORE", 14.0, "1,16,32,32", ""),
]
FUSION_OPS = [("fused_stem", "stem_conv;stem_bn;stem_relu"),
              ("fused_block2", "block2_a_conv;block2_a_relu;block2_b_conv"),
              ("fused_mystery", "nope_a;nope_b")]


@pytest.fixture(scope="module")
def costs():
    m = load_model(resolve_model("resnet_small").path)
    c = compile_model(m, Config())
    return kernel_costs(c.plan, c.model, load_device("atlas300i_pro"))


def write_op_summary(path, rows=ROWS):
    header = ["Model Name", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type", "Task Start Time(us)",
              "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes", "Input Data Types",
              "Input Formats", "Output Shapes", "Output Data Types", "Output Formats", "Time Kind", "aicore_time(us)"]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        t = 0.0
        for i, (name, op, task, dur, out, kind) in enumerate(rows):
            w.writerow(["resnet_small", i, 1, name, op, task, f"{t}\t", dur, 0, 4 + i % 2, "", "DT_FLOAT16", "ND",
                        out, "DT_FLOAT16", "NC1HWC0" if len(out.split(",")) == 5 else "ND", kind, dur])
            t += dur + 1


def write_kernel_details(path, rows=ROWS):
    cores = {"AI_CORE": "AI Core", "AI_VECTOR_CORE": "AI_VECTOR_CORE", "MIX_AIC": "MIXED_AIC"}
    header = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
              "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num", "Mix Block Num",
              "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
              "Output Data Types", "Output Formats", "aic_mac_ratio"]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        t = 0.0
        for i, (name, op, task, dur, out, kind) in enumerate(rows):
            if kind:  # kernel_details rows are always device times
                continue
            w.writerow([1 if i < 15 else 2, 0, 1, i, 2, name, op, "static", cores.get(task, task), t, dur, 0,
                        4 + i % 2, "N/A", "NO", "", "FLOAT16", "ND", out, "FLOAT16", "ND", 0.5])
            t += dur + 1


def write_fusion_ops(path):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Device_id", "Model Name", "Model ID", "Fusion Op", "Original Ops", "Memory Input(KB)",
                    "Memory Output(KB)", "Memory Weight(KB)", "Memory Workspace(KB)", "Memory Total(KB)"])
        for fused, orig in FUSION_OPS:
            w.writerow(["host", "resnet_small", 1, fused, orig, 1, 1, 1, 0, 3])


def _attribute(tmp_path, costs, writer):
    prof, fo = tmp_path / "profile.csv", tmp_path / "fusion_op_0_1.csv"
    writer(prof)
    write_fusion_ops(fo)
    rows, notes = read_device_profile(prof)
    return attribute(rows, costs, read_fusion_ops(fo)), rows, notes


def _expected(costs) -> dict[str, float]:
    s4, s5 = costs.at[4, "DurationUs"], costs.at[5, "DurationUs"]
    return {"Cast_x__cast_fp16": (5 + 7) / 2, "stem_conv": (10 + 12) / 2, "block1_a_conv": (12 + 14) / 2,
            "block1_b_conv": 6 + 2, "block2_a_conv": 20 * s4 / (s4 + s5), "block2_b_conv": 20 * s5 / (s4 + s5),
            "block2_proj_conv": 9.0, "block3_a_conv": 9.5, "block3_b_conv": 10.5, "head_pool": 4.5,
            "classifier": 4.2}


@pytest.mark.parametrize("writer", [write_op_summary, write_kernel_details], ids=["op_summary", "kernel_details"])
def test_device_times_per_kernel(tmp_path, costs, writer):
    attr, _rows, _notes = _attribute(tmp_path, costs, writer)
    k = attr.kernels.set_index("Kernel")
    expected = _expected(costs)
    for name, us in expected.items():
        assert k.at[name, "DeviceUs"] == pytest.approx(us, rel=1e-9), name
        assert k.at[name, "Ratio"] == pytest.approx(k.at[name, "SimulatedUs"] / us, rel=1e-9), name
    unmatched_kernels = set(k.index) - set(expected)
    assert unmatched_kernels == {"Cast_block3_relu__cast_fp32", "head_flatten", "Cast_head_flatten__cast_fp16"}
    assert k.loc[sorted(unmatched_kernels), "DeviceUs"].isna().all()
    assert (k.loc[sorted(unmatched_kernels), "Match"] == "none").all()


@pytest.mark.parametrize("writer", [write_op_summary, write_kernel_details], ids=["op_summary", "kernel_details"])
def test_match_rules_units_and_device_columns(tmp_path, costs, writer):
    attr, _rows, _notes = _attribute(tmp_path, costs, writer)
    k = attr.kernels.set_index("Kernel")
    assert k.at["Cast_x__cast_fp16", "Match"] == "name" and k.at["Cast_x__cast_fp16", "Iterations"] == 2
    assert k.at["stem_conv", "Match"] == "original_ops" and k.at["stem_conv", "DeviceOps"] == "fused_stem"
    assert k.at["block1_b_conv", "DeviceOps"] == "block1_b_conv;block1_relu"
    assert k.at["block1_b_conv", "DeviceRows"] == 2
    assert k.at["block2_a_conv", "Unit"] == k.at["block2_b_conv", "Unit"] and k.at["block2_a_conv", "UnitKernels"] == 2
    assert k.at["block2_a_conv", "TaskType"] == "MIX_AIC"
    assert [k.at[n, "Match"] for n in ("block2_proj_conv", "block3_a_conv", "block3_b_conv")] == ["type_shape"] * 3
    assert k.at["classifier", "TaskType"] == "AI_CORE"  # kernel_details' "AI Core" normalised
    assert k.at["classifier", "BlockDim"] == 4 + 13 % 2  # row 13 wrote Block Dim / Block Num 5
    unit = attr.units.set_index("Unit").loc[k.at["block2_a_conv", "Unit"]]
    assert unit["DeviceUs"] == 20.0 and unit["Rows"] == 1


def test_unmatched_rows_keep_their_reason(tmp_path, costs):
    attr, _rows, _notes = _attribute(tmp_path, costs, write_op_summary)
    u = attr.unmatched.set_index("Op Name")
    assert set(u.index) == {"trans_1", "fused_mystery", "conv_odd", "Cast_head_flatten__cast_fp16"}
    assert "no kernel of type TransData" in u.at["trans_1", "Reason"]
    assert "none of its Original Ops (nope_a;nope_b)" in u.at["fused_mystery", "Reason"]
    assert "no free kernel of type Conv with Output Shapes '1,64,8,8'" in u.at["conv_odd", "Reason"]
    assert u.at["Cast_head_flatten__cast_fp16", "Reason"] == "Time Kind 'simulated' is not a device time"
    assert u.at["conv_odd", "Row"] == 11 and u.at["conv_odd", "Task Duration(us)"] == 8.0
    assert attr.matched_rows == len(ROWS) - 4


def test_without_fusion_ops_fused_rows_fall_back_to_type_and_shape(tmp_path, costs):
    write_op_summary(tmp_path / "p.csv")
    rows, _ = read_device_profile(tmp_path / "p.csv")
    attr = attribute(rows, costs)
    k = attr.kernels.set_index("Kernel")
    # fused_stem (1,16,32,32) now goes to the first free Conv of that shape: stem_conv (block1_* are named)
    assert k.at["stem_conv", "Match"] == "type_shape" and k.at["stem_conv", "DeviceUs"] == pytest.approx(11.0)
    assert "fused_mystery" in set(attr.unmatched["Op Name"])


def test_type_shape_rows_of_several_iterations_average_per_kernel(costs):
    rows = pd.DataFrame([{"Op Name": f"op{i}", "OP Type": "Conv2D", "Task Duration(us)": d,
                          "Output Shapes": "1,32,16,16", "Task Start Time(us)": float(i)}
                         for i, d in enumerate([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])])
    attr = attribute(rows, costs)
    k = attr.kernels.set_index("Kernel")
    convs = ["block2_a_conv", "block2_b_conv", "block2_proj_conv", "block3_a_conv", "block3_b_conv"]
    assert [k.at[n, "DeviceUs"] for n in convs] == [(1 + 6) / 2, (2 + 7) / 2, (3 + 8) / 2, (4 + 9) / 2, (5 + 10) / 2]
    assert all(k.at[n, "Iterations"] == 2 for n in convs)


def test_shapes_and_device_types():
    assert same_shape((1, 2, 16, 16, 16), (1, 32, 16, 16)) and same_shape((1, 3, 8, 8, 16), (1, 40, 8, 8))
    assert not same_shape((1, 2, 16, 16, 16), (1, 33, 16, 16)) and not same_shape((1, 32), (1, 33))
    known = {"Conv", "MatMul", "Relu", "Sigmoid"}
    assert [onnx_type(t, known) for t in ("Conv2D", "MatMulV2", "BatchMatMulV2", "ReluV2", "Relu", "TransData")] \
        == ["Conv", "MatMul", "MatMul", "Relu", "Relu", "TransData"]
    assert [kernel_details_csv.task_type(c) for c in ("AI Core", "AI CPU", "AI_VECTOR_CORE", "MIXED_AIC")] \
        == ["AI_CORE", "AI_CPU", "AI_VECTOR_CORE", "MIX_AIC"]


def test_malformed_rows_are_counted_and_bad_files_are_one_line_errors(tmp_path):
    p = tmp_path / "kernel_details.csv"
    p.write_text("Name,Type,Accelerator Core,Start Time(us),Duration(us),Block Num\n"
                 "a,Add,AI Core,0,3,2\nb,Add,AI Core,1,-2,2\nc,Add,AI Core,2,x,2\nd,Add,AI Core,3,1,2.5\n"
                 "e,Add,AI Core,4,1\n")
    rows, notes = read_device_profile(p)
    assert list(rows["Op Name"]) == ["a"] and rows.at[0, "Block Dim"] == 2 and rows.at[0, "Task Type"] == "AI_CORE"
    assert any("4 malformed row(s) skipped" in n for n in notes), notes
    (tmp_path / "other.csv").write_text("Kernel,Time\nk,1\n")
    with pytest.raises(InputError, match="neither an op_summary CSV .* nor a kernel_details CSV"):
        read_device_profile(tmp_path / "other.csv")
    (tmp_path / "empty.csv").write_text("Op Name,Task Duration(us)\nx,-1\n")
    with pytest.raises(InputError, match="no readable row"):
        read_device_profile(tmp_path / "empty.csv")
    with pytest.raises(InputError, match="does not exist"):
        read_device_profile(tmp_path / "missing.csv")
    (tmp_path / "fo.csv").write_text("Fusion Op,Ops\na,b\n")
    with pytest.raises(InputError, match="no 'Fusion Op' and 'Original Ops' columns"):
        read_fusion_ops(tmp_path / "fo.csv")


def test_a_profiler_folder_is_read_through_its_one_table(tmp_path):
    """--device-profile may name the profiler's folder (PROF_*/mindstudio_profiler_output, or the folder above
    it) as parse-log accepts it: its one op_summary table is read, the same rows as the file; a folder with none,
    or one per device, is a one-line error naming what it found."""
    from tests.dumps.test_audit import _op_summary

    out = tmp_path / "run" / "PROF_000001_20261207" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    table = _op_summary(out / "op_summary_0_1.csv", [("stem_conv", "Conv2D", "FLOAT16", "FLOAT16"),
                                                     ("head_pool", "GlobalAvgPool", "FLOAT16", "FLOAT")])
    want, _ = read_device_profile(table)
    for folder in (tmp_path / "run", out.parent, out):
        got, _ = read_device_profile(folder)
        pd.testing.assert_frame_equal(got, want)
    _op_summary(out / "op_summary_1_1.csv", [("stem_conv", "Conv2D", "FLOAT16", "FLOAT16")])
    with pytest.raises(InputError, match="holds 2 tables .*op_summary_0_1.csv, op_summary_1_1.csv"):
        read_device_profile(out)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no op_summary"):
        read_device_profile(tmp_path / "empty")


@pytest.mark.parametrize("name, op, task", [("MemcpyH2D:x", "MemcpyH2D", "AI_CPU"), ("MemcpyD2H:y", "MemcpyD2H", ""),
                                            ("memcpy_async_3", "MemcpyAsync", "AI_CORE")])
def test_an_unmatched_memory_copy_row_is_called_a_copy_not_an_inserted_op(tmp_path, costs, name, op, task):
    """Host-device copy rows (npuscope's own MemcpyH2D/MemcpyD2H rows without their Time Kind, a device's
    MemcpyAsync tasks) are not kernels of the plan: the reason says so instead of guessing a format conversion."""
    rows = ROWS + [(name, op, task, 1.5, "1,3,32,32", "")]
    attr, _rows, _notes = _attribute(tmp_path, costs, lambda p: write_op_summary(p, rows))
    reason = attr.unmatched.set_index("Op Name").at[name, "Reason"]
    assert reason.startswith("a memory copy row") and "device inserted" not in reason
    trans = attr.unmatched.set_index("Op Name").at["trans_1", "Reason"]
    assert "device inserted" in trans  # other unknown types keep the general hint


@pytest.mark.parametrize("devices", [["0", "1"], ["0", "3", "7"]])
def test_a_profile_of_several_devices_is_refused_not_averaged(tmp_path, devices):
    """Each device runs the whole model: rows of several Device_id values must not be averaged into one kernel's
    time as iterations of one device. One device's rows (a Device_id column with one value) are read."""
    from toolkit.core.errors import InputError

    header = "Device_id,Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us),Output Shapes\n"
    rows = "".join(f"{d},{n},Conv2D,AI_CORE,{i * 10},{5 * (j + 1)},1\n" for j, d in enumerate(devices)
                   for i, n in enumerate(("conv_a", "conv_b")))
    p = tmp_path / "op_summary_0.csv"
    p.write_text(header + rows)
    with pytest.raises(InputError, match=rf"holds the rows of {len(devices)} devices \(Device_id 0 \(2 rows\)"):
        read_device_profile(p)
    one = tmp_path / "op_summary_1.csv"
    one.write_text(header + "".join(r for r in rows.splitlines(keepends=True) if r.startswith("0,")))
    summary, _ = read_device_profile(one)
    assert sorted(summary["Task Duration(us)"].tolist()) == [5.0, 5.0]
