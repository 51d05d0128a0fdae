"""The raw-dump round trip (issue 19, done-when): a simulated run written as raw device dumps in each of the five
device layouts (toolkit.dumps.export), read back (toolkit.dumps.raw), laid out (toolkit.dumps.layouts), mapped
through the recorded original_op and compared (compare-dumps with the model): every tensor equals the run's own
(np.array_equal with the run's dump, and MaxAbsoluteError 0 in the comparison)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from toolkit import samples
from toolkit.commands.compare_dumps import compare_dumps
from toolkit.config.schema import Config
from toolkit.dumps.export import producers, write_raw_run
from toolkit.dumps.match import norm
from toolkit.dumps.raw import read_raw_dump
from toolkit.dumps.readers import SideSpec, read_side
from toolkit.engine import Session, shapes_of

LAYOUTS = ["NC1HWC0", "NDC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "NHWC"]


def simulated_run(model: onnx.ModelProto, feeds: dict):
    sess = Session(model, Config(), input_shapes=shapes_of(feeds))
    run = sess.run(feeds, dump=True)
    return sess.plan, {**run.dumps, **feeds}


def write_golden(folder, model, tensors) -> str:
    """The run's own tensors as ONNX golden dumps {node}.{i}.{ts}.npy (the other side of the comparison)."""
    folder.mkdir()
    for ts, (t, (node, i)) in enumerate(producers(model).items()):
        if t in tensors:
            np.save(folder / f"{norm(node)}.{i}.{ts}.npy", np.asarray(tensors[t]))
    return str(folder)


def assert_round_trip(tmp_path, model_path, feeds, layout):
    model = onnx.load(str(model_path))
    plan, tensors = simulated_run(model, feeds)
    written = write_raw_run(tmp_path / "device", model, plan, tensors, layout)
    assert sum(f == layout for f in written.formats.values()) >= 2  # the layout was really used
    # read back, laid out, mapped: each file's outputs are the run's tensors
    by_node = {v: k for k, v in producers(model).items()}
    checked = 0
    for path in written.files:
        dump, arrays = read_raw_dump(path)
        for t, arr in zip(dump.outputs, arrays):
            tensor = by_node.get((t.original_name, t.original_index)) if t.original_name else None
            if tensor is None:  # a compiler-added Cast: keyed by the device op
                continue
            assert arr.dtype == tensors[tensor].dtype and arr.shape == tensors[tensor].shape, tensor
            assert np.array_equal(arr, tensors[tensor], equal_nan=True), tensor
            checked += 1
    recorded = set(written.original_ops)
    assert checked == len(recorded) and recorded == {t for t in tensors if t in by_node.values()} - set(feeds)
    # compared through compare-dumps with the model: every mapped tensor compared, exactly equal
    golden = write_golden(tmp_path / "golden", model, tensors)
    diag = compare_dumps(SideSpec(golden, "golden"), SideSpec(str(tmp_path / "device"), "target"),
                         model=str(model_path))
    rows = diag.table[diag.table["TensorName"].isin(recorded)]
    assert len(rows) == len(recorded)
    assert (rows["CompareFailReason"] == "").all(), rows[rows["CompareFailReason"] != ""][["TensorName",
                                                                                        "CompareFailReason"]]
    assert (rows["MaxAbsoluteError"] == 0).all()
    side = read_side(SideSpec(str(tmp_path / "device"), "target"))
    assert side.input_dumps == sum(len([t for t in k.inputs if t in tensors]) for k in plan.kernels
                                   if any(o in tensors for o in k.outputs))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("sample", ["resnet_small", "transformer_block"])
def test_round_trip_of_a_sample_model(tmp_path, sample, layout):
    feeds = getattr(samples, f"{sample}_inputs")()
    assert_round_trip(tmp_path, samples.sample_path(sample), feeds, layout)


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_of_ppocr_rec(tmp_path, layout):
    from toolkit import zoo
    from toolkit.inputs import realistic_inputs

    assert_round_trip(tmp_path, zoo.fetch("ppocr_rec"), realistic_inputs("ppocr_rec"), layout)


def test_an_unknown_layout_is_refused(tmp_path):
    model = onnx.load(str(samples.sample_path("resnet_small")))
    with pytest.raises(ValueError, match="layout 'NCL' is not written by npuscope"):
        write_raw_run(tmp_path, model, None, {}, "NCL")
