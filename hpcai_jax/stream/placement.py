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
import platform
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
    return f"{cpu_identity()['model']}, {os.cpu_count()} logical cores"


# Arm's "CPU implementer" codes (the Arm ARM's MIDR_EL1 table), for hosts whose cpuinfo names no
# model: the vendor is then the implementer and the model its part number.
ARM_IMPLEMENTERS = {
    "0x41": "Arm",
    "0x42": "Broadcom",
    "0x43": "Cavium",
    "0x46": "Fujitsu",
    "0x48": "HiSilicon",
    "0x4e": "NVIDIA",
    "0x50": "Applied Micro",
    "0x51": "Qualcomm",
    "0x61": "Apple",
    "0xc0": "Ampere",
}


def cpu_identity(cpuinfo: str | None = None) -> dict[str, str]:
    """The host CPU's vendor and model, so that a CPU figure names the chip it came from: x86's
    `vendor_id` and `model name` (with family, model and stepping: a virtual machine may say
    only "AMD EPYC"), Arm's implementer and part, or platform's guess where cpuinfo is silent.
    `cpuinfo` is /proc/cpuinfo's text (read when None)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip(), value.strip())
    implementer = fields.get("CPU implementer", "").lower()
    vendor = fields.get("vendor_id") or ARM_IMPLEMENTERS.get(implementer, implementer)
    model = fields.get("model name") or fields.get("cpu model") or fields.get("cpu", "")
    if not model and "CPU part" in fields:
        model = f"part {fields['CPU part']}"
    signature = ", ".join(
        f"{name} {fields[key]}"
        for name, key in (("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))
        if key in fields
    )
    source = "/proc/cpuinfo" if vendor or model else "platform"
    vendor = vendor or "unknown vendor"
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    described = f"{vendor} {model}" + (f" ({signature})" if signature else "")
    return {
        "vendor": vendor,
        "model": model,
        "signature": signature,
        "source": source,
        "described": described,
    }


def implementation_label(placement: Placement) -> str:
    """BabelStream's "Implementation" line: JAX's version, the platform and the hardware."""
    return f"JAX {jax.__version__} ({placement.platform}: {hardware_name(placement)})"
