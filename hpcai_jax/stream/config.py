"""STREAM's settings (`StreamConfig`, the `stream` part of `settings.Settings`), and its array
size, resolved once the placement (device count, cache, free memory) is known. The checks that
need no device are `StreamConfig.validate()`; `Settings.validate` calls it in stream mode only.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.dtypes import itemsize
from hpcai_jax.errors import UsageError
from hpcai_jax.fields import Checked
from hpcai_jax.fields import setting as _field
from hpcai_jax.stream import expect

MIB = 1 << 20
PRECISIONS = ("float64", "float32", "bfloat16")
KERNEL_SETS = ("all", "triad", "nstream")
PLACEMENTS = ("one", "all", "each")
RULE_SETS = ("nersc10", "uknss", "jupiter")  # stream/rules.py, docs/stream.md (Rule sets)
OUTPUT_FORMATS = ("text", "csv", "json")
_UNSET = "or 0 to leave unset"


@dataclasses.dataclass(frozen=True)
class StreamConfig(Checked):
    """BabelStream-style bandwidth run (docs/design.md §2). At most one size setting is non-zero.

    precision, kernels and devices are string flags, not enums: validate() checks them, and only
    in stream mode, so a flagfile of another mode never trips on them.
    """

    array_size: int | None = _field(
        None,
        "STREAM: elements per array (auto: the smallest power of two whose one array is at "
        "least 4x the largest cache in front of the device, NERSC-10's rule; 2^25 where the "
        "cache is unknown).",
        ge=1,
        auto=0,
        unit="elements per array",
        note="or auto for the rule's size",
    )
    array_mib: float = _field(
        0.0,
        "STREAM: MiB per array (0: not set; with none of --array_size, --array_mib and "
        "--array_fraction set, the size is automatic: --array_size's rule).",
        gt=0,
        allow=(0,),
        unit="MiB per array",
        note=_UNSET,
    )
    array_fraction: float = _field(
        0.0,
        "STREAM: fraction of one device's memory for the three arrays (0: not set; the size "
        "is then --array_size's or --array_mib's, else automatic).",
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
    allow_small_arrays: bool = _field(
        False,
        "STREAM: measure a size given by hand although one array is smaller than 4x the largest "
        "cache; the record's status says small_arrays, and every report marks it.",
    )
    rules: str = _field(
        "nersc10",
        "STREAM: the centre's rules the run is judged by: nersc10 (arrays >= 4x the largest "
        "cache, Triad the figure of merit), uknss (every device alone, >= 100 iterations, "
        "max - min <= 5 % of the mean) or jupiter (every device alone, 2^28 elements, Triad's "
        "average in MiB/s); docs/stream.md, Rule sets.",
        flag="stream_rules",
        choices=RULE_SETS,
        enum=False,
    )
    expect: str = _field(
        "",
        "STREAM: the least bandwidth each device must reach, a comma list of KERNEL:VALUEUNIT "
        "(e.g. triad:3885301MB/s; units MB/s, GB/s, TB/s, MiB/s, GiB/s); a device below it "
        "FAILs and the run exits 3 after writing everything.",
    )
    outlier_fraction: float = _field(
        0.9,
        "STREAM: a device below this fraction of the median of the devices measured alone is "
        "named as an outlier.",
        flag="stream_outlier_fraction",
        gt=0,
        le=1,
    )
    scan: bool = _field(
        False,
        "STREAM: also measure every power of two from 2^15 elements up to the largest the free "
        "memory holds, on this process's first device alone (JUPITER's size scan): a table, a "
        "record section and a plot.",
        flag="stream_scan",
    )
    output_format: str = _field(
        "text",
        "STREAM: stdout as text (BabelStream's), csv (BabelStream's columns, node and device "
        "in front) or json (one object); docs/stream.md, Machine-readable output.",
        choices=OUTPUT_FORMATS,
        enum=False,
    )
    strict_size: bool = _field(
        False,
        "STREAM: deprecated, goes in the next release: the 4x-cache rule is an error by default "
        "now (--allow_small_arrays lifts it).",
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
        _require(
            bool(given) or not self.allow_small_arrays,
            "--allow_small_arrays: needs a size given by hand (--array_size, --array_mib or "
            "--array_fraction); --array_size=auto always keeps the 4x-cache rule",
        )
        self._validate_acceptance()

    def _validate_acceptance(self) -> None:
        """The rule set's own bounds, the expectations' form, and one output format."""
        _require(
            self.rules != "uknss" or self.num_times >= 100,
            f"--num_times={self.num_times}: --stream_rules=uknss asks for at least 100 iterations",
        )
        _require(
            not (self.csv and self.output_format == "json"),
            "--csv: prints CSV, --output_format=json asks for JSON; give one of them",
        )
        for e in expect.parse(self.expect):
            from hpcai_jax.stream.kernels import RUN_ORDERS  # jax, imported in stream mode only

            _require(
                e.kernel in RUN_ORDERS[self.kernels],
                f"--expect={self.expect}: {e.kernel} does not run under "
                f"--stream_kernels={self.kernels} ({', '.join(RUN_ORDERS[self.kernels])})",
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


def resolve_array_size(config: StreamConfig, room: Room) -> ArraySize:
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
    if config.array_size:
        elements, source, note = config.array_size, "array_size", ""
        _require(
            elements % n == 0,
            f"--array_size={elements}: not divisible across {n} devices "
            f"(--stream_devices={config.devices}); use a multiple of {n}",
        )
    elif config.array_mib or config.array_fraction:
        elements, source, note = _derived_size(config, n, room.device_memory_bytes, size)
    else:
        elements, source = room.rule_elements_per_device * n, "rule"
        note = f"--array_size=auto: {_pow2(elements)} {config.precision} elements: {room.rule_why}"
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


def _flag_of(config: StreamConfig, source: str, elements: int) -> str:
    if source == "rule":
        return f"--array_size=auto ({_pow2(elements)} elements, the 4x-cache rule's size)"
    return f"--{source}={getattr(config, source)}"


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)
