"""STREAM's array size, resolved once the placement (device count, device memory) is known. The
flag checks that need no device are `config.StreamConfig.validate()`.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.config import StreamConfig
from hpcai_jax.dtypes import itemsize
from hpcai_jax.errors import UsageError

# BabelStream's default: 2^25 elements per array (256 MiB of doubles, 768 MiB for all three).
DEFAULT_ARRAY_SIZE = 1 << 25
MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ArraySize:
    """Elements per (global) array, and which setting chose them."""

    elements: int
    source: str  # "default", "array_size", "array_mib" or "array_fraction"
    note: str = ""  # e.g. how a derived size was rounded


def resolve_array_size(
    config: StreamConfig, num_devices: int, device_memory_bytes: int | None
) -> ArraySize:
    """Elements per array for `num_devices` devices that each hold an equal shard.

    An explicit --array_size must divide evenly over the devices; sizes derived from MiB or a
    memory fraction are rounded down to a multiple of the device count (and reported).

    Args:
      config: validated STREAM settings.
      num_devices: devices the arrays are sharded over (1 for --stream_devices=one).
      device_memory_bytes: memory of one device, or None when the backend does not say.

    Raises:
      UsageError: the size is not divisible, too small, or does not fit in device memory.
    """
    size = itemsize(config.precision)
    if config.array_size:
        elements, source, note = config.array_size, "array_size", ""
        _require(
            elements % num_devices == 0,
            f"--array_size={elements}: not divisible across {num_devices} devices "
            f"(--stream_devices={config.devices}); use a multiple of {num_devices}",
        )
    elif config.array_mib or config.array_fraction:
        if config.array_mib:
            exact = config.array_mib * MIB / size
            source, flag = "array_mib", f"--array_mib={config.array_mib}"
        else:
            _require(
                device_memory_bytes is not None,
                f"--array_fraction={config.array_fraction}: "
                "this backend does not report its device memory; use --array_size or --array_mib",
            )
            # The fraction is of one device's memory for its shards of all three arrays.
            exact = config.array_fraction * device_memory_bytes * num_devices / (3 * size)
            source, flag = "array_fraction", f"--array_fraction={config.array_fraction}"
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
    else:
        elements, source, note = DEFAULT_ARRAY_SIZE, "default", ""
        _require(
            elements % num_devices == 0,
            f"default array size 2^25 is not divisible across {num_devices} devices; "
            "set --array_size to a multiple of the device count",
        )
    if device_memory_bytes is not None:
        need = 3 * elements // num_devices * size
        _require(
            need <= device_memory_bytes,
            f"{_flag_of(config, source)}: three arrays need {need / MIB:.1f} MiB per device, "
            f"more than its {device_memory_bytes / MIB:.1f} MiB of memory",
        )
    return ArraySize(elements=elements, source=source, note=note)


def _flag_of(config: StreamConfig, source: str) -> str:
    if source == "default":
        return "default array size 2^25"
    return f"--{source}={getattr(config, source)}"


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)
