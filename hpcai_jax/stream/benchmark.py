"""The STREAM run, as BabelStream's main.cpp reads: size, place, init, run, check, report.

`measure_bandwidth` measures and validates one placement (tests and benchmarks call it);
`measure_each` does so for every local device in turn (--stream_devices=each); `run_stream` is
what `python -m hpcai_jax.main --mode=stream` runs, three steps on one measured value: measure
(`measure_stream`), record (`stream_record`, the JSON record) and render (`render_stream`,
BabelStream's output, printed on process 0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Mapping

import jax
import numpy as np
from absl import logging

from hpcai_jax import results
from hpcai_jax.distributed import allgather
from hpcai_jax.dtypes import dtype as jnp_dtype
from hpcai_jax.dtypes import itemsize
from hpcai_jax.errors import UsageError
from hpcai_jax.records import stream as stream_records
from hpcai_jax.records import write as record_write
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.settings import Settings
from hpcai_jax.stream import acceptance, report, rules, scan
from hpcai_jax.stream.cache import (
    SIZE_FACTOR,
    SizeCheck,
    check_size,
    largest_cache,
    mib_text,
    rule_elements_per_device,
)
from hpcai_jax.stream.config import (
    ArraySize,
    Room,
    StreamConfig,
    resolve_array_size,
    resolve_burst,
)
from hpcai_jax.stream.kernels import (
    DOT_EXTRA_BYTES,
    KERNELS,
    RUN_ORDERS,
    CompiledKernel,
    KernelSpec,
    compile_kernel,
    init_arrays,
)
from hpcai_jax.stream.placement import (
    Placement,
    device_memory_bytes,
    devices_per_cache,
    hardware_name,
    make_placement,
    make_placements,
    mem_available_bytes,
)
from hpcai_jax.stream.runner import run_kernels
from hpcai_jax.stream.sync import call_barrier
from hpcai_jax.stream.validate import Validation, validate

BELOW_RULE = report.BELOW_RULE


@dataclasses.dataclass(frozen=True)
class StreamResult:
    config: StreamConfig
    size: ArraySize
    itemsize: int
    placement: Placement
    size_check: SizeCheck
    kernels: tuple[CompiledKernel, ...]
    figures: list[report.KernelFigures]
    times_s: dict[str, np.ndarray]  # raw per-call seconds, first iteration included
    buffer_reused: dict[str, bool | None]
    validation: Validation
    compile_s: float
    init_s: float
    burst: int = 1  # calls per timed sample (runner.py)

    @property
    def elements(self) -> int:
        return self.size.elements

    def byte_weight_mismatches(self) -> list[str]:
        """Kernels whose BabelStream byte count disagrees with XLA's "bytes accessed" by more
        than Dot's partial sums per device (`DOT_EXTRA_BYTES`); the others must match exactly."""
        out = []
        for k in self.kernels:
            xla = k.cost.bytes_accessed
            expected = k.spec.arrays_moved * self.elements * self.itemsize
            slack = DOT_EXTRA_BYTES * self.placement.num_devices if k.spec.writes is None else 0
            if xla is not None and abs(xla - expected) > slack:
                out.append(f"{k.spec.name}: BabelStream counts {expected} bytes, XLA {xla:.0f}")
        return out

    def allocation_problems(self) -> list[str]:
        """Kernels that may allocate per call: output not aliased to the donated buffer."""
        out = []
        for k in self.kernels:
            if k.spec.writes is None:
                continue
            if k.allocation.aliased is False or (k.allocation.temp_bytes or 0) > 0:
                out.append(
                    f"{k.spec.name}: XLA aliases {k.allocation.alias_bytes} of "
                    f"{k.allocation.output_bytes} output bytes, temp {k.allocation.temp_bytes}"
                )
            if self.buffer_reused.get(k.spec.key) is False:
                out.append(f"{k.spec.name}: output landed in a new buffer, not the donated one")
        return out


def _x64(precision: str):
    """float64 needs JAX's x64 mode; it is switched on for this run only, not process-wide."""
    return jax.enable_x64(True) if precision == "float64" else contextlib.nullcontext()


