"""The mesh a reviewer's devices hold for a packed run, for `check --reevaluate` and
`--rerun_steps` (docs/submission.md §3): the run's own where the reviewer has as many devices,
else Eq. 5 refitted on as many of them as it can use, M kept."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import NamedTuple

from hpcai_jax.errors import UsageError
from hpcai_jax.records.train import Mesh


class Devices(NamedTuple):
    count: int
    kind: str
    backend: str


class Fitted(NamedTuple):
    """A layout of the run's M members: (M / members_per_device) × P_degree × P_model devices."""

    num_devices: int
    members_per_device: int
    parallel_degree: int
    model_parallel: int
    same: bool  # the run's own layout

    def flags(self) -> list[str]:
        return [
            f"--members_per_device={self.members_per_device}",
            f"--parallel_degree={self.parallel_degree}",
            f"--model_parallel={self.model_parallel}",
        ]

    def describe(self, kind: str) -> str:
        mesh = "the run's mesh" if self.same else "a refitted mesh"
        return (
            f"{self.num_devices} {kind} devices ({mesh}: {self.members_per_device} members per "
            f"device, P_degree {self.parallel_degree})"
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def fit(mesh: Mesh, available: int) -> Fitted:
    """The run's layout on `available` devices where it has them all, else the layout of M
    members using the most devices (then the largest P_degree, which keeps each device's share
    of a member's batch smallest) among P_degree dividing the run's, P_model the run's or 1."""
    m, p, pm = mesh.ensemble_size, mesh.parallel_degree, mesh.model_parallel
    if available == mesh.num_devices:
        return Fitted(mesh.num_devices, mesh.members_per_device, p, pm, True)
    best = max(
        (g * q * r, q * r, g, q, r)
        for r in sorted({pm, 1})
        for q in _divisors(p)
        for g in _divisors(m)
        if g * q * r <= available
    )
    n, _, groups, q, r = best
    return Fitted(n, m // groups, q, r, False)


def configure(config, fitted: Fitted):
    """`config` (a RunConfig) on the fitted layout."""
    mesh = dataclasses.replace(
        config.mesh,
        members_per_device=fitted.members_per_device,
        parallel_degree=fitted.parallel_degree,
        model_parallel=fitted.model_parallel,
    )
    return dataclasses.replace(config, mesh=mesh)


_PROBE = (
    "import json, jax; d = jax.devices(); "
    "print(json.dumps([len(d), d[0].device_kind, jax.default_backend()]))"
)
_PROBED: list[Devices] = []


def probe() -> Devices:
    """This machine's devices as a child process sees them (the re-runs' environment), asked in
    a subprocess so that this one holds no accelerator memory a re-run needs."""
    if not _PROBED:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=600
        )
        try:
            count, kind, backend = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"--rerun_steps: JAX finds no devices here ({last})") from None
        _PROBED.append(Devices(count, kind, backend))
    return _PROBED[0]
