"""Metric thresholds (toolkit/compare/metrics/thresholds.py): the default lines, parsing overrides, which lines
the expected-noise allowance covers, where each line came from, and the docs explaining the allowance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.compare.metrics import (
    DEFAULT_THRESHOLDS,
    Thresholds,
    compare_tensors,
    line_origins,
    noise_covers,
    parse_thresholds,
)
from toolkit.compare.metrics.thresholds import unjudged_lines
from toolkit.core.errors import UsageError
from toolkit.core.text import show_line


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_line_origins_tell_user_lines_from_defaults():
    assert set(line_origins(None).values()) == {"default"}
    lines = parse_thresholds("CosineSimilarity<0.99,MaxAbsoluteError>1e-3,RootMeanSquareError=off")
    origins = line_origins(lines)
    assert origins["CosineSimilarity"] == "user"  # named, even at the default value
    assert origins["MaxAbsoluteError"] == "user" and origins["RootMeanSquareError"] == "removed"
    assert origins["RelativeEuclideanDistance"] == "default" and origins["ExactMatchRate"] == "default"
    assert line_origins({"CosineSimilarity": 0.999})["CosineSimilarity"] == "user"  # another value


REPO = Path(__file__).resolve().parents[3]


def test_which_lines_the_allowance_covers():
    assert all(noise_covers(m, DEFAULT_THRESHOLDS) for m in DEFAULT_THRESHOLDS)
    # on a graph output, every default line but KullbackLeiblerDivergence's (a shape metric; the allowance grows
    # with magnitude)
    assert [m for m in DEFAULT_THRESHOLDS if not noise_covers(m, DEFAULT_THRESHOLDS, output=True)] == \
        ["KullbackLeiblerDivergence"]
    t = parse_thresholds("KullbackLeiblerDivergence>0.005,MaxAbsoluteError>1,CosineSimilarity<0.9")
    assert isinstance(t, Thresholds) and t.explicit == {"KullbackLeiblerDivergence", "MaxAbsoluteError",
                                                        "CosineSimilarity"}
    assert [m for m in t if noise_covers(m, t)] == [m for m in DEFAULT_THRESHOLDS if m not in t.explicit]
    off = parse_thresholds("RootMeanSquareError=off")
    assert "RootMeanSquareError" not in off and not noise_covers("RootMeanSquareError", off)


def test_docs_explain_the_allowance_where_thresholds_are_explained():
    text = (REPO / "docs" / "thresholds.md").read_text(encoding="utf-8")
    assert "--thresholds" in text and "default lines only" in text.lower() and "applied as given" in text
    for m, v in DEFAULT_THRESHOLDS.items():
        assert m in text and (show_line(v) in text or f"{v:.1f}" in text), m
    dumps = (REPO / "docs" / "compare-dumps.md").read_text(encoding="utf-8")
    assert "thresholds.md" in dumps


# ----------------------------------------------------------------------------- thresholds
def test_default_thresholds_are_the_tools_lines():
    assert DEFAULT_THRESHOLDS == {"CosineSimilarity": 0.99, "RelativeEuclideanDistance": 0.05,
                                  "KullbackLeiblerDivergence": 0.005, "RootMeanSquareError": 1.0,
                                  "MeanRelativeError": 1.0, "ExactMatchRate": 1.0}


def test_parse_thresholds_overrides_and_keeps_the_rest():
    lines = parse_thresholds("CosineSimilarity<0.999, MaxAbsoluteError>1e-2,RootMeanSquareError=off")
    assert lines["CosineSimilarity"] == 0.999 and lines["MaxAbsoluteError"] == 0.01
    assert "RootMeanSquareError" not in lines
    assert lines["RelativeEuclideanDistance"] == 0.05
    assert DEFAULT_THRESHOLDS["CosineSimilarity"] == 0.99  # defaults untouched


@pytest.mark.parametrize("text, fragment", [
    ("CosineSimilarty<0.99", "did you mean 'CosineSimilarity'"),
    ("cosinesimilarity<0.99", "did you mean 'CosineSimilarity'"),
    ("RelativeEuclidianDistance>0.1", "did you mean 'RelativeEuclideanDistance'"),
    ("CosineSimilarity<off", "'CosineSimilarity=off'"),  # the operator spellings are all accepted now
    ("MaxAbsoluteError>=nan", "NaN cannot be a line"),      # (tests/compare/test_grammar.py)
    ("CosineSimilarity<high", "not a number"),
    ("CosineSimilarity", "expected NAME<VALUE"),
    ("GoldenStd>1", "informational"),
    ("CosineSimilarity=high", "not a number"),
])
def test_parse_thresholds_errors(text, fragment):
    with pytest.raises(UsageError) as info:
        parse_thresholds(text)
    assert fragment in str(info.value)


# ------------------------------------------------------------------ lines that judged nothing


def _unjudged_table():
    return pd.DataFrame([
        {"TensorName": "y", "CompareFailReason": "", "DataType": "float32", "MaxAbsoluteError": 0.1,
         "CosineSimilarity": 0.99, "ExactMatchRate": np.nan},
        {"TensorName": "cls", "CompareFailReason": "", "DataType": "int64", "MaxAbsoluteError": np.nan,
         "CosineSimilarity": np.nan, "ExactMatchRate": 0.5},
        {"TensorName": "h1", "CompareFailReason": "fused into kernel mm", "DataType": "float32",
         "MaxAbsoluteError": np.nan, "CosineSimilarity": np.nan, "ExactMatchRate": np.nan}])


@pytest.mark.parametrize("text,want", [
    ("y:MaxAbsoluteError<=1e-3", []),
    ("MaxAbsoluteError<=1e-3", []),  # a global line: not applying to the int output is fine
    ("cls:ExactMatchRate>=1", []),
    ("cls:MaxAbsoluteError<=0", ["MaxAbsoluteError does not apply to 'cls' (int64)"]),
    ("h1:MaxAbsoluteError<=1e-9", ["'h1' was not compared (fused into kernel mm)"]),
    ("gone:CosineSimilarity<0.9", ["'gone' was not compared (it has no row in the comparison)"]),
    ("y:CosineSimilarity<0.9,cls:CosineSimilarity<0.9,h1:MaxAbsoluteError>1",
     ["CosineSimilarity does not apply to 'cls' (int64)", "'h1' was not compared (fused into kernel mm)"]),
])
def test_lines_named_for_a_tensor_that_judged_nothing_are_named(text, want):
    assert unjudged_lines(parse_thresholds(text), _unjudged_table()) == want


def test_diagnose_refuses_a_line_on_an_integer_output_before_writing(tmp_path):
    """End to end: MatMul -> ArgMax (int64 output 'cls'). A float metric named for 'cls' would be ignored and
    the verdict PASS on nothing: a usage error instead, no report folder."""
    from toolkit.commands.diagnose import diagnose_command
    from toolkit.config.schema import Config

    rng = np.random.default_rng(0)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
                           helper.make_node("ArgMax", ["y"], ["cls"], name="am", axis=1, keepdims=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("cls", TensorProto.INT64, [4])],
                          [numpy_helper.from_array(rng.normal(0, 1, (8, 16)).astype(np.float32), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.savez(tmp_path / "x.npz", x=rng.normal(0, 1, (4, 8)).astype(np.float32))
    with pytest.raises(UsageError, match="MaxAbsoluteError does not apply to 'cls'"):
        diagnose_command(str(path), Config(), inputs=str(tmp_path / "x.npz"), thresholds="cls:MaxAbsoluteError<=0",
                         out=str(tmp_path / "o"), html=False)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


@pytest.mark.parametrize("text", [None, "MaxAbsoluteError<=1e-3", "CosineSimilarity<0.99999999,RMSE=off",
                                  "y:MaxAbsoluteError>1e-9,MaxAbsoluteError>1", "CosineSimilarity<0.99",
                                  "y:RMSE=off,logits:CosineSimilarity<0.999", "MaxRelativeError<=0.125"])
def test_thresholds_text_reads_back_to_the_same_lines(text):
    """Kind: any lines a diagnosis judged with, written as --thresholds text (a reproducer's command): they read
    back to the same lines, the same user-set ones (default lines are not named: they keep the FP16 noise
    allowance) and the same per-tensor lines."""
    from toolkit.compare.metrics import resolve_thresholds
    from toolkit.compare.metrics.thresholds import thresholds_text

    a = resolve_thresholds(text)
    written = thresholds_text(a)
    b = resolve_thresholds(written or None)
    assert dict(a) == dict(b) and a.explicit == b.explicit, written
    assert {t: (dict(v), v.explicit) for t, v in a.per_tensor.items()} == \
        {t: (dict(v), v.explicit) for t, v in b.per_tensor.items()}, written
    assert (written == "") == (text is None)


@pytest.mark.parametrize("offset,spread", [(1000.0, 0.3), (250.0, 0.1), (-4000.0, 2.0), (60.0, 0.02)])
def test_fp16_rounding_that_erases_an_outputs_differences_on_a_common_offset_is_abnormal(offset, spread):
    """Values offset ± spread rounded to FP16 (numpy): the error is within the magnitude-scaled FP16 noise, yet the
    rounding step is comparable to the spread, so the differences the tensor carries are lost (the argmax flips).
    KullbackLeiblerDivergence measures that (it is offset-invariant); on a graph output the allowance does not
    excuse it."""
    rng = np.random.default_rng(int(abs(offset)))
    y = (offset + spread * rng.standard_normal((64, 10))).astype(np.float32)
    x = y.astype(np.float16).astype(np.float32)
    assert np.mean(np.argmax(x, 1) == np.argmax(y, 1)) < 0.95  # the rounding loses what the tensor says (numpy)
    noise = {"rtol": 2.0 ** -10, "atol": 1e-3}
    row = compare_tensors(x, y, expected_noise=noise, output=True)
    assert row["WithinExpectedNoise"] is True  # FP16 rounding, by the magnitude-scaled allowance
    assert "KullbackLeiblerDivergence" in row["AbnormalMetrics"] and row["Abnormal"]
    # inside the graph the same storage noise is excused: what it does shows in the outputs
    assert not compare_tensors(x, y, expected_noise=noise)["Abnormal"]
