"""Where the STREAM arrays live: one local device, sharded over every device of the job, or on
each local device in turn.

Every placement uses a one-axis mesh, so the kernels are the same code either way: with one
device the "shard" is the whole array; with all devices each holds N / devices elements and an
elementwise kernel runs with no communication (Dot adds one all-reduce of a scalar). `each`
is a list of one-device placements, measured one after the other, so that every device gets
its own figure instead of a share of the aggregate.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# The memory queries are the foundation's (hpcai_jax/device_memory.py); named here too for
# STREAM's sizing and the tools that import them from this module.
from hpcai_jax.device_memory import MEMINFO, device_memory_bytes, mem_available_bytes  # noqa: F401

STREAM_AXIS = "stream"


@dataclasses.dataclass(frozen=True)
class Placement:
    mode: str  # "one", "all" or "each" (one of several one-device placements)
    devices: tuple[jax.Device, ...]
    mesh: Mesh

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def local_devices(self) -> tuple[jax.Device, ...]:
        return tuple(d for d in self.devices if d.process_index == jax.process_index())

    @property
    def platform(self) -> str:
        return self.devices[0].platform

    @property
    def device_kind(self) -> str:
        return self.devices[0].device_kind

    @property
    def sharded(self) -> NamedSharding:
        """The arrays: split along their only axis over every device of the placement."""
        return NamedSharding(self.mesh, P(STREAM_AXIS))

    @property
    def replicated(self) -> NamedSharding:
        """Scalars (Dot's sum, validation errors): a copy on every device."""
        return NamedSharding(self.mesh, P())

    def describe(self) -> str:
        """The header's `Placement:` line (placement_line, which `check` also calls)."""
        count = jax.device_count() if self.mode == "each" else self.num_devices
        return placement_line(
            self.mode, str(self.devices[0]), count, jax.local_device_count(), jax.process_count()
        )


def placement_line(
    mode: str, first_device: str, num_devices: int, local_devices: int, processes: int
) -> str:
    """The header's `Placement:` text (`mode`: --stream_devices; `num_devices`: the devices the
    arrays span, or with `each` every device of the job)."""
    if mode == "one":
        return f"one device: {first_device}"
    if mode == "each":
        return (
            f"each device alone, in turn: {local_devices} local devices per process, "
            f"{num_devices} in all, {processes} process(es)"
        )
    return (
        f"all {num_devices} devices of {processes} process(es), arrays sharded {num_devices} ways"
    )


def make_placement(mode: str) -> Placement:
    """`one`: this process's first local device (every process measures its own); `all`: every
    device of the job, in `jax.devices()` order."""
    if mode == "each":
        raise ValueError("--stream_devices=each is several placements: use make_placements")
    devices = (jax.local_devices()[0],) if mode == "one" else tuple(jax.devices())
    return _placement(mode, devices)


def make_placements(mode: str) -> tuple[Placement, ...]:
    """The placements a run measures in turn: one per local device for `each`, else the one."""
    if mode == "each":
        return tuple(_placement("each", (d,)) for d in jax.local_devices())
    return (make_placement(mode),)


def _placement(mode: str, devices: tuple[jax.Device, ...]) -> Placement:
    return Placement(mode=mode, devices=devices, mesh=Mesh(np.asarray(devices), (STREAM_AXIS,)))


def hardware_name(placement: Placement) -> str:
    """The device kind; for CPUs (whose kind is just "cpu") the processor model and core count."""
    if placement.platform != "cpu":
        return placement.device_kind
    model = "unknown CPU"
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model}, {os.cpu_count()} logical cores"


def implementation_label(placement: Placement) -> str:
    """BabelStream's "Implementation" line: JAX's version, the platform and the hardware."""
    return f"JAX {jax.__version__} ({placement.platform}: {hardware_name(placement)})"
