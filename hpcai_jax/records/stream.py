"""The STREAM record (`--mode=stream`); `stream/record.py` builds it from `stream/report.py`'s
figures. docs/stream.md explains the figures, docs/record.md lists the fields."""

from __future__ import annotations

from hpcai_jax.records.envelope import Record
from hpcai_jax.records.fields import field
from hpcai_jax.records.schema import section


@section
class StreamArray:
    elements: int = field("elements of each of the three arrays")
    precision: str = field("their dtype: float64, float32 or bfloat16")
    itemsize: int = field("bytes of one element", "B")
    bytes_per_array: int = field("elements × itemsize", "B")
    bytes_total: int = field("the three arrays", "B")
    size_source: str = field("which flag or rule set the size")
    size_note: str = field("what the size rule had to say, or empty")


@section
class Placement:
    mode: str = field("`--stream_devices`: one, all or each")
    num_devices: int = field("devices the arrays span", "devices")
    devices: list[str] = field("those devices, as JAX names them")
    device_kind: str = field("their kind")
    platform: str = field("their platform")
    process_count: int = field("JAX processes of the job", "processes")


@section
class Cache:
    bytes: int | None = field("the largest cache behind the arrays", "B")
    source: str = field("where its size was read")
    scope: str = field("what it serves: a device or the host")
    arrays_bytes_per_cache: int = field("the three arrays' bytes behind one such cache", "B")
    size_rule_ok: bool = field(
        "each array is at least 4 × that cache, as NERSC-10's rules ask (records before "
        "`array_bytes_per_cache` compared the three arrays together)"
    )
    message: str = field("the size rule's verdict in words")
    array_bytes_per_cache: int | None = field(
        "one array's bytes behind one such cache, what the rule compares; absent in older records",
        "B",
        omit_none=True,
    )


@section
class StreamRun:
    babelstream_version: str = field("the BabelStream output format followed")
    implementation: str = field("JAX's version and the device, as BabelStream's header shows")
    kernels: str = field("`--stream_kernels`: all, or the one kernel run")
    order: list[str] = field("the kernels in the order they ran")
    num_times: int = field("samples of each kernel (the first is excluded from the figures)")
    burst: int = field("calls back to back per sample, one synchronisation at its end", "calls")
    timing: str = field("how calls were timed")


@section
class ArrayLayout:
    spaced: bool = field(
        "a spacer of one array's size was allocated between every two arrays (CPUs, where "
        "five arrays fit free memory; docs/stream.md, Arrays set apart)"
    )
    min_gap_bytes: int | None = field(
        "the fewest bytes between the end of one array and the start of the next on one "
        "device, in this process (`--stream_devices=each`: its first device); None: unknown",
        "B",
    )
    note: str = field("why the arrays were not spaced, or what could not be read; else empty")


@section
class StreamTiming:
    compile_s: float = field("compiling the kernels", "s")
    init_s: float = field("initialising the arrays on the devices", "s")


@section
class Kernel:
    label: str = field("BabelStream's name: Copy, Mul, Add, Triad, Dot, Nstream")
    bytes_moved: int = field("bytes one call reads and writes, all devices", "B")
    arrays_moved: int = field("arrays one call reads and writes")
    gb_per_s: float = field(
        "bytes_moved / the fastest call, the first call excluded (docs/stream.md)", "GB/s"
    )
    gb_per_s_per_device: float = field("gb_per_s / the devices the arrays span", "GB/s")
    min_s: float = field("the fastest call", "s")
    max_s: float = field("the slowest call", "s")
    avg_s: float = field("the mean call", "s")
    xla_bytes_accessed: float | None = field(
        "XLA's bytes accessed of the compiled kernel, all devices (a cross-check)", "B"
    )


@section
class FigureOfMerit:
    kernel: str = field("the kernel of merit: triad, or nstream when it runs alone")
    gb_per_s: float = field("its bandwidth", "GB/s")