def measure_bandwidth(
    config: StreamConfig,
    kernel_specs: Mapping[str, KernelSpec] | None = None,
    placement: Placement | None = None,
    remedy: str = "--array_size, --array_mib",
    warn: bool = True,
) -> StreamResult:
    """Sizes, places, compiles, runs and validates one STREAM run; prints nothing.

    Args:
      config: validated STREAM settings.
      kernel_specs: the kernels by key (default: `KERNELS`); tests substitute a wrong one to
        see validation fail.
      placement: where to run (default: `config.devices`, which must then be one or all).
      remedy: what the warning for arrays smaller than 4x the cache tells the user to change.
      warn: log that warning; False where the caller reports `size_check` itself (a training
        run's roofline, whose summary states it, rather than a warning on every run).

    Raises:
      UsageError: a size that does not fit the devices or their free memory, or (without
        allow_small_arrays) one array smaller than 4x the largest cache.
    """
    with _x64(config.precision):
        placement = make_placement(config.devices) if placement is None else placement
        size, size_check = _sized(config, placement, remedy, warn)
        nbytes = itemsize(config.precision)
        dtype = jnp_dtype(config.precision)
        kernel_specs = KERNELS if kernel_specs is None else kernel_specs
        kernels, barrier, compile_s = _compiled(
            config, kernel_specs, placement, size.elements, dtype
        )
        run, validation, init_s, burst = _run_and_validate(
            config, placement, kernels, barrier, size.elements, dtype
        )
    figures = [
        report.kernel_figures(
            k.spec.key,
            run.times_s[k.spec.key],
            size.elements,
            nbytes,
            placement.num_devices,
            k.cost.bytes_accessed,
        )
        for k in kernels
    ]
    return StreamResult(
        config=config,
        size=size,
        itemsize=nbytes,
        placement=placement,
        size_check=size_check,
        kernels=kernels,
        figures=figures,
        times_s=run.times_s,
        buffer_reused=run.buffer_reused,
        validation=validation,
        compile_s=compile_s,
        init_s=init_s,
        burst=burst,
    )


def _sized(
    config: StreamConfig, placement: Placement, remedy: str, warn: bool = True
) -> tuple[ArraySize, SizeCheck]:
    """The arrays' size on `placement` (auto: the rule's), checked against free memory, and
    whether each array passes the 4x-cache rule: an error where it does not, unless
    --allow_small_arrays (then a warning, and the record says small_arrays)."""
    if config.strict_size:
        logging.warning(
            "STREAM: --strict_size is deprecated and goes in the next release: the 4x-cache "
            "rule is an error by default now"
        )
    size = resolve_array_size(config, _room(config, placement))
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
                f"{_size_flag(config)}: {size_check.message}; or give --allow_small_arrays to "
                "measure it anyway, marked as breaking the rule"
            )
        if warn:
            logging.warning(
                "STREAM: arrays too small, this measures a cache: %s", size_check.message
            )
    return size, size_check


def _size_flag(config: StreamConfig) -> str:
    for name in ("array_size", "array_mib", "array_fraction"):
        if value := getattr(config, name):
            return f"--{name}={value}"
    return "--array_size=auto"


def _room(config: StreamConfig, placement: Placement) -> Room:
    """The rule's size and the free memory of `placement`. CPU devices share the host's caches
    and its MemAvailable; an accelerator has its own cache and its allocator's limit. Every
    process takes the largest rule size of all (hosts may differ), so that all agree."""
    nbytes = itemsize(config.precision)
    sharing = devices_per_cache(placement)
    cache = largest_cache(placement.platform, placement.device_kind)
    per_device = rule_elements_per_device(cache, nbytes, sharing)
    if not (config.array_size or config.array_mib or config.array_fraction):
        per_device = int(allgather(np.asarray([per_device], np.int64)).max())
    why = (
        f"the smallest power of two with one array >= {SIZE_FACTOR} x the largest cache, "
        f"{mib_text(cache.bytes)} MiB ({cache.source}), over {sharing} device(s) sharing it"
        if cache.bytes is not None
        else f"BabelStream's default per device; {cache.source}"
    )
    device = placement.devices[0]
    memory = device_memory_bytes(device)
    if placement.platform == "cpu":
        available = mem_available_bytes()
        free = None if available is None else available // sharing
        source = f"the host's MemAvailable over {sharing} local CPU device(s)"
    else:
        free, source = memory, f"{placement.device_kind}'s memory limit"
    return Room(placement.num_devices, memory, per_device, why, free, source)


def _compiled(config: StreamConfig, kernel_specs, placement, elements: int, dtype):
    """The run order's kernels compiled for `placement` and the barrier that starts each call;
    (kernels, barrier, the seconds both took)."""
    start = time.perf_counter()
    kernels = tuple(
        compile_kernel(kernel_specs[key], placement, elements, dtype)
        for key in RUN_ORDERS[config.kernels]
    )
    barrier = call_barrier(placement)
    return kernels, barrier, time.perf_counter() - start


