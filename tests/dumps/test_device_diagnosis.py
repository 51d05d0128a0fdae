"""diagnose with --device-dumps (toolkit.dumps.device_diagnosis): written raw dumps of a simulated run with one
planted wrong tensor name that tensor's kernel as the origin; everything downstream of it is propagated; a
faithful dump set has no origin."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dumps.device_runs import device_folder

from toolkit.config.schema import Config
from toolkit.core.errors import InputError
from toolkit.diagnose import prepare
from toolkit.dumps.device_diagnosis import NO_DEVICE_DUMP, diagnose_device, read_device_dumps


def _scale(f, shift):
    return lambda a: (a.astype(np.float32) * f + shift).astype(a.dtype)


def _diagnose(model, folder, npz, config=None):
    prep = prepare(str(model), str(npz))
    return diagnose_device(prep, config or Config(), str(folder))


# (sample, planted tensor, its kernel in our plan)
PLANTS = [("resnet_small", "block2_a_relu", "block2_a_conv"), ("resnet_small", "stem_relu", "stem_conv"),
          ("resnet_small", "block3_relu", "block3_b_conv"), ("transformer_block", None, None)]


@pytest.mark.parametrize("layout", ["NC1HWC0", "FRACTAL_NZ", "ND"])
@pytest.mark.parametrize("factor,shift", [(1.5, 0.3), (1.0, 2.0), (-1.0, 0.0)])
@pytest.mark.parametrize("sample,tensor,kernel", PLANTS[:3])
def test_a_planted_wrong_tensor_names_its_kernel_as_the_origin(tmp_path, sample, tensor, kernel, layout, factor,
                                                               shift):
    model, folder, npz = device_folder(tmp_path, sample, layout, spoil={tensor: _scale(factor, shift)})
    diag, _, audit = _diagnose(model, folder, npz)
    first = diag.summary["first_divergence"]
    assert (first["tensor"], first["kernel"]) == (tensor, kernel)
    roles = diag.table.set_index("TensorName")["Role"]
    assert list(roles[roles == "origin"].index) == [tensor]
    kinds = [(f.kind, f.subject) for f in diag.findings]
    assert ("device_kernel_deviation", kernel) in kinds
    assert audit.empty  # the dumps' dtypes are what the default options imply


def test_an_error_the_device_passes_on_is_propagated(tmp_path):
    """Spoil a tensor AND recompute nothing: the consumer's dump is the run's own, so it is normal; spoil the
    consumer the way its spoiled input implies (scale a Relu-free path): the consumer is propagated."""
    model, folder, npz = device_folder(tmp_path, "resnet_small", spoil={
        "head_pool": _scale(1.5, 0.0), "head_flatten": _scale(1.5, 0.0)})  # Flatten passes the error on
    diag, _, _ = _diagnose(model, folder, npz)
    roles = diag.table.set_index("TensorName")["Role"]
    assert roles["head_pool"] == "origin" and roles["head_flatten"] == "propagated"
    assert diag.summary["first_divergence"]["kernel"] == "head_pool"


@pytest.mark.parametrize("sample", ["resnet_small", "transformer_block"])
def test_a_faithful_dump_set_has_no_divergence(tmp_path, sample):
    model, folder, npz = device_folder(tmp_path, sample, "NC1HWC0")
    diag, _, audit = _diagnose(model, folder, npz)
    assert diag.summary["first_divergence"] is None and diag.summary["verdict"] != "FAIL"
    assert diag.summary["device_dumps"]["tensors"] > 5 and audit.empty


def test_a_missing_and_an_unreadable_dump_say_so(tmp_path):
    model, folder, npz = device_folder(tmp_path)
    files = sorted(folder.iterdir())
    victim = next(f for f in files if ".block1_a_conv." in f.name)
    victim.unlink()
    broken = next(f for f in files if ".block2_a_conv." in f.name)
    broken.write_bytes(broken.read_bytes()[:-7])
    diag, _, _ = _diagnose(model, folder, npz)
    reasons = diag.table.set_index("TensorName")["CompareFailReason"]
    assert reasons["block1_a_relu"] == NO_DEVICE_DUMP
    assert reasons["block2_a_relu"].startswith("device dump unreadable") and "sizes do not add up" in \
        reasons["block2_a_relu"]


def test_dumps_of_another_model_are_refused(tmp_path):
    import onnx

    from toolkit import samples

    _, folder, _ = device_folder(tmp_path, "resnet_small")
    with pytest.raises(InputError, match="names a node of the model"):
        read_device_dumps(onnx.load(str(samples.sample_path("transformer_block"))), str(folder))


@pytest.mark.parametrize("tensor", ["stem_bn", "block1_add"])
@pytest.mark.parametrize("spoiled", [False, True])
def test_a_tensor_the_device_dumps_is_compared_even_where_our_plan_fuses_it(tmp_path, tensor, spoiled):
    """The device ran unfused (fusion_level 0: every node's output dumped) while our plan, under the default
    options, fuses ``tensor`` into a kernel. Its dump is what the device computed, so it is compared: faithful,
    a normal row with metrics; spoiled (+5 on a channel), abnormal, and the verdict is no PASS. It had kept the
    "fused into" row and the run PASSed over a wrong device tensor."""
    def plus5(a):
        b = a.astype(np.float32).copy()
        b[:, 0] += 5.0
        return b.astype(a.dtype)

    model, folder, npz = device_folder(tmp_path, "resnet_small", config=Config(fusion_level=0),
                                       spoil={tensor: plus5} if spoiled else None)
    diag, extra, _ = _diagnose(model, folder, npz)
    row = diag.table.set_index("TensorName").loc[tensor]
    assert not str(row["CompareFailReason"]).startswith("fused into"), row["CompareFailReason"]
    golden, dumped = extra["golden"][tensor], extra["device"][tensor]
    want = float(np.abs(dumped.astype(np.float64) - golden.astype(np.float64)).max())
    assert row["MaxAbsoluteError"] == pytest.approx(want, rel=1e-12)  # numpy on the dump and the reference
    assert bool(row["Abnormal"]) is spoiled
    if spoiled:
        assert diag.summary["verdict"] != "PASS" and diag.summary["first_divergence"]["tensor"] == tensor


def test_a_device_op_our_plan_fuses_is_named_as_the_device_names_it(tmp_path):
    """The device ran stem_conv, stem_bn and stem_relu as ops of their own (fusion_level 0) and only stem_relu's
    output is wrong, while our plan fuses the three into kernel stem_conv. The row's NPUDump and the
    device_kernel_deviation finding name the device's Relu op, never our fused kernel, and no finding advises a
    keep_dtype of the simulated plan for it (the simulated kernel holds the lines on the reference's inputs)."""
    def plus5(a):
        b = a.astype(np.float32).copy()
        b[:, 0] += 5.0
        return b.astype(a.dtype)

    model, folder, npz = device_folder(tmp_path, "resnet_small", layout="ND", config=Config(fusion_level=0),
                                       spoil={"stem_relu": plus5})
    diag, _, _ = _diagnose(model, folder, npz)
    relu_file = next(f.name for f in folder.iterdir() if ".stem_relu." in f.name)
    op_type, op_name = relu_file.split(".")[:2]
    row = diag.table.set_index("TensorName").loc["stem_relu"]
    assert row["Kernel"] == "stem_conv" and row["NPUDump"] == op_name  # our kernel vs the device's op
    dev = [f for f in diag.findings if f.kind == "device_kernel_deviation"]
    assert [f.subject for f in dev] == [op_name]
    assert dev[0].evidence["device_op_type"] == op_type and dev[0].evidence["kernel"] == "stem_conv"
    on_it = [f for f in diag.findings if isinstance(f.evidence, dict) and f.evidence.get("tensor") == "stem_relu"]
    assert on_it and not any("keep_dtype" in f.evidence for f in on_it)


@pytest.mark.parametrize("output_dumped", [True, False])
def test_dumps_naming_no_node_are_rows_and_a_finding(tmp_path, output_dumped):
    """A device dump under an op name the model does not have (a fused device op without --mapping, a TransData
    the converter added) is a row "device dump not in the model"; the ops no mapping resolves (not the Casts and
    TransData the converter adds) get one finding, a warning naming the output when a graph output has no dump of
    its own (one of these may be it)."""
    import onnx

    model, folder, npz = device_folder(tmp_path, "resnet_small", "ND")
    out = onnx.load(str(model)).graph.output[0].name
    values = read_device_dumps(onnx.load(str(model)), str(folder))
    foreign = values.arrays[out]
    if not output_dumped:  # the output's own dump is gone: only the foreign op holds it
        op = values.ops[out][0]
        for f in folder.iterdir():
            if f".{op}." in f.name:
                f.unlink()
    np.save(folder / "MatMulV2.fused_classifier_op.999.1.1700000000999999.output.0.npy", foreign)
    np.save(folder / "TransData.trans_TransData_99.998.1.1700000000999998.output.0.npy", foreign)
    diag, _, _ = _diagnose(model, folder, npz)
    df = diag.table
    extra = df[df["CompareFailReason"] == "device dump not in the model"]
    # the written run also dumps the Casts our plan inserts: ops the converter adds, as its TransData
    assert {"fused_classifier_op", "trans_TransData_99"} <= set(extra["NodeName"])
    others = extra[~extra["NodeName"].isin(["fused_classifier_op", "trans_TransData_99"])]
    assert len(others) and set(others["OpType"]) == {"Cast"}
    assert not extra["Abnormal"].any()
    found = [f for f in diag.findings if f.kind == "device_dump_not_in_the_model"]
    # the finding is about the op no mapping resolves, not the ops the converter adds
    assert len(found) == 1 and found[0].evidence["names"] == ["fused_classifier_op:0"]
    assert found[0].severity == ("info" if output_dumped else "warning")
    assert (f"'{out}'" in found[0].recommendation) is (not output_dumped)
    assert diag.summary["device_dumps"]["unmapped"] == len(extra)
