"""Result IDs (docs/ranking.md, "Result IDs"): from the list's version, the package's digest and
the run's id inside it, never from the order the packages were given in, so the same package
has the same ID in every list of one version."""

from __future__ import annotations

import hashlib

from hpcai_jax.ranking import LIST_VERSION

DIGITS = 10  # hex digits of the hash: 40 bits, no collision among any plausible list


def result_id(digest: str, run_id: str, version: str = LIST_VERSION) -> str:
    """`v3.0-1a2b3c4d5e`: the version, then the sha256 of (version, digest, run id)."""
    text = f"{version}\n{digest}\n{run_id}".encode()
    return f"{version}-{hashlib.sha256(text).hexdigest()[:DIGITS]}"