def _run_and_validate(config: StreamConfig, placement, kernels, barrier, elements: int, dtype):
    """Initialises the arrays, runs the compiled kernels num_times and checks the arrays they
    leave against the gold values; (the run, its validation, init seconds, the burst)."""
    start = time.perf_counter()
    arrays = init_arrays(placement, elements, dtype)
    jax.block_until_ready(arrays)
    init_s = time.perf_counter() - start
    burst = resolve_burst(config, placement.platform)
    run = run_kernels(kernels, arrays, config.num_times, barrier, burst)
    del arrays
    # Nstream is the one kernel a burst applies more than once (runner.py).
    replays = config.num_times * (burst if config.kernels == "nstream" else 1)
    validation = validate(
        run.arrays, run.dot_sum, config.kernels, replays, config.precision, placement
    )
    return run, validation, init_s, burst


def measure_each(
    config: StreamConfig, kernel_specs: Mapping[str, KernelSpec] | None = None
) -> list[StreamResult]:
    """--stream_devices=each: every local device measured alone, one after the other, each with
    arrays of the full size (as BabelStream run once per device)."""
    return [measure_bandwidth(config, kernel_specs, p) for p in make_placements("each")]


def gather_each(results: list[StreamResult]) -> list[report.DeviceFigures]:
    """Every process's per-device figures, in process order (a collective: every process calls
    it, with the same number of local devices)."""
    local = np.array(
        [
            [r.placement.devices[0].id, jax.process_index(), r.validation.passed]
            + [t for f in r.figures for t in (f.min_s, f.max_s, f.avg_s)]
            for r in results
        ]
    )
    # float32 keeps the all-gather free of x64 concerns; 1e-7 relative is far below timer noise.
    rows = allgather(local.astype(np.float32)).reshape(-1, local.shape[1])
    template = results[0].figures  # sizes and kernels are the same on every device
    return [
        report.DeviceFigures(
            device_id=int(row[0]),
            process_index=int(row[1]),
            passed=bool(row[2]),
            figures=[
                dataclasses.replace(
                    f,
                    min_s=float(row[3 + 3 * i]),
                    max_s=float(row[4 + 3 * i]),
                    avg_s=float(row[5 + 3 * i]),
                )
                for i, f in enumerate(template)
            ],
        )
        for row in rows
    ]


def implementation_label(placement: Placement) -> str:
    return f"JAX {jax.__version__} ({placement.platform}: {hardware_name(placement)})"


@dataclasses.dataclass(frozen=True)
class StreamMeasurement:
    """What `--mode=stream` measured on this process, and what it gathered from the others."""

    local: tuple[StreamResult, ...]  # this process's runs: one, or one per local device (each)
    devices: list[report.DeviceFigures] | None  # every process's devices (each); else None
    per_process: list[dict[str, float]] | None  # every process's best rates (one); else None

    @property
    def result(self) -> StreamResult:
        """This process's first run: sizes, programs and allocation proofs are the same on every
        device."""
        return self.local[0]

    @property
    def passed(self) -> bool:
        if self.devices is None:
            return self.local[0].validation.passed
        return all(d.passed for d in self.devices)


@dataclasses.dataclass(frozen=True)
class StreamText:
    """What process 0 prints: BabelStream's report (stdout), the validation failures (stderr),
    and the figure of merit, last (on stderr under --csv, so that stdout stays CSV)."""

    report: str
    failures: tuple[str, ...]
    figure_of_merit: str
    merit_to_stderr: bool

    @property
    def stdout(self) -> str:
        """Everything printed on stdout, as printed (the record keeps it)."""
        lines = [self.report] + ([] if self.merit_to_stderr else [self.figure_of_merit])
        return "\n".join(lines) + "\n"


def measure_stream(config: StreamConfig) -> StreamMeasurement:
    """Measures as --stream_devices asks and gathers the figures every process needs (a
    collective with several processes); prints nothing."""
    if config.devices == "each":
        local = tuple(measure_each(config))
        return StreamMeasurement(local, gather_each(list(local)), None)
    result = measure_bandwidth(config)
    per_process = _per_process_best(result) if config.devices == "one" else None
    return StreamMeasurement((result,), None, per_process)


