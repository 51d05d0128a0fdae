"""tune.html (toolkit/report/tune_html.py): the first screen names the nodes kept in FP32."""

from __future__ import annotations

import numpy as np
import pytest
from markupsafe import escape
from onnx import TensorProto, helper, numpy_helper

from toolkit.config.schema import Config
from toolkit.report.tune_html import SHOWN_KEPT, render_tune_report
from toolkit.tuning.tune import DEFAULT_TARGET, parse_target, tune


def _chain(layers: int, hot: set[int], names: list[str]):
    """``layers`` MatMuls named ``names``; those in ``hot`` have weights ×1e3, whose products pass FP16 max."""
    rng = np.random.default_rng(layers)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((8, 8)) * (1e3 if i in hot else 0.3)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=names[i]))
        prev = f"h{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model, {"x": (rng.standard_normal((2, 8)) * 30).astype(np.float32)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("names", [["mm0", "mm1", "mm2"], ["<b>0</b>", "a'b", "c&d"]])
def test_the_first_screen_names_the_nodes_kept_in_fp32(tmp_path, names):
    model, feed = _chain(3, {1}, names)
    res = tune(model, [("x", feed)], Config(precision_mode="force_fp16", fusion_level=0), parse_target(DEFAULT_TARGET))
    assert res.met and res.chosen and len(res.chosen) <= SHOWN_KEPT
    page = render_tune_report(res, tmp_path, "chain").read_text(encoding="utf-8")
    first = page[page.index('id="result"'):page.index('id="metrics"')]
    assert all(str(escape(f"'{n}'")) in first for n in res.chosen), first  # each name, escaped as jinja does
    assert "<b>0</b>" not in page  # a model's name is escaped
