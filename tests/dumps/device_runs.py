"""Shared builders for the device-dump diagnosis tests: a simulated run of a sample model written as raw device
dumps (toolkit.dumps.export), optionally with planted wrong tensors, and its input as .npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from toolkit import samples
from toolkit.config.schema import Config
from toolkit.dumps.export import write_raw_run
from toolkit.engine import Session, shapes_of


def device_folder(tmp_path: Path, sample: str = "resnet_small", layout: str = "NC1HWC0", config: Config | None = None,
                  spoil: dict | None = None) -> tuple[Path, Path, Path]:
    """(model path, dump folder, input .npz) of ``sample`` run under ``config`` (default options); ``spoil``
    {tensor: fn(array) -> array} replaces tensors before they are written."""
    path = samples.sample_path(sample)
    model = onnx.load(str(path))
    feeds = getattr(samples, f"{sample}_inputs")()
    sess = Session(model, config or Config(), input_shapes=shapes_of(feeds))
    tensors = {**sess.run(feeds, dump=True).dumps, **feeds}
    for t, fn in (spoil or {}).items():
        tensors[t] = fn(tensors[t])
    write_raw_run(tmp_path / "device", model, sess.plan, tensors, layout)
    np.savez(tmp_path / "input.npz", **feeds)
    return path, tmp_path / "device", tmp_path / "input.npz"
