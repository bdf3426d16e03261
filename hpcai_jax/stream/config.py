"""STREAM settings: the flag checks that need no device, and the array size that needs one.

`validate_stream_config` runs inside `RunConfig.validate()` (no JAX device touched); the size
in elements is resolved later, once the placement (device count, device memory) is known.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcai_jax.config import StreamConfig
from hpcai_jax.errors import UsageError

PRECISIONS = ("float64", "float32", "bfloat16")
KERNEL_SETS = ("all", "triad", "nstream")
PLACEMENTS = ("one", "all")

# BabelStream's default: 2^25 elements per array (256 MiB of doubles, 768 MiB for all three).
DEFAULT_ARRAY_SIZE = 1 << 25
MIB = 1 << 20


def itemsize(precision: str) -> int:
    return {"float64": 8, "float32": 4, "bfloat16": 2}[precision]


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def validate_stream_config(config: StreamConfig) -> None:
    """Checks every STREAM flag on its own; raises UsageError with a one-line message naming it."""
    _require(config.precision in PRECISIONS,
             f"--precision={config.precision!r}: expected one of {', '.join(PRECISIONS)}")
    _require(config.kernels in KERNEL_SETS,
             f"--stream_kernels={config.kernels!r}: expected one of {', '.join(KERNEL_SETS)}")
    _require(config.devices in PLACEMENTS,
             f"--stream_devices={config.devices!r}: expected one of {', '.join(PLACEMENTS)}")
    # BabelStream drops the first iteration from the statistics, so it needs two.
    _require(config.num_times >= 2, f"--num_times={config.num_times}: expected >= 2 (the first "
             "iteration is excluded from the statistics)")
    _require(config.array_size >= 0, f"--array_size={config.array_size}: expected >= 1 elements "
             f"per array (or 0 for the default 2^25)")
    _require(config.array_mib >= 0, f"--array_mib={config.array_mib}: expected > 0 MiB per array "
             "(or 0 to leave unset)")
    _require(0 <= config.array_fraction < 1, f"--array_fraction={config.array_fraction}: expected "
             "a fraction of device memory in (0, 1) for the three arrays (or 0 to leave unset)")
    given = [f"--{name}={value}" for name, value in (
        ("array_size", config.array_size), ("array_mib", config.array_mib),
        ("array_fraction", config.array_fraction)) if value]
    _require(len(given) <= 1, f"{' and '.join(given)}: set at most one of --array_size, "
             "--array_mib, --array_fraction")


@dataclasses.dataclass(frozen=True)
class ArraySize:
    """Elements per (global) array, and which setting chose them."""

    elements: int
    source: str  # "default", "array_size", "array_mib" or "array_fraction"
    note: str = ""  # e.g. how a derived size was rounded


def resolve_array_size(config: StreamConfig, num_devices: int,
                       device_memory_bytes: int | None) -> ArraySize:
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
        _require(elements % num_devices == 0,
                 f"--array_size={elements}: not divisible across {num_devices} devices "
                 f"(--stream_devices={config.devices}); use a multiple of {num_devices}")
    elif config.array_mib or config.array_fraction:
        if config.array_mib:
            exact = config.array_mib * MIB / size
            source, flag = "array_mib", f"--array_mib={config.array_mib}"
        else:
            _require(device_memory_bytes is not None, f"--array_fraction={config.array_fraction}: "
                     "this backend does not report its device memory; use --array_size or --array_mib")
            # The fraction is of one device's memory for its shards of all three arrays.
            exact = config.array_fraction * device_memory_bytes * num_devices / (3 * size)
            source, flag = "array_fraction", f"--array_fraction={config.array_fraction}"
        elements = int(exact) // num_devices * num_devices
        _require(elements >= num_devices,
                 f"{flag}: gives {int(exact)} elements per array, fewer than the {num_devices} devices")
        note = (f"{flag} gives {exact:.1f} elements per array; rounded down to {elements}, a "
                f"multiple of {num_devices} devices" if elements != exact else "")
    else:
        elements, source, note = DEFAULT_ARRAY_SIZE, "default", ""
        _require(elements % num_devices == 0,
                 f"default array size 2^25 is not divisible across {num_devices} devices; "
                 "set --array_size to a multiple of the device count")
    if device_memory_bytes is not None:
        need = 3 * elements // num_devices * size
        _require(need <= device_memory_bytes,
                 f"{_flag_of(config, source)}: three arrays need {need / MIB:.1f} MiB per device, "
                 f"more than its {device_memory_bytes / MIB:.1f} MiB of memory")
    return ArraySize(elements=elements, source=source, note=note)


def _flag_of(config: StreamConfig, source: str) -> str:
    if source == "default":
        return "default array size 2^25"
    return f"--{source}={getattr(config, source)}"


def bytes_per_array(elements: int, precision: str) -> int:
    return elements * itemsize(precision)


def jnp_dtype(precision: str) -> np.dtype:
    """The array dtype (bfloat16 comes from ml_dtypes, which JAX installs)."""
    import jax.numpy as jnp

    return np.dtype(getattr(jnp, precision))