def warn_problems(measured: StreamMeasurement) -> None:
    """Every process: its own devices' validation failures (each) on stderr, and its kernels'
    allocation and byte-count problems in the log."""
    if measured.devices is not None:
        for r in measured.local:
            for failure in r.validation.failures():
                print(f"device {r.placement.devices[0].id}: {failure}", file=sys.stderr)
    for r in measured.local:
        for problem in r.allocation_problems() + r.byte_weight_mismatches():
            logging.warning("STREAM: %s", problem)


def printout(measured: StreamMeasurement) -> report.Printout:
    """What BabelStream's output is rendered from, of this measurement."""
    result, devices = measured.result, measured.devices
    cfg = result.config
    times = result.times_s.get("triad") if cfg.kernels == "triad" else None
    return report.Printout(
        implementation=implementation_label(result.placement),
        kernels=cfg.kernels,
        num_times=cfg.num_times,
        precision=cfg.precision,
        elements=result.elements,
        itemsize=result.itemsize,
        mibibytes=cfg.mibibytes,
        csv=cfg.csv,
        placement=result.placement.describe(),
        figures=result.figures if devices is None else report.slowest(devices),
        devices=devices,
        below_rule="" if result.size_check.ok else result.size_check.message,
        triad_runtime_s=None if times is None else float(np.sum(times)),
    )


def render_stream(measured: StreamMeasurement) -> StreamText:
    """BabelStream's output of the measurement, from it alone (report.render, which `check`
    runs again on a packed record). Arrays below the 4x-cache rule are said under the table and
    in the figure-of-merit line."""
    text, fom = report.render(printout(measured))
    failures = () if measured.devices is not None else tuple(measured.result.validation.failures())
    return StreamText(text, failures, fom, merit_to_stderr=measured.result.config.csv)


def run_stream(config: Settings) -> int:
    """`--mode=stream`: measure, write the record, print BabelStream's output (process 0).

    Returns the process exit code: 0, 1 when validation failed (BabelStream's non-zero exit),
    or 3 when the acceptance failed (stream/acceptance.py).
    """
    run_id = record_write.run_id(config, "stream")
    claimed = results.claim(config.results.results_dir, run_id, config.results.overwrite)
    config = dataclasses.replace(config, stream=rules.applied(config.stream, jax.device_count()))
    measured = measure_stream(config.stream)
    warn_problems(measured)
    text = render_stream(measured)
    record = stream_record(
        config, run_id, measured.result, measured.per_process, measured.devices, text.stdout
    )
    record = scan.scanned(
        config.stream, record, config.results.results_dir, measure_bandwidth, _room
    )
    record, text = acceptance.attach(config.stream, record, text)
    path = results.write_record(config.results.results_dir, run_id, record)
    claimed.release()
    if jax.process_index() == 0:
        _show(text, path)
    return acceptance.exit_code(record, 0 if measured.passed else 1)


def _show(text: StreamText, path) -> None:
    print(text.report)
    for failure in text.failures:
        print(failure, file=sys.stderr)
    if path:
        logging.info("STREAM: record written to %s", path)
    print(text.figure_of_merit, file=sys.stderr if text.merit_to_stderr else sys.stdout, flush=True)


def _per_process_best(result: StreamResult) -> list[dict[str, float]]:
    """--stream_devices=one in a multi-process job: every process measured its own first
    device; gather each one's best rate per kernel (a collective: every process calls it)."""
    rates = np.array([f.gb_per_s for f in result.figures])
    gathered = allgather(rates.astype(np.float32))
    return [{f.key: float(row[i]) for i, f in enumerate(result.figures)} for row in gathered]


def stream_record(
    config: Settings,
    run_id: str,
    result: StreamResult,
    per_process: list[dict[str, float]] | None,
    devices: list[report.DeviceFigures] | None = None,
    printed: str | None = None,
) -> StreamRecord:
    """The record (`records.StreamRecord`, docs/record.md): the training runs' envelope with
    STREAM's figures.

    With `devices` (--stream_devices=each) the headline figures are the slowest device's per
    kernel, every device's are under `per_device`, and validation passes only if it passed on
    every device (its `checks` are this process's first device's).
    """
    figures = result.figures if devices is None else report.slowest(devices)
    validation = _validation(result, devices)
    if devices is None:
        failed = "; ".join(result.validation.failures())
    else:
        bad = validation.devices_failed
        failed = f"on devices {bad}" if bad else ""
    if failed:
        status, reason = "invalid", f"validation failed: {failed}"
    elif not result.size_check.ok:
        status, reason = "small_arrays", f"arrays {BELOW_RULE}: {result.size_check.message}"
    else:
        status, reason = "complete", ""
    fom = report.merit_kernel(figures)
    metrics = report.metrics(figures)
    metrics["stream/figure_of_merit/gb_per_s"] = fom.gb_per_s
    metrics["stream/validation/passed"] = validation.passed
    return results.envelope(
        "stream",
        run_id,
        status,
        config,
        reason,
        array=_array(result),
        placement=_placement(result.placement, devices),
        cache=_cache(result.size_check),
        run=_run(result),
        timing=stream_records.StreamTiming(compile_s=result.compile_s, init_s=result.init_s),
        kernels=report.figures_record(figures),
        figure_of_merit=stream_records.FigureOfMerit(kernel=fom.key, gb_per_s=fom.gb_per_s),
        allocation=_allocation(result),
        byte_weight_mismatches=result.byte_weight_mismatches(),
        validation=validation,
        per_process_gb_per_s=per_process,
        per_device=None if devices is None else _per_device(devices),
        metrics=metrics,
        printed=printed,
    )


