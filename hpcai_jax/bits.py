"""Per-example verdicts packed for a record (`quality.correct`, docs/score.md §2): one bit an
example, so that 10,000 held-out examples × (M + 1) verdicts stay a few kilobytes of JSON."""

from __future__ import annotations

import base64

import numpy as np


def pack_bits(hits) -> str:
    """base64 of numpy.packbits (big bit order: example 0 is the first byte's high bit)."""
    return base64.b64encode(np.packbits(np.asarray(hits, bool)).tobytes()).decode()


def unpack_bits(text: str, n: int) -> np.ndarray:
    """bool [n]: `pack_bits` undone."""
    return np.unpackbits(np.frombuffer(base64.b64decode(text), np.uint8), count=n).astype(bool)
