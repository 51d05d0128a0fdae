"""The seed models of the fuzzer: the bundled sample models (sample_models/*.onnx, the files toolkit.samples
ships) and small instances of the shared fault-case builders (tests/faultkinds/builders.py, the kinds of
/work/shared/cases/fp16), each as (name, ModelProto)."""

from __future__ import annotations

from pathlib import Path

import onnx

from tests.faultkinds import builders as fk

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_models"

#: small fault-case instances: cheap to compile and run, every op kind of the shared cases
FAULT_CASES = {
    "rmsnorm": lambda: fk.rmsnorm(hidden=16, rows=2),
    "layernorm": lambda: fk.layernorm(hidden=16, rows=2),
    "se_block": lambda: fk.se_block(channels=4, hw=4),
    "attention_mask": lambda: fk.attention_mask(heads=1, seq=4, masked=1),
    "attention_scores": lambda: fk.attention_scores(heads=1, seq=4, dim=4),
    "normalize_eps": lambda: fk.normalize_eps(rows=2, dim=8),
    "conv_bn": lambda: fk.conv_bn(channels=2, hw=4),
    "bn_variance": lambda: fk.bn_variance(channels=2, hw=4),
    "softplus": lambda: fk.softplus(width=8),
    "transpose_layernorm": lambda: fk.transpose_layernorm(channels=8, width=5),
}


def seed_models(samples: bool = True) -> list[tuple[str, onnx.ModelProto]]:
    """[(name, model)]: the fault cases, then (``samples``) the bundled sample models in name order."""
    out = [(name, make().model) for name, make in FAULT_CASES.items()]
    if samples:
        out += [(p.stem, onnx.load(p)) for p in sorted(SAMPLE_DIR.glob("*.onnx"))]
    return out
