"""STREAM's settings (`StreamConfig`, the `stream` part of `settings.Settings`) and the calls
per timed sample they give a platform. The checks that need no device are
`StreamConfig.validate()`; `Settings.validate` calls it in stream mode only. The arrays' size,
resolved once the placement (device count, cache, free memory) is known, is `sizing.py`'s.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.errors import UsageError
from hpcai_jax.fields import Checked
from hpcai_jax.fields import setting as _field
from hpcai_jax.stream import expect

# The arrays' size is sizing.py's; named here too for the modules and tests that import it so.
from hpcai_jax.stream.sizing import MIB, ArraySize, Room, given_sizes, resolve_array_size  # noqa: F401

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
        given = [flag for _, flag in given_sizes(self)]
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


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)
