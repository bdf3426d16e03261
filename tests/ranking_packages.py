"""Submission packages for the list's tests and benchmark (hpcai_jax/ranking/): copies of one
packed run made to look like other submissions, each consistent in its record, MLLOG, flagfile,
README and system.json (tests/forge.py's arithmetic), so that `check` passes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import forge


def variant(
    src: Path,
    dest: Path,
    run: str,
    speed: float = 1.0,
    org: str | None = None,
    platform: str | None = None,
    system: dict | None = None,
) -> Path:
    """A copy of package `src` at `dest`: its run claimed `speed`× faster (every time from
    run_start on ÷ speed: a new MLLOG, so another run to check's duplicate rule), stating
    `org` and `platform` in its configuration and MLLOG, and `system` merged into system.json."""
    shutil.copytree(src, dest)
    f = forge.Forged(dest, run)
    for key, value in (("submission_org", org), ("submission_platform", platform)):
        if value is not None:
            f.record["config"]["results"][key] = value
            f.one(key)["value"] = value
    if speed != 1.0:
        t0 = f.one("run_start")["time_ms"]
        f.retime(lambda t: t if t < t0 else t0 + (t - t0) / speed)
        f.scale_timing(speed)
        f.rederive()
    f.write()
    if system:
        path = dest / "system.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | system, indent=2) + "\n")
    return dest
