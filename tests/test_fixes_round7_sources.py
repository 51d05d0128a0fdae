"""Fault kinds of round 7 in how a model file is read and named:

- summary.json's model_sha256 is the sha256 of the bytes the run compiled, even when the file at that path is
  replaced while the run goes on (it used to hash the file again at the end);
- load_model parses exactly the bytes it hashes (one read), and file_sha256 reads a file once per process
  while it is unchanged.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import onnx

from toolkit.ir import load as ld
from toolkit.samples import SAMPLES


def test_diagnose_summary_names_the_model_it_compiled(tmp_path, monkeypatch):
    """The model file is swapped for another one between loading and the end of the run: summary.json keeps the
    sha256 of the model that was compiled (the one result.csv describes)."""
    import json

    from toolkit import api
    from toolkit.config import Config
    import toolkit.diagnose as D

    a, b = SAMPLES["resnet_small"].path, SAMPLES["detector_head"].path
    live = tmp_path / "live.onnx"
    shutil.copyfile(a, live)
    real = D.diagnose

    def swap_then_diagnose(prep, *args, **kw):
        shutil.copyfile(b, live)  # the user overwrites the file while the run goes on
        return real(prep, *args, **kw)

    monkeypatch.setattr("toolkit.diagnose.diagnose", swap_then_diagnose)
    api.diagnose_command(str(live), Config(), out=str(tmp_path / "o"), html=False)
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["model_sha256"] == hashlib.sha256(a.read_bytes()).hexdigest()
    assert summary["model_sha256"] != hashlib.sha256(live.read_bytes()).hexdigest()