@section
class Allocation:
    donated: str | None = field("the array the kernel writes into, donated to XLA; None for Dot")
    output_bytes: int | None = field("the compiled kernel's output", "B")
    alias_bytes: int | None = field("output bytes aliased to the donated array", "B")
    temp_bytes: int | None = field("its temporaries", "B")
    buffer_reused: bool | None = field("the output reused the donated buffer across calls")
    note: str = field("what could not be read, or empty")


@section
class ValidationCheck:
    error: float | None = field("the array's mean |x − gold| (relative where `relative`)")
    tolerance: float = field("the largest error that passes")
    relative: bool = field("whether error is relative to the gold value")
    passed: bool = field("error ≤ tolerance")
    basis: str | None = field(
        "where the tolerance comes from (Dot: BabelStream's figure or the sum's error bound)",
        omit_none=True,
    )


@section
class Gold:
    a: float = field("the value every element of a should hold after the run")
    b: float = field("the same of b")
    c: float = field("the same of c")
    dot: float | None = field("Dot's expected result; None when Dot did not run")
    rounding: str = field("how the gold values were rounded: per operation, like the kernels")


@section
class Validation:
    passed: bool = field("every array (and Dot) within its tolerance, on every device measured")
    gold: Gold = field("the expected values, computed on the host as BabelStream does")
    checks: dict[str, ValidationCheck] = field("array or dot → its check")
    devices_failed: list[int] | None = field(
        "devices whose validation failed (`--stream_devices=each` only)", omit_none=True
    )


@section
class DeviceRun:
    device_id: int = field("the device's id, unique in the job")
    process_index: int = field("the process it belongs to")
    validation_passed: bool = field("its validation")
    kernels: dict[str, Kernel] = field("kernel → its figures, measured with the device alone")


@section
class Clause:
    clause: str = field("the clause's short name, e.g. iterations, spread, size")
    text: str = field("what was measured against what the rule asks, in words")
    passed: bool | None = field("the verdict; None where the clause asks for a figure reported")
    waived: bool = field("a FAIL the user allowed by hand (--allow_small_arrays)")


@section
class RuleVerdict:
    rules: str = field("`--stream_rules`: nersc10, uknss or jupiter")
    document: str = field("the centre's document the rule set follows")
    clauses: list[Clause] = field("each clause of the rule set, judged on this run")
    passed: bool = field("no clause FAILed (a waived one aside)")


@section
class DeviceFigure:
    node: str = field("the device's node (`provenance.hosts` of its process)")
    process_index: int = field("its process")
    device_label: str = field("its id, or `all` where the arrays span every device")
    gb_per_s: float = field("its bandwidth for the kernel (per device where sharded)", "GB/s")


@section
class KernelAcross:
    label: str = field("BabelStream's name of the kernel")
    devices: int = field("devices compared", "devices")
    min_gb_per_s: float = field("the slowest device's bandwidth", "GB/s")
    mean_gb_per_s: float = field("the devices' mean", "GB/s")
    median_gb_per_s: float = field("the devices' median", "GB/s")
    max_gb_per_s: float = field("the fastest device's", "GB/s")
    slowest: DeviceFigure = field("the slowest device")


@section
class Outlier:
    kernel: str = field("the kernel key")
    label: str = field("BabelStream's name of the kernel")
    figure: DeviceFigure = field("the device below the fraction of its peers' median")
    fraction_of_median: float = field("its bandwidth over the median's")


@section
class ExpectationCheck:
    kernel: str = field("the kernel key")
    label: str = field("BabelStream's name of the kernel")
    given: str = field("the expectation as given, e.g. triad:3885301MB/s")
    unit: str = field("its unit: MB/s, GB/s, TB/s, MiB/s or GiB/s")
    bytes_per_s: float = field("the least bandwidth it asks of each device", "B/s")
    figure: DeviceFigure = field("the device judged, with its figure")
    passed: bool = field("the device's bandwidth ≥ the expectation")


