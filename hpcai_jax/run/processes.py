"""Each process's own timing, gathered once at the end of the run, where the processes meet
anyway: the members it drives, its timed steps' median and slowest, its epochs' wall times.
Members never wait for each other in a step, so a process's clock is its members' own; an epoch
of the job ends when its slowest process ends it, which is the wall time Eq. 6 takes
(docs/scale.md).
"""

from __future__ import annotations

import math

import numpy as np
from jax.sharding import Mesh

from hpcai_jax.distributed import allgather
from hpcai_jax.records import train
from hpcai_jax.run import startup
from hpcai_jax.run.progress import Progress


def members_by_process(mesh: Mesh, members_per_device: int) -> dict[int, list[int]]:
    """process index → the members whose devices it drives (the mesh's first axis is
    `ensemble`; each of its rows holds `members_per_device` members)."""
    out: dict[int, set[int]] = {}
    for row, devices in enumerate(mesh.devices):
        first = row * members_per_device
        for device in np.asarray(devices).flat:
            out.setdefault(device.process_index, set()).update(
                range(first, first + members_per_device)
            )
    return {p: sorted(members) for p, members in sorted(out.items())}


def owners(mesh: Mesh, members_per_device: int) -> list[int]:
    """member → the first process whose devices train it (the one that reports its figures)."""
    first: dict[int, int] = {}
    for p, members in members_by_process(mesh, members_per_device).items():
        for member in members:
            first.setdefault(member, p)
    return [first[m] for m in sorted(first)]


def _figure(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def per_process(
    progress: Progress, mesh: Mesh, members_per_device: int
) -> list[train.ProcessTiming]:
    """Every process's timing, in process order (a collective: every process calls it)."""
    steps = np.asarray(progress.step_s, np.float64)
    walls = [float(e["wall_s"]) for e in progress.epochs]
    mine = np.array(
        [
            np.median(steps) if steps.size else np.nan,
            steps.max() if steps.size else np.nan,
            progress.agree_s,
            startup.total_s(),
            *walls,
        ],
        np.float64,
    )
    owners = members_by_process(mesh, members_per_device)
    return [
        train.ProcessTiming(
            process_index=p,
            members=owners.get(p, []),
            step_s=train.ProcessStepTimes(median_s=_figure(row[0]), max_s=_figure(row[1])),
            agree_s=float(row[2]),
            startup_s=float(row[3]),
            epoch_wall_s=[float(w) for w in row[4:]],
        )
        for p, row in enumerate(allgather(mine))
    ]


def take_slowest_epochs(progress: Progress, timings: list[train.ProcessTiming]) -> None:
    """Each completed epoch's wall time becomes its slowest process's (what the record's
    epochs and Eq. 6 use); with one process nothing changes."""
    for i, epoch in enumerate(progress.epochs):
        epoch["wall_s"] = max(t.epoch_wall_s[i] for t in timings)
