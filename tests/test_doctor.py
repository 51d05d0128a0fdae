"""``npuscope doctor``: the environment passes here; a faked out-of-range version is named with its range."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
from onnx import helper

import toolkit.signoff.doctor as doctor_mod
from toolkit.signoff.doctor import doctor, in_range, model_checks, version_tuple


def test_cli_doctor_exit_zero():
    r = subprocess.run([sys.executable, "-m", "toolkit", "doctor", "resnet_small"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "doctor: OK" in r.stdout and "resnet_small' opset" in r.stdout
