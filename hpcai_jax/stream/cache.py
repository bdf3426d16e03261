"""The largest cache in front of a device's memory, for BabelStream's size rule.

BabelStream requires the arrays to be at least 4x the largest cache, or the benchmark measures
the cache, not memory. CPUs: the last-level caches from Linux sysfs, summed over their distinct
instances (STREAM's rule for several sockets or chiplets), else `sysconf`. GPUs and TPUs: JAX
does not expose the cache size, so a table of vendor figures by device kind, and a deliberately
large assumption for unknown kinds.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

MIB = 1 << 20
SIZE_FACTOR = 4  # BabelStream: arrays >= 4x the largest cache

# Last-level cache per device (vendor whitepapers / datasheets), matched as a substring of
# `device.device_kind`, most specific first.
ACCELERATOR_CACHE_BYTES: tuple[tuple[str, int], ...] = (
    ("GH200", 50 * MIB),  # Hopper: 50 MB L2
    ("H200", 50 * MIB),
    ("H100", 50 * MIB),
    ("H800", 50 * MIB),
    ("A100", 40 * MIB),  # Ampere GA100: 40 MB L2
    ("A800", 40 * MIB),
    ("A30", 24 * MIB),
    ("A40", 6 * MIB),
    ("A10", 6 * MIB),
    ("L40", 96 * MIB),  # Ada AD102: 96 MB L2
    ("L4", 48 * MIB),
    ("V100", 6 * MIB),
    ("T4", 4 * MIB),
    ("MI300", 256 * MIB),  # CDNA3: 256 MB Infinity Cache
    ("MI250", 8 * MIB),  # CDNA2: 8 MB L2 per GCD
    ("MI210", 8 * MIB),
    ("MI100", 8 * MIB),
    ("TPU v4", 128 * MIB),  # 128 MiB CMEM
)
# Unknown GPU/TPU kinds: assume the largest on-package cache in the table, so that a too-small
# array is flagged rather than silently measuring a cache.
UNKNOWN_ACCELERATOR_CACHE_BYTES = 256 * MIB


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    bytes: int | None  # None: unknown
    source: str  # where the figure came from, for the report
    scope: str  # "host": shared by all local CPU devices; "device": one accelerator's own


def cpu_cache(sysfs: Path = Path("/sys/devices/system/cpu")) -> CacheInfo:
    """Total last-level cache of this host: the highest cache level, summed over instances."""
    levels: dict[int, dict[str, int]] = {}  # level -> {shared_cpu_list: bytes}
    for index in sysfs.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        levels.setdefault(level, {})[shared] = size
    if levels:
        top = max(levels)
        instances = levels[top]
        total = sum(instances.values())
        return CacheInfo(
            total, f"sysfs: {len(instances)} x L{top} {max(instances.values()) / MIB:g} MiB", "host"
        )
    for name in ("SC_LEVEL4_CACHE_SIZE", "SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            value = os.sysconf(name)
        except (ValueError, OSError):
            continue
        if value and value > 0:
            return CacheInfo(value, f"sysconf {name}", "host")
    return CacheInfo(None, "unknown: no sysfs cache entries or sysconf figure", "host")


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(text[:-1]) * factor
    return int(text)


def accelerator_cache(device_kind: str) -> CacheInfo:
    for key, size in ACCELERATOR_CACHE_BYTES:
        if key.lower() in device_kind.lower():
            return CacheInfo(size, f"table: {key}", "device")
    return CacheInfo(
        UNKNOWN_ACCELERATOR_CACHE_BYTES,
        f"assumed {UNKNOWN_ACCELERATOR_CACHE_BYTES // MIB} "
        f"MiB: {device_kind!r} is not in the cache table",
        "device",
    )


def largest_cache(platform: str, device_kind: str) -> CacheInfo:
    return cpu_cache() if platform == "cpu" else accelerator_cache(device_kind)


@dataclasses.dataclass(frozen=True)
class SizeCheck:
    ok: bool
    array_bytes: int  # one array's bytes in front of one cache (the shards that share it)
    cache: CacheInfo
    message: str


def check_size(
    array_bytes_per_device: int,
    devices_per_cache: int,
    cache: CacheInfo,
    remedy: str = "--array_size, --array_mib",
) -> SizeCheck:
    """NERSC-10's rule, per array: each array's bytes behind one cache are >= 4x that cache.

    Args:
      array_bytes_per_device: one array's bytes on one device (its shard).
      devices_per_cache: devices whose shards sit behind the same cache (local CPU devices share
        the host's caches; an accelerator has its own).
      cache: the cache to compare with.
      remedy: what sets the size, named where it is too small (the flags of `--mode=stream`).
    """
    array = array_bytes_per_device * devices_per_cache
    if cache.bytes is None:
        return SizeCheck(
            True,
            array,
            cache,
            f"cache size unknown ({cache.source}); the 4x-cache rule is not checked",
        )
    ok = array >= SIZE_FACTOR * cache.bytes
    relation = ">=" if ok else "<"
    message = (
        f"one array {mib_text(array)} MiB {relation} {SIZE_FACTOR} x largest cache "
        f"{cache.bytes / MIB:.1f} MiB ({cache.source})"
    )
    if not ok:
        message += (
            f"; each array behind this cache must be at least "
            f"{SIZE_FACTOR * cache.bytes / MIB:.1f} MiB ({remedy})"
        )
    return SizeCheck(ok, array, cache, message)


def mib_text(nbytes: int) -> str:
    """MiB to one decimal, or to three significant digits below 0.1 MiB (never "0.0")."""
    return f"{nbytes / MIB:,.1f}" if nbytes >= MIB // 10 else f"{nbytes / MIB:.3g}"


# Elements per device when the cache is unknown: BabelStream's default 2^25 over one device.
UNKNOWN_CACHE_ELEMENTS = 1 << 25


def rule_elements_per_device(cache: CacheInfo, itemsize: int, devices_per_cache: int) -> int:
    """The smallest power of two of elements per device whose arrays keep the rule: one array's
    shards behind one cache >= 4x that cache (BabelStream's 2^25 where the cache is unknown)."""
    if cache.bytes is None:
        return UNKNOWN_CACHE_ELEMENTS
    need = -(-SIZE_FACTOR * cache.bytes // (itemsize * devices_per_cache))  # ceiling
    return 1 << max(0, (need - 1).bit_length())
