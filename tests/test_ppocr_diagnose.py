"""diagnose end to end on the real PP-OCRv4 models with rendered text inputs (default mixed precision)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest

from toolkit import zoo
from toolkit.commands.diagnose import diagnose_command
from toolkit.config.schema import Config
from toolkit.inputs import binarize_iou, ctc_greedy_decode, read_ctc_characters, realistic_inputs

pytestmark = pytest.mark.slow


def _ort_outputs(path, feeds):
    from toolkit.ort.ort_env import session_options

    sess = ort.InferenceSession(str(path), session_options(optimize=False), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@pytest.mark.parametrize("name", ["ppocr_det", "ppocr_rec", "ppocr_cls"])
def test_diagnose_ppocr_default_mixed_precision(name, tmp_path):
    res = diagnose_command(name, Config(), out=str(tmp_path / "r"), html=False)
    folder = res["out"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["verdict"] in ("PASS", "WARN", "FAIL")
    assert summary["reasons"] and all(isinstance(r, str) and r for r in summary["reasons"])
    # every row of result.csv has metrics or a reason
    df = pd.read_csv(folder / "result.csv", keep_default_na=False)
    has_metric = pd.to_numeric(df["CosineSimilarity"], errors="coerce").notna() | \
        pd.to_numeric(df["ExactMatchRate"], errors="coerce").notna()
    assert (has_metric | (df["CompareFailReason"].astype(str) != "")).all()
    # task checks agree in the default mixed precision, recomputed here from the saved outputs
    tasks = {t["name"]: t for t in summary["tasks"]}
    assert tasks and all(t["passed"] for t in tasks.values()), tasks
    # recomputed independently of the report: plain onnxruntime vs a fresh NPU-mode session
    from toolkit.engine import Session

    path, feeds = zoo.fetch(name), realistic_inputs(name)
    golden = _ort_outputs(path, feeds)
    out = Session(path, Config(), input_shapes={k: v.shape for k, v in feeds.items()}).run(feeds).outputs
    g, d = next(iter(golden.values())), next(iter(out.values()))
    if name == "ppocr_det":
        assert binarize_iou(g, d, thr=0.3) >= 0.95
    elif name == "ppocr_rec":
        chars = read_ctc_characters(path)
        assert ctc_greedy_decode(g, chars) == ctc_greedy_decode(d, chars)
        assert ctc_greedy_decode(g, chars)[0].strip() != ""
    else:
        assert np.argmax(g, -1).tolist() == np.argmax(d, -1).tolist()
