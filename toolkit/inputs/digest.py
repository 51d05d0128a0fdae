"""Digests of input values (summary.json ``inputs_sha256``): which inputs a run was given, compared by regress."""

from __future__ import annotations

import hashlib

import numpy as np

#: summary.json key of diagnose/compare: {graph input name: :func:`input_digest` of the array fed}.
DIGESTS_KEY = "inputs_sha256"


def input_digest(value) -> str:
    """sha256 (hex) over an input value's dtype (numpy ``dtype.str``, e.g. ``<f4``), shape (the tuple's text)
    and C-order bytes (the elements' repr for object arrays); a sequence input (list) digests its elements'
    digests in order; None (an absent optional input) digests the text ``None``."""
    if value is None:
        return hashlib.sha256(b"None").hexdigest()
    if isinstance(value, (list, tuple)):
        h = hashlib.sha256(b"sequence")
        for v in value:
            h.update(input_digest(v).encode())
        return h.hexdigest()
    arr = np.ascontiguousarray(value)
    h = hashlib.sha256(f"{arr.dtype.str}{arr.shape}".encode())
    h.update(repr(arr.tolist()).encode() if arr.dtype == object else arr.tobytes())
    return h.hexdigest()


def input_digests(feeds: dict) -> dict[str, str]:
    """{input name: :func:`input_digest`} of a feed (the value of summary.json ``inputs_sha256``)."""
    return {str(k): input_digest(v) for k, v in feeds.items()}
