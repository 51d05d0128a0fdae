"""Fetch and verify the three PP-OCRv4 ONNX models into the npuscope model cache and print their paths.

Usage: ``python sample_models/fetch_ppocr.py [--wheel PATH]``. The models come from the
``rapidocr-onnxruntime==1.4.4`` wheel (sha256-pinned, see :mod:`toolkit.zoo`); set ``NPUSCOPE_MODEL_CACHE``
to choose the cache folder. The models are not committed to the repository.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit import zoo
from toolkit.core.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, default=None, help="use this local copy of the wheel instead of pip")
    args = parser.parse_args(argv)
    try:
        paths = zoo.fetch_all(wheel=args.wheel)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
