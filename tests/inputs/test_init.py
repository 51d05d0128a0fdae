"""toolkit.inputs resolves its public names lazily (PEP 562): every name works, the compiler does not pull
in Pillow, unknown names raise AttributeError."""

import importlib
import subprocess
import sys

import pytest


def test_every_public_name_resolves_to_its_module_object():
    import toolkit.inputs as pkg

    for name in pkg.__all__:
        home = importlib.import_module(f"toolkit.inputs.{pkg._HOME[name]}")
        assert getattr(pkg, name) is getattr(home, name)
    assert sorted(pkg.__all__) == sorted(pkg._HOME)
    with pytest.raises(AttributeError):
        pkg.no_such_name  # noqa: B018


def test_compiling_does_not_import_pillow():
    code = ("import sys; from toolkit.compiler.pipeline import compile_model; "
            "from toolkit.compiler.passes import bind_shapes; print('PIL' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
