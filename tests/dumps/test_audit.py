"""The precision audit (toolkit.dumps.audit): dumped dtypes and op_summary data types against what
precision_mode / keep_dtype / modify_mixlist imply."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from tests.dumps.device_runs import device_folder

from toolkit import samples
from toolkit.config.schema import Config
from toolkit.diagnose import prepare
from toolkit.dumps.audit import AUDIT_COLUMNS, audit_dumped, audit_findings, audit_op_summary, dtype_name, implied_by
from toolkit.dumps.device_diagnosis import audit_profile, diagnose_device
from toolkit.engine import Session, shapes_of


@pytest.mark.parametrize("text,name", [("DT_FLOAT16", "float16"), ("FLOAT16", "float16"), ("float16", "float16"),
                                       ("FLOAT", "float32"), ("DT_FLOAT", "float32"), (np.dtype("float32"), "float32"),
                                       ("DT_BF16", "bfloat16"), ("INT64", None), ("DT_INT8", None), ("", None)])
def test_dtype_spellings(text, name):
    assert dtype_name(text) == name


def _kernel(nodes, placement="NPU"):
    return SimpleNamespace(nodes=nodes, placement=placement)


@pytest.mark.parametrize("cfg,kernel,ops,said", [
    (Config(precision_mode="force_fp16"), _kernel(["c"]), {"Conv"}, "precision_mode force_fp16"),
    (Config(precision_mode="force_fp32"), _kernel(["c"]), {"Conv"}, "precision_mode force_fp32"),
    (Config(precision_mode="force_fp16", keep_dtype=["c"]), _kernel(["c"]), {"Conv"}, "keep_dtype c"),
    (Config(keep_dtype=["OpType::Softmax"]), _kernel(["s"]), {"Softmax"}, "keep_dtype OpType::Softmax"),
    (Config(), _kernel(["c"]), {"Conv"}, "allow_mix_precision white-list (Conv)"),
    (Config(modify_mixlist={"black-list": {"to-add": ["Conv"]}}), _kernel(["c"]), {"Conv"},
     "allow_mix_precision black-list (Conv)"),
    (Config(), _kernel(["r"]), {"Relu"}, "allow_mix_precision gray-list (follows its input)"),
    (Config(precision_mode="force_fp16"), _kernel(["c"], "CPU"), {"Conv"}, "AI_CPU placement (always FP32)"),
])
def test_implied_by_names_the_deciding_option(cfg, kernel, ops, said):
    assert implied_by(kernel, ops, cfg) == said


def _plan(config: Config, sample="resnet_small"):
    model = onnx.load(str(samples.sample_path(sample)))
    feeds = getattr(samples, f"{sample}_inputs")()
    return model, Session(model, config, input_shapes=shapes_of(feeds)).plan


def test_dumps_of_a_force_fp32_run_audited_against_the_default_options(tmp_path):
    """The device ran everything in FP32; the default options store these tensors in FP16."""
    model, folder, npz = device_folder(tmp_path, config=Config(precision_mode="force_fp32"))
    diag, _, audit = diagnose_device(prepare(str(model), str(npz)), Config(), str(folder))
    _, plan = _plan(Config())
    producers = {t for n in onnx.load(str(model)).graph.node for t in n.output}
    expected16 = {t for t, s in plan.tensors.items() if s.dtype == "float16" and t in producers}
    assert set(audit["TensorName"]) == expected16 and expected16
    assert set(audit["DataType"]) == {"float32"} and set(audit["ExpectedDataType"]) == {"float16"}
    assert list(audit.columns) == AUDIT_COLUMNS
    assert sum(f.kind == "precision_mismatch" for f in diag.findings) == audit["Kernel"].nunique()


def test_a_keep_dtype_entry_the_device_ignored(tmp_path):
    model, folder, npz = device_folder(tmp_path)
    cfg = Config(keep_dtype=["block2_a_conv"])
    _, _, audit = diagnose_device(prepare(str(model), str(npz)), cfg, str(folder))
    row = audit.set_index("TensorName").loc["block2_a_relu"]
    assert (row["ExpectedDataType"], row["DataType"], row["ImpliedBy"]) == ("float32", "float16",
                                                                             "keep_dtype block2_a_conv")
    assert set(audit["Kernel"]) == {"block2_a_conv"}  # its consumers are white-list Convs: FP16 either way


OP_SUMMARY_HEAD = ("Model Name,Task ID,Stream ID,Op Name,OP Type,Task Type,Task Start Time(us),Task Duration(us),"
                   "Task Wait Time(us),Block Dim,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
                   "Output Data Types,Output Formats\n")


def _op_summary(path, rows):
    lines = [f"m,{i},1,{op},{typ},AI_CORE,{i * 10},5,0,1,\"1,3\",{ind},NCHW,\"1,3\",{outd},NC1HWC0"
             for i, (op, typ, ind, outd) in enumerate(rows)]
    path.write_text(OP_SUMMARY_HEAD + "\n".join(lines) + "\n")
    return path


def test_op_summary_data_types_are_audited(tmp_path):
    model, plan = _plan(Config())
    p = _op_summary(tmp_path / "op_summary_0_1.csv", [
        ("stem_conv", "Conv2D", "FLOAT16", "FLOAT16"),            # as implied
        ("block2_a_conv", "Conv2D", "FLOAT16", "FLOAT"),          # ran FP32: listed
        ("head_pool", "GlobalAvgPool", "FLOAT16", "FLOAT16"),     # our plan keeps it FP32 (gray after a Cast)
        ("TransData_17", "TransData", "FLOAT16", "FLOAT16"),      # not ours: skipped
        ("classifier", "MatMulV2", "INT8;FLOAT16", "")])          # no output dtype: the first float input
    audit, matched = audit_profile(plan, model, Config(), str(p))
    assert matched == 4
    got = {r["OpName"]: (r["ExpectedDataType"], r["DataType"]) for _, r in audit.iterrows()}
    want = {k.name: ("float16" if k.precision == "fp16" else "float32") for k in plan.kernels}
    listed = {op: (want[op], dt) for op, dt in (("stem_conv", "float16"), ("block2_a_conv", "float32"),
                                                 ("head_pool", "float16"), ("classifier", "float16"))
              if want[op] != dt}
    assert got == listed and "block2_a_conv" in got
    assert all(f.kind == "precision_mismatch" for f in audit_findings(audit))


def test_an_audit_names_the_table_its_rows_came_from(tmp_path):
    """The same device dtypes as an msprof op_summary or a torch_npu kernel_details table: the rows are audited
    alike and each names its own table as Source."""
    import csv

    model, plan = _plan(Config())
    rows = [("stem_conv", "Conv2D", "FLOAT16", "FLOAT16"), ("block2_a_conv", "Conv2D", "FLOAT16", "FLOAT")]
    p1 = _op_summary(tmp_path / "op_summary_0_1.csv", rows)
    p2 = tmp_path / "kernel_details.csv"
    with open(p2, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Step Id", "Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                    "Input Data Types", "Output Data Types"])
        for i, (op, typ, ind, outd) in enumerate(rows):
            w.writerow([1, 0, op, typ, "AI_CORE", i * 10, 5, ind, outd])
    (a1, m1), (a2, m2) = audit_profile(plan, model, Config(), str(p1)), audit_profile(plan, model, Config(), str(p2))
    assert m1 == m2 == 2 and set(a1["Source"]) == {"op_summary"} and set(a2["Source"]) == {"kernel_details"}
    assert a1.drop(columns="Source").equals(a2.drop(columns="Source"))


def test_an_op_summary_row_named_after_an_onnx_node_is_matched(tmp_path):
    model, plan = _plan(Config(precision_mode="force_fp32"))
    import pandas as pd

    frame = pd.DataFrame([{"Op Name": "block1_a_relu", "OP Type": "Relu", "Output Data Types": "DT_FLOAT16"}])
    audit, matched = audit_op_summary(plan, model, dataclasses.replace(Config(), precision_mode="force_fp32"), frame)
    assert matched == 1 and audit.iloc[0]["Kernel"] == "block1_a_conv"
    assert audit.iloc[0]["ImpliedBy"] == "precision_mode force_fp32"


def test_an_empty_audit_has_the_columns():
    model, plan = _plan(Config())
    assert list(audit_dumped(plan, model, Config(), {}).columns) == AUDIT_COLUMNS
