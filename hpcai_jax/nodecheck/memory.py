"""How much memory an item may take, and the sizes that fit it (docs/node_check.md, Memory).

Every item estimates its memory before it allocates anything and cuts its sizes to fit: an item
that does not fit would not fail its row but sink the node (the kernel kills the whole check and
no row survives). CPU devices share the host's memory, so their room is a fraction of the host's
MemAvailable (/proc/meminfo), split among this node's processes, and an item's need is per
device times the local devices; an accelerator's room is a fraction of its own free memory
(the allocator's limit less what is in use, from `memory_stats`, else its size). Every process
takes the smallest room of all, so that every process cuts to the same sizes.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from hpcai_jax.device_memory import device_free_bytes, mem_available_bytes
from hpcai_jax.nodecheck.budget import agree

# What one item may take of the host's available memory (CPU devices): the rest is the check's
# own runtime and compiler (about 2 GB with a ResNet-50), and the other jobs on the host.
HOST_FRACTION = 0.3
# Of an accelerator's free memory: the rest is the runtime's and fragmentation's.
DEVICE_FRACTION = 0.85


@dataclasses.dataclass(frozen=True)
class Room:
    """What one item may take: `bytes` shared by `devices` devices (the host's, by the local CPU
    devices; an accelerator's own, by one)."""

    bytes: int | None  # None: unknown (no meminfo, no memory figure): nothing is cut
    devices: int
    source: str

    def per_device(self, using: int | None = None) -> float:
        """The bytes one device may take when `using` of the devices that share the room run
        (default all of them)."""
        if self.bytes is None:
            return float("inf")
        return self.bytes / min(using or self.devices, self.devices)

    def fits(self, per_device_bytes: float, using: int | None = None) -> bool:
        return per_device_bytes <= self.per_device(using)

    def describe(self) -> str:
        if self.bytes is None:
            return self.source
        return f"{gb(self.bytes)} room ({self.source})"


def room(processes_on_node: int = 1) -> Room:
    """The room of an item starting now, the same on every process (a collective)."""
    device = jax.local_devices()[0]
    if device.platform == "cpu":
        available = mem_available_bytes()
        local = jax.local_device_count()
        figure = None if available is None else HOST_FRACTION * available / processes_on_node
        source = (
            f"{HOST_FRACTION:.0%} of MemAvailable"
            + (f" / {processes_on_node} processes" if processes_on_node > 1 else "")
            + f", shared by {local} CPU devices"
        )
    else:
        free = [device_free_bytes(d) for d in jax.local_devices()]
        figure = None if None in free else DEVICE_FRACTION * min(free)
        local = 1
        source = f"{DEVICE_FRACTION:.0%} of the device's free memory"
    agreed = agree(np.inf if figure is None else figure)
    if not np.isfinite(agreed):
        return Room(None, local, "no memory figure on this host: sizes not cut")
    return Room(int(agreed), local, source)


def largest_fitting(sizes: list[int], need, room: Room) -> list[int]:
    """The sizes (ascending) whose need(size) per device fits the room: the cut is at the
    first that does not."""
    kept = []
    for size in sizes:
        if not room.fits(need(size)):
            break
        kept.append(size)
    return kept


def capped_note(
    what: str, asked, got, need_bytes: float, room: Room, using: int | None = None
) -> str:
    """The row's words for a size cut to fit: what, from, to, and the room it had to fit."""
    return (
        f"{what} capped {asked} -> {got} by memory: {gb(need_bytes)} per device at {asked} "
        f"over {gb(room.per_device(using))} per device of {room.describe()}"
    )


def gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"