def _allocation(result: StreamResult) -> dict[str, stream_records.Allocation]:
    return {
        k.spec.key: stream_records.Allocation(
            donated=k.spec.writes,
            output_bytes=k.allocation.output_bytes,
            alias_bytes=k.allocation.alias_bytes,
            temp_bytes=k.allocation.temp_bytes,
            buffer_reused=result.buffer_reused.get(k.spec.key),
            note=k.allocation.note,
        )
        for k in result.kernels
    }


def _per_device(devices: list[report.DeviceFigures]) -> list[stream_records.DeviceRun]:
    return [
        stream_records.DeviceRun(
            device_id=d.device_id,
            process_index=d.process_index,
            validation_passed=d.passed,
            kernels=report.figures_record(d.figures),
        )
        for d in devices
    ]


def _validation(
    result: StreamResult, devices: list[report.DeviceFigures] | None
) -> stream_records.Validation:
    """This process's checks; with every device measured alone, passed only where each did."""
    own = result.validation
    checks = {
        c.name: stream_records.ValidationCheck(
            error=c.error, tolerance=c.tolerance, relative=c.relative, passed=c.passed
        )
        for c in own.checks
    }
    gold = stream_records.Gold(**dataclasses.asdict(own.gold))
    if devices is None:
        return stream_records.Validation(passed=own.passed, gold=gold, checks=checks)
    bad = [d.device_id for d in devices if not d.passed]
    return stream_records.Validation(passed=not bad, gold=gold, checks=checks, devices_failed=bad)


def _array(result: StreamResult) -> stream_records.StreamArray:
    return stream_records.StreamArray(
        elements=result.elements,
        precision=result.config.precision,
        itemsize=result.itemsize,
        bytes_per_array=result.elements * result.itemsize,
        bytes_total=3 * result.elements * result.itemsize,
        size_source=result.size.source,
        size_note=result.size.note,
    )


def _placement(placement, devices) -> stream_records.Placement:
    return stream_records.Placement(
        mode=placement.mode,
        num_devices=placement.num_devices if devices is None else len(devices),
        devices=[str(d) for d in (placement.devices if devices is None else jax.devices())],
        device_kind=placement.device_kind,
        platform=placement.platform,
        process_count=jax.process_count(),
    )


def _cache(size_check: SizeCheck) -> stream_records.Cache:
    return stream_records.Cache(
        bytes=size_check.cache.bytes,
        source=size_check.cache.source,
        scope=size_check.cache.scope,
        arrays_bytes_per_cache=3 * size_check.array_bytes,
        array_bytes_per_cache=size_check.array_bytes,
        size_rule_ok=size_check.ok,
        message=size_check.message,
    )


def _run(result: StreamResult) -> stream_records.StreamRun:
    placement = result.placement
    several = len({d.process_index for d in placement.devices}) > 1
    return stream_records.StreamRun(
        babelstream_version=report.BABELSTREAM_VERSION,
        implementation=implementation_label(placement),
        kernels=result.config.kernels,
        order=list(RUN_ORDERS[result.config.kernels]),
        num_times=result.config.num_times,
        burst=result.burst,
        timing=(
            "per call, blocking"
            if result.burst == 1
            else f"per burst of {result.burst} calls back to back, blocking at its end, over "
            f"{result.burst}"
        )
        + "; first iteration excluded; bandwidth from the fastest sample"
        + (
            "; every call started behind a barrier of all processes, its time the slowest's"
            if several
            else ""
        ),
    )
