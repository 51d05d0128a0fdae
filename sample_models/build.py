"""Rebuild the built-in sample models (deterministic, seeded) into toolkit/data/ and copy them here.

Usage: ``python sample_models/build.py``. The builders live in :mod:`toolkit.samples` so the installed
package can rebuild them; the canonical copies are ``toolkit.samples.SAMPLES_DIR`` (``toolkit/data/``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolkit import samples

HERE = Path(__file__).resolve().parent


def main() -> int:
    for name, path in samples.build_all(samples.SAMPLES_DIR, copy_to=HERE).items():
        print(f"{name}\t{path}\t{path.stat().st_size} bytes\t(copy: {HERE / path.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
