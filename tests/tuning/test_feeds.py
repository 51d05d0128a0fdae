"""Input sets for tune (toolkit/tuning/feeds.py): folders, loader scripts and their failures, and the
configured input shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.faultkinds import builders as fk
from toolkit.core.errors import InputError
from toolkit.tuning.feeds import load_feed_sets

LOADERS = {
    "l_int.py": ("def inputs():\n    return 5\n", "inputs", "5"),
    "l_gen.py": ("import numpy as np\ndef inputs():\n    yield {'x': np.zeros((1, 3, 32, 32), np.float32)}\n"
                 "    raise ValueError('boom after one')\n", "inputs", "ValueError: boom after one"),
    "l_arg.py": ("def load(a):\n    yield {}\n", "load", "missing 1 required positional argument"),
    "l_dict.py": ("import numpy as np\ndef inputs():\n    return {'x': np.zeros((1, 3, 32, 32), np.float32)}\n",
                  "inputs", "returned one dict"),
    "l_iter.py": ("class Bad:\n    def __iter__(self):\n        raise RuntimeError('no iter')\n"
                  "def inputs():\n    return Bad()\n", "inputs", "not a list or generator"),
}


@pytest.fixture(scope="module")
def resnet():
    from toolkit.samples import build_resnet_small

    return build_resnet_small()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_loader_failures_are_input_errors_naming_script_and_function(tmp_path, resnet, name):
    from toolkit.tuning.feeds import load_feed_sets

    text, fn, expect = LOADERS[name]
    (tmp_path / name).write_text(text)
    spec = str(tmp_path / name) + (f":{fn}" if fn != "inputs" else "")
    with pytest.raises(InputError) as exc:
        load_feed_sets(resnet, None, spec)
    msg = str(exc.value)
    assert "\n" not in msg and name in msg and f"{fn}()" in msg and expect in msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_loader_good_generator_gives_its_feeds(tmp_path, resnet):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "ok.py").write_text("import numpy as np\ndef make():\n    for k in range(3):\n"
                                   "        yield {'x': np.full((1, 3, 32, 32), k, np.float32)}\n")
    sets = load_feed_sets(resnet, None, str(tmp_path / "ok.py") + ":make")
    assert [lbl for lbl, _ in sets] == ["ok.py[0]", "ok.py[1]", "ok.py[2]"]
    for k, (_, feed) in enumerate(sets):
        np.testing.assert_array_equal(feed["x"], np.full((1, 3, 32, 32), k, np.float32))


def _m1(path: Path) -> Path:
    """y = 3x + 1, z = exp(x) on x float32[4, 8] (two float outputs)."""
    from tests.graphs import affine_and

    m = affine_and("Exp")
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def test_loader_raising_an_exception_mid_iteration_is_an_input_error(tmp_path):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text("import numpy as np\ndef inputs():\n    yield {'x': np.zeros((4, 8), np.float32)}\n"
                                   "    raise ValueError('late')\n")
    with pytest.raises(InputError, match=r"inputs\(\) raised ValueError: late while producing set 1"):
        load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"))


def test_loader_with_exactly_max_sets_gives_them_all(tmp_path):
    from toolkit.tuning.feeds import load_feed_sets

    (tmp_path / "l.py").write_text("import numpy as np\ndef inputs():\n"
                                   "    for i in range(5):\n        yield {'x': np.full((4, 8), i, np.float32)}\n")
    sets = load_feed_sets(onnx.load(_m1(tmp_path / "m.onnx")), None, str(tmp_path / "l.py"), max_sets=5)
    assert [float(f["x"][0, 0]) for _, f in sets] == [0.0, 1.0, 2.0, 3.0, 4.0]


def _model(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_feed_sets_have_the_configured_shape(tmp_path):
    from toolkit.ir.load import load_model
    from toolkit.tuning.feeds import load_feed_sets
    from toolkit.signoff.run import input_sets
    from toolkit.source import resolve_model

    path = _model(tmp_path)
    src, m = resolve_model(str(path)), load_model(str(path))
    for sets in (load_feed_sets(m, src, None, 0, {"x": (5, 8)}), input_sets(m, src, None, {"x": (5, 8)})):
        (label, feed), = sets
        assert feed["x"].shape == (5, 8) and feed["x"].dtype == np.float32
        assert json.dumps(label)  # a printable label


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_feed_sets_from_folder_and_loader_script(tmp_path):
    b = fk.rmsnorm(hidden=32, rows=2, seed=0)
    (tmp_path / "d").mkdir()
    for i in range(3):
        np.savez(tmp_path / "d" / f"{i}.npz", x=b.feeds["x"] * (i + 1))
    sets = load_feed_sets(b.model, None, str(tmp_path / "d"))
    assert [lbl for lbl, _ in sets] == ["0.npz", "1.npz", "2.npz"]
    np.testing.assert_array_equal(sets[2][1]["x"], b.feeds["x"] * 3)
    script = tmp_path / "loader.py"
    script.write_text("import numpy as np\ndef inputs():\n    for s in (1.0, 2.0):\n"
                      f"        yield {{'x': np.full({list(b.feeds['x'].shape)}, s, np.float32)}}\n")
    sets = load_feed_sets(b.model, None, str(script))
    assert len(sets) == 2 and float(sets[1][1]["x"].max()) == 2.0
