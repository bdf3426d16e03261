"""`check --recount`: the FLOPs per step recounted from a packed flagfile by `python -m
hpcai_jax.main --mode=flops` in a subprocess on forced CPU devices, against the record's
`flops.per_step`.

Tolerance 1 %: on the run's configuration and mesh, XLA counts the same program the same way
on any host; what moves the count is the backend (an accelerator's fusions and rewrites against
the CPU's: at realistic sizes XLA's count stays within ≈ 1 % of the analytic walk of the same
step, docs/flops.md) and, on a shrunk mesh, the reductions over fewer devices. A per_step off by
more than that is not the step the configuration describes.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

from hpcai_jax import records
from hpcai_jax.records.train import Mesh, TrainRecord

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
_OUTPUTS = ("--run_name=", "--results_dir=", "--mllog=", "--checkpoint_dir=", "--submission_")
_COUNTED: dict[tuple, tuple[float | None, str]] = {}


def recount(f, flags: Path, record: TrainRecord, workdir: Path, rec: str) -> None:
    devices, extra = _mesh_for_cpu(record.mesh)
    if not devices:
        f.fail(
            f"{flags.name} cannot be recounted: even P_degree 1 needs more than {MAX_FAKE_DEVICES} CPU devices"
        )
        return
    step = [ln for ln in flags.read_text().splitlines() if not ln.startswith(("#", *_OUTPUTS))]
    key = (tuple(step), devices, tuple(extra))
    if key not in _COUNTED:
        _COUNTED[key] = _count(flags, workdir / f"recount-{len(_COUNTED)}", devices, extra)
    counted, error = _COUNTED[key]
    if counted is None:
        f.fail(f"{flags.name}: --mode=flops wrote no record: {error}")
        return
    where = f"{devices} CPU devices" + (f", {extra[0]}" if extra else "")
    got = record.flops.per_step
    if not (isinstance(got, (int, float)) and math.isclose(got, counted, rel_tol=TOLERANCE)):
        f.fail(
            f"{rec} flops.per_step {got:.6g} != {counted:.6g} recounted by --mode=flops from "
            f"{flags.name} on {where} (± 1 %)"
        )


def _count(flags: Path, out: Path, devices: int, extra: list[str]) -> tuple[float | None, str]:
    """The training step's FLOPs `--mode=flops` counts for a flagfile, or (None, why)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    xla = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{xla} --xla_force_host_platform_device_count={devices}".strip()
    command = [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        f"--flagfile={flags.resolve()}",
        "--mode=flops",
        f"--results_dir={out}",
        "--run_name=recount",
        *extra,
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    try:
        counted = records.read(out / "recount.json")
    except records.RecordError:
        counted = None
    if isinstance(counted, records.FlopsRecord) and counted.flops.train_step_flops is not None:
        return counted.flops.train_step_flops, ""
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return None, f"exit {proc.returncode}: {last}"
