"""How large STREAM's arrays are (docs/stream.md, The mode): which size setting was given, the
room a placement offers, the elements per array, and the 4x-cache rule's verdict on them.

Free of JAX and of `stream/config.py`, which imports it (its flag checks ask `given_sizes`
too): the memory of a device and of its host is read by the caller (benchmark.py) and handed in.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

import numpy as np
from absl import logging

from hpcai_jax.distributed import allgather
from hpcai_jax.dtypes import itemsize
from hpcai_jax.errors import UsageError
from hpcai_jax.stream.cache import (
    SIZE_FACTOR,
    SizeCheck,
    check_size,
    largest_cache,
    mib_text,
    rule_elements_per_device,
)

if TYPE_CHECKING:
    from hpcai_jax.stream.placement import Placement

MIB = 1 << 20
SIZE_SETTINGS = ("array_size", "array_mib", "array_fraction")


class SizeSettings(Protocol):
    """What sizing reads of STREAM's settings (`config.StreamConfig`, which imports this)."""

    array_size: int | None
    array_mib: float
    array_fraction: float
    precision: str
    devices: str
    allow_small_arrays: bool
    strict_size: bool


def given_sizes(config: SizeSettings) -> list[tuple[str, str]]:
    """The size settings given, each as (its name, its flag: `--array_mib=1.0`), in
    SIZE_SETTINGS' order. None given is --array_size=auto, the 4x-cache rule's size;
    `StreamConfig.validate` allows one at most. Every question of which was given asks this."""
    return [
        (name, f"--{name}={getattr(config, name)}")
        for name in SIZE_SETTINGS
        if getattr(config, name)
    ]


def size_flag(config: SizeSettings) -> str:
    """The flag that chose the arrays' size: the one given, else `--array_size=auto`."""
    given = given_sizes(config)
    return given[0][1] if given else "--array_size=auto"


@dataclasses.dataclass(frozen=True)
class ArraySize:
    """Elements per (global) array, and which setting chose them."""

    elements: int
    source: str  # "rule", "array_size", "array_mib" or "array_fraction"
    note: str = ""  # e.g. how a derived size was rounded, or why the rule chose it


@dataclasses.dataclass(frozen=True)
class Room:
    """Where the arrays go: what the size rule and the memory check need to know of it."""

    num_devices: int  # devices the arrays are split over, an equal shard each
    device_memory_bytes: int | None  # one device's memory (--array_fraction's base)
    rule_elements_per_device: int  # the smallest power of two that keeps the 4x-cache rule
    rule_why: str  # that size's reason, in words
    free_bytes_per_device: int | None  # what one device's three shards may take; None: unknown
    free_source: str  # where that figure comes from


def devices_per_cache(placement: Placement) -> int:
    """How many of the placement's devices sit behind one largest cache: all local CPU devices
    share the host's caches; each accelerator has its own."""
    if placement.platform == "cpu":
        return len(placement.local_devices)
    return 1


def room(
    config: SizeSettings,
    placement: Placement,
    device_memory: int | None,
    host_available: int | None,
) -> Room:
    """The rule's size and the free memory of `placement`, from its first device's memory and
    the host's MemAvailable (read on CPUs only). CPU devices share the host's caches and its
    MemAvailable; an accelerator has its own cache and its allocator's limit. Every process
    takes the largest rule size of all (hosts may differ), so that all agree."""
    nbytes = itemsize(config.precision)
    sharing = devices_per_cache(placement)
    cache = largest_cache(placement.platform, placement.device_kind)
    per_device = rule_elements_per_device(cache, nbytes, sharing)
    if not given_sizes(config):
        per_device = int(allgather(np.asarray([per_device], np.int64)).max())
    why = (
        f"the smallest power of two with one array >= {SIZE_FACTOR} x the largest cache, "
        f"{mib_text(cache.bytes)} MiB ({cache.source}), over {sharing} device(s) sharing it"
        if cache.bytes is not None
        else f"BabelStream's default per device; {cache.source}"
    )
    if placement.platform == "cpu":
        free = None if host_available is None else host_available // sharing
        source = f"the host's MemAvailable over {sharing} local CPU device(s)"
    else:
        free, source = device_memory, f"{placement.device_kind}'s memory limit"
    return Room(placement.num_devices, device_memory, per_device, why, free, source)