@section
class Acceptance:
    rules: RuleVerdict = field("`--stream_rules`' verdict per clause (docs/stream.md, Rule sets)")
    binary_units: bool = field("the lines print MiBytes/sec (`--mibibytes`)")
    outlier_fraction: float = field(
        "`--stream_outlier_fraction`: a device below this fraction of its peers' median is named"
    )
    across: dict[str, KernelAcross] = field(
        "kernel key → min, mean, median and max over the devices measured alone; empty with one"
    )
    nodes: dict[str, dict[str, KernelAcross]] = field(
        "node → kernel key → the same over that node's devices; empty on one node"
    )
    outliers: list[Outlier] = field("devices below the fraction, per kernel")
    expectations: list[ExpectationCheck] = field("`--expect`, judged per device")
    passed: bool = field("the rule set and every expectation passed: else the run exits 3")


@section
class ScanPoint:
    elements: int = field("elements of each array on the device")
    bytes_per_array: int = field("elements × itemsize", "B")
    kernels: dict[str, Kernel] = field("kernel → its figures at this size")


@section
class StreamScan:
    device_name: str = field("the device scanned: this process's first, alone")
    free_bytes: int = field(
        "what the device's three arrays could take, read before allocating", "B"
    )
    free_source: str = field("where that figure comes from")
    points: list[ScanPoint] = field(
        "every power of two of elements from 2^15 up to the largest the free memory holds"
    )
    plot: str | None = field("the plot of bandwidth against size, beside the record; None if none")


@section
class StreamRecord(Record):
    array: StreamArray = field("the three arrays")
    placement: Placement = field("the devices the arrays span")
    cache: Cache = field("the cache-size rule (arrays ≥ 4 × the largest cache)")
    run: StreamRun = field("what ran and how it was timed")
    timing: StreamTiming = field("set-up time, outside the figures")
    kernels: dict[str, Kernel] = field(
        "kernel key (copy, mul, add, triad, dot, nstream) → its figures; with "
        "`--stream_devices=each` the slowest device's"
    )
    figure_of_merit: FigureOfMerit = field("BabelStream's closing line")
    allocation: dict[str, Allocation] = field("kernel key → what its compiled call allocates")
    byte_weight_mismatches: list[str] = field(
        "kernels whose BabelStream byte count disagrees with XLA's bytes accessed"
    )
    validation: Validation = field("the arrays checked against the gold values")
    per_process_gb_per_s: list[dict[str, float]] | None = field(
        "per process, kernel key → its own device's bandwidth (`--stream_devices=one` on several "
        "processes); None otherwise",
        "GB/s",
    )
    per_device: list[DeviceRun] | None = field(
        "every device measured alone (`--stream_devices=each`); None otherwise"
    )
    metrics: dict[str, float | bool] = field(
        "the same figures flat, keyed stream/KERNEL/gb_per_s, gb_per_s_per_device, min_s, max_s "
        "and avg_s, plus the figure of merit and validation.passed"
    )
    printed: str | None = field(
        "what process 0 printed on stdout, verbatim: BabelStream's header, the table and (unless "
        "--csv) the figure-of-merit line, as NERSC-10's rules ask; absent in older records",
        omit_none=True,
    )
    acceptance: Acceptance | None = field(
        "the rule set's verdict, the devices compared, the outliers and the expectations "
        "(docs/stream.md, Acceptance); absent in older records",
        omit_none=True,
    )
    layout: ArrayLayout | None = field(
        "where the three arrays sat in memory (docs/stream.md, Arrays set apart); absent in "
        "older records",
        omit_none=True,
    )
    scan: StreamScan | None = field(
        "`--stream_scan`: bandwidth against array size on one device (docs/stream.md, Size "
        "scan); absent without it",
        omit_none=True,
    )
