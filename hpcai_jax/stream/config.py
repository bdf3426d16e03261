"""STREAM's settings (`StreamConfig`, the `stream` part of `settings.Settings`), and its array
size, resolved once the placement (device count, device memory) is known. The checks that need
no device are `StreamConfig.validate()`; `Settings.validate` calls it in stream mode only.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.dtypes import itemsize
from hpcai_jax.errors import UsageError
from hpcai_jax.fields import Checked
from hpcai_jax.fields import field as _field

# BabelStream's default: 2^25 elements per array (256 MiB of doubles, 768 MiB for all three).
DEFAULT_ARRAY_SIZE = 1 << 25
MIB = 1 << 20
PRECISIONS = ("float64", "float32", "bfloat16")
KERNEL_SETS = ("all", "triad", "nstream")
PLACEMENTS = ("one", "all", "each")
_UNSET = "or 0 to leave unset"


@dataclasses.dataclass(frozen=True)
class StreamConfig(Checked):
    """BabelStream-style bandwidth run (docs/design.md §2). At most one size setting is non-zero.

    precision, kernels and devices are string flags, not enums: validate() checks them, and only
    in stream mode, so a flagfile of another mode never trips on them.
    """

    array_size: int | None = _field(
        None,
        "STREAM: elements per array (auto: 2^25 unless a size below is given).",
        ge=1,
        auto=0,
        unit="elements per array",
        note="or auto for the default 2^25",
    )
    array_mib: float = _field(
        0.0, "STREAM: MiB per array.", gt=0, allow=(0,), unit="MiB per array", note=_UNSET
    )
    array_fraction: float = _field(
        0.0,
        "STREAM: fraction of one device's memory for the three arrays.",
        gt=0,
        lt=1,
        allow=(0,),
        unit="of one device's memory for the three arrays",
        note=_UNSET,
    )
    # BabelStream drops the first iteration from the statistics, so it needs two.
    num_times: int = _field(
        100,
        "STREAM: repetitions of each kernel.",
        ge=2,
        note="the first iteration is excluded from the statistics",
    )
    burst: int | None = _field(
        None,
        "STREAM: calls of a kernel back to back per timed sample, one synchronisation at its end "
        "(auto: the platform's).",
        flag="stream_burst",
        ge=1,
        auto=0,
        unit="calls",
        note="or auto for the platform's: 1 on CPUs, 8 on accelerators (docs/stream.md)",
    )
    precision: str = _field(
        "float64", "STREAM: float64, float32 or bfloat16.", choices=PRECISIONS, enum=False
    )
    kernels: str = _field(
        "all",
        "STREAM: all, triad or nstream.",
        flag="stream_kernels",
        choices=KERNEL_SETS,
        enum=False,
    )
    devices: str = _field(
        "one",
        "STREAM: one (first local device), all (sharded over every device) or each (every "
        "device alone, in turn, one figure per device).",
        flag="stream_devices",
        choices=PLACEMENTS,
        enum=False,
    )
    csv: bool = _field(False, "STREAM: print CSV instead of the table.")
    mibibytes: bool = _field(False, "STREAM: report MiB/s instead of MB/s.")
    strict_size: bool = _field(
        False, "STREAM: arrays smaller than 4x the largest cache are an error, not a warning."
    )

    def validate(self) -> None:
        """Checks every STREAM flag; raises UsageError with a one-line message naming it."""
        super().validate()
        given = [
            f"--{name}={value}"
            for name, value in (
                ("array_size", self.array_size),
                ("array_mib", self.array_mib),
                ("array_fraction", self.array_fraction),
            )
            if value
        ]
        _require(
            len(given) <= 1,
            f"{' and '.join(given)}: set at most one of --array_size, "
            "--array_mib, --array_fraction",
        )


# Calls per timed sample under --stream_burst=auto. A JAX call on a GPU costs about 0.1 ms of
# dispatch and synchronisation beyond its kernel: at 1 GiB per array that is 10-20 % of a Copy
# (the first H200 run: 3.4 TB/s per call, 4.1 TB/s back to back, 4.2 TB/s for CuPy's kernel
# timed with CUDA events). Back to back, each dispatch overlaps the previous call's kernel.
# On CPUs a call runs on the dispatching thread's pool, and 1 keeps BabelStream's timing.
DEFAULT_BURST = {"cpu": 1}
ACCELERATOR_BURST = 8


def resolve_burst(config: StreamConfig, platform: str) -> int:
    """Calls per timed sample on `platform` (--stream_burst, or the platform's default)."""
    return config.burst or DEFAULT_BURST.get(platform, ACCELERATOR_BURST)


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
        elements, source, note = _derived_size(config, num_devices, device_memory_bytes, size)
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


def _derived_size(
    config: StreamConfig, num_devices: int, device_memory_bytes: int | None, size: int
) -> tuple[int, str, str]:
    """(elements, source, note) of a size given in MiB or as a fraction of device memory:
    rounded down to a multiple of the device count, the rounding said in the note."""
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
    return elements, source, note


def _flag_of(config: StreamConfig, source: str) -> str:
    if source == "default":
        return "default array size 2^25"
    return f"--{source}={getattr(config, source)}"


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)