def resolve_array_size(config: SizeSettings, room: Room) -> ArraySize:
    """Elements per array for `room.num_devices` devices that each hold an equal shard: the
    rule's size under auto, else the flag's. Checked against free memory before anything is
    allocated.

    An explicit --array_size must divide evenly over the devices; sizes derived from MiB or a
    memory fraction are rounded down to a multiple of the device count (and reported).

    Raises:
      UsageError: the size is not divisible, too small, or does not fit in free memory.
    """
    size = itemsize(config.precision)
    n = room.num_devices
    given = given_sizes(config)
    source = given[0][0] if given else "rule"
    if source == "array_size":
        elements, note = config.array_size, ""
        _require(
            elements % n == 0,
            f"--array_size={elements}: not divisible across {n} devices "
            f"(--stream_devices={config.devices}); use a multiple of {n}",
        )
    elif source == "rule":
        elements = room.rule_elements_per_device * n
        note = f"--array_size=auto: {_pow2(elements)} {config.precision} elements: {room.rule_why}"
    else:
        elements, note = _derived_size(config, source, n, room.device_memory_bytes, size)
    if room.free_bytes_per_device is not None:
        need = 3 * elements // n * size
        _require(
            need <= room.free_bytes_per_device,
            f"{_flag_of(config, source, elements)}: three arrays of {elements * size / MIB:,.0f} "
            f"MiB need {need / MIB:,.0f} MiB per device, more than the "
            f"{room.free_bytes_per_device / MIB:,.0f} MiB free ({room.free_source})"
            + (
                "; free memory, or give a smaller size with --allow_small_arrays"
                if source == "rule"
                else ""
            ),
        )
    return ArraySize(elements=elements, source=source, note=note)


def _pow2(n: int) -> str:
    """2^k where n is a power of two, else n."""
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


def _derived_size(
    config: SizeSettings,
    source: str,
    num_devices: int,
    device_memory_bytes: int | None,
    size: int,
) -> tuple[int, str]:
    """(elements, note) of a size given in MiB (`source` array_mib) or as a fraction of device
    memory: rounded down to a multiple of the device count, the rounding said in the note."""
    flag = size_flag(config)
    if source == "array_mib":
        exact = config.array_mib * MIB / size
    else:
        _require(
            device_memory_bytes is not None,
            f"{flag}: this backend does not report its device memory; use --array_size or "
            "--array_mib",
        )
        # The fraction is of one device's memory for its shards of all three arrays.
        exact = config.array_fraction * device_memory_bytes * num_devices / (3 * size)
    elements = int(exact) // num_devices * num_devices
    _require(
        elements >= num_devices,
        f"{flag}: gives {int(exact)} elements per array, fewer than the {num_devices} devices",
    )
    note = (
        f"{flag} gives {exact:.1f} elements per array; rounded down to {elements}, a "
        f"multiple of {num_devices} devices"
        if elements != exact
        else ""
    )
    return elements, note


def _flag_of(config: SizeSettings, source: str, elements: int) -> str:
    if source == "rule":
        return f"--array_size=auto ({_pow2(elements)} elements, the 4x-cache rule's size)"
    return size_flag(config)


def sized(
    config: SizeSettings, placement: Placement, room: Room, remedy: str, warn: bool = True
) -> tuple[ArraySize, SizeCheck]:
    """The arrays' size in `room` (auto: the rule's), checked against free memory, and whether
    each array passes the 4x-cache rule: an error where it does not, unless
    --allow_small_arrays (then a warning, and the record says small_arrays)."""
    if config.strict_size:
        logging.warning(
            "STREAM: --strict_size is deprecated and goes in the next release: the 4x-cache "
            "rule is an error by default now"
        )
    size = resolve_array_size(config, room)
    if size.note:
        logging.info("STREAM: %s", size.note)
    size_check = check_size(
        size.elements // placement.num_devices * itemsize(config.precision),
        devices_per_cache(placement),
        largest_cache(placement.platform, placement.device_kind),
        remedy,
    )
    if not size_check.ok:
        if not config.allow_small_arrays:
            raise UsageError(
                f"{size_flag(config)}: {size_check.message}; or give --allow_small_arrays to "
                "measure it anyway, marked as breaking the rule"
            )
        if warn:
            logging.warning(
                "STREAM: arrays too small, this measures a cache: %s", size_check.message
            )
    return size, size_check


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)
