"""`check --recount`: the FLOPs per step recounted from a packed flagfile (count.py, in a
subprocess on forced CPU devices, no data set needed) against the record's `flops.per_step`.

Tolerance 1 %: on the run's configuration and mesh, XLA counts the same program the same way
on any host; what moves the count is the backend (an accelerator's fusions and rewrites against
the CPU's: at realistic sizes XLA's count stays within ≈ 1 % of the analytic walk of the same
step, docs/flops.md) and, on a shrunk mesh, the reductions over fewer devices. A per_step off by
more than that is not the step the configuration describes. A claim within 1 % of the step's
count before optimisation passes without a compile (a GPU run's count is that one), and one
further from it than count.FAR fails without one (no rule counts that far from it).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from hpcai_jax.records.train import Mesh, TrainRecord
from hpcai_jax.submission import count

# Devices XLA's host platform is asked to fake; more makes compiling a large step impractical.
MAX_FAKE_DEVICES = 64
TOLERANCE = 0.01


def _mesh_for_cpu(mesh: Mesh) -> tuple[int, list[str]]:
    """(devices, extra flags): the run's own mesh where a CPU can fake it, else the same
    ensemble with the largest P_degree dividing the run's that fits MAX_FAKE_DEVICES."""
    n = mesh.num_devices
    if n <= MAX_FAKE_DEVICES:
        return n, []
    groups = mesh.ensemble_size // mesh.members_per_device * mesh.model_parallel
    fits = [
        d
        for d in range(1, mesh.parallel_degree + 1)
        if mesh.parallel_degree % d == 0 and groups * d <= MAX_FAKE_DEVICES
    ]
    if not fits:
        return 0, []
    return groups * fits[-1], [f"--parallel_degree={fits[-1]}"]


# Settings that name a run's outputs, not its step: runs that differ only in them share a count.
_OUTPUTS = (
    "--run_name=",
    "--results_dir=",
    "--mllog=",
    "--checkpoint_dir=",
    "--submission_",
    "--keep_weights=",
)
_COUNTED: dict[tuple, dict] = {}


def step_lines(flags: Path) -> tuple[str, ...]:
    """The flagfile's lines that make its training step (its outputs left out)."""
    text = flags.read_text().splitlines()
    return tuple(ln for ln in text if ln and not ln.startswith(("#", *_OUTPUTS)))


def _undecided(counted: dict, claim: float) -> bool:
    """Whether only the compiled count can judge `claim` (count.py: NEAR < off <= FAR)."""
    low = counted.get("lowered")
    return (
        counted.get("compiled") is None
        and bool(low)
        and count.NEAR < abs(claim / low - 1) <= count.FAR
    )


def recount(f, flags: Path, record: TrainRecord, workdir: Path, rec: str) -> None:
    devices, extra = _mesh_for_cpu(record.mesh)
    if not devices:
        f.fail(
            f"{flags.name} cannot be recounted: even P_degree 1 needs more than {MAX_FAKE_DEVICES} CPU devices"
        )
        return
    got = record.flops.per_step
    if not isinstance(got, (int, float)) or not math.isfinite(got) or got <= 0:
        f.fail(f"{rec} flops.per_step {got!r} is no count of a step")
        return
    key = (step_lines(flags), devices, tuple(extra))
    if key not in _COUNTED or _undecided(_COUNTED[key], got):
        _COUNTED[key] = _count(flags, workdir / f"recount-{len(_COUNTED)}", devices, extra, got)
    counted = _COUNTED[key]
    if "error" in counted:
        f.fail(f"{flags.name} could not be recounted: {counted['error']}")
        return
    low, compiled = counted["lowered"], counted["compiled"]
    if compiled is None and not low:
        f.fail(f"{flags.name} could not be recounted: XLA's cost analysis gave no count")
    elif compiled is not None:
        if not math.isclose(got, compiled, rel_tol=TOLERANCE):
            f.fail(
                f"{rec} flops.per_step {got:.6g} != {compiled:.6g} recounted from {flags.name} "
                f"on {devices} CPU devices{_shrunk(extra)} (the compiled step, ± 1 %)"
            )
    elif abs(got / low - 1) > count.NEAR:
        f.fail(
            f"{rec} flops.per_step {got:.6g} != {low:.6g} recounted from {flags.name} on "
            f"{devices} CPU devices{_shrunk(extra)} (the lowered step: more than "
            f"{count.FAR:.0%} off, no rule counts it so)"
        )


def _shrunk(extra: list[str]) -> str:
    return f", {extra[0]}" if extra else ""


def _count(flags: Path, out: Path, devices: int, extra: list[str], claim: float) -> dict:
    """count.py's figures for a flagfile (`claim`: the record's per_step, which decides whether
    it compiles), or {"error": why}."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    xla = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{xla} --xla_force_host_platform_device_count={devices}".strip()
    command = [
        sys.executable,
        "-m",
        count.__name__,
        str(flags.resolve()),
        *extra,
        f"--claims={float(claim)!r}",
    ]
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=1800)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {last}"}
