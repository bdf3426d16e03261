"""How much memory a device and its host have, as JAX and the operating system report them: the
one place the engine's memory check, STREAM's sizing, the node check and the acceptance ask.
A foundation: it imports nothing of the package, so that no floor reaches up for it."""

from __future__ import annotations

import os

import jax


def device_memory_bytes(device: jax.Device) -> int | None:
    """One device's memory: the allocator's limit on GPUs/TPUs; for CPU devices the host's
    physical memory divided among the local CPU devices (they share it)."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends without memory stats raise various errors
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform == "cpu":
        try:
            host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return None
        local_cpus = sum(1 for d in jax.local_devices() if d.platform == "cpu")
        return host // max(1, local_cpus)
    return None


MEMINFO = "/proc/meminfo"


def mem_available_bytes(path: str = MEMINFO) -> int | None:
    """The host's MemAvailable (what can be allocated without swapping), or None where the file
    does not exist (not Linux)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def device_free_bytes(device) -> int | None:
    """An accelerator's free memory: its allocator's limit less what is in use, or its size."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - not every backend implements it
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return device_memory_bytes(device)
