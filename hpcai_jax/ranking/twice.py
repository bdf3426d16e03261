"""One run in two packages (docs/ranking.md, "Hostile and mixed inputs"): packages whose bytes
differ (another system.json, a record re-serialised) have other digests, yet may hold the same
run. check's duplicate rule finds a run packed twice inside one package by its MLLOG's time
stamps; the list applies it across packages, so a run is listed once."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hpcai_jax.ranking import consistency
from hpcai_jax.submission import MLLOG
from hpcai_jax.submission.logfile import Log


def fingerprint(root: Path, run_id: str) -> str:
    """The run's MLLOG time stamps, counted from its first line: no two runs share them."""
    stamps = [line.get("time_ms") for line in Log(root / f"{run_id}{MLLOG}").lines]
    first = next((t for t in stamps if isinstance(t, (int, float))), 0)
    text = ",".join(repr(t - first) if isinstance(t, (int, float)) else "-" for t in stamps)
    return hashlib.sha256(text.encode()).hexdigest()


class Seen:
    """The runs of the packages listed so far (in order of name), by fingerprint."""

    def __init__(self):
        self.runs: dict[str, tuple[str, str]] = {}

    def add(self, root: Path) -> str:
        """Why the package is not listed (a run of it is a run listed already), or empty, and
        then its runs are listed ones."""
        prints = {r.run_id: fingerprint(root, r.run_id) for r in consistency.trained(root)}
        for run, key in prints.items():
            if key in self.runs:
                package, other = self.runs[key]
                return (
                    f"run {run}: the same MLLOG time stamps as run {other} of package "
                    f"{package}: one run in two packages, listed once, as {package}'s"
                )
        for run, key in prints.items():
            self.runs.setdefault(key, (root.name, run))
        return ""
