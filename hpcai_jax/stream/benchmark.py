"""The STREAM run, as BabelStream's main.cpp reads: size, place, init, run, check, report.

`measure_bandwidth` measures and validates one placement (tests and benchmarks call it);
`measure_each` does so for every local device in turn (--stream_devices=each); `run_stream` is
what `python -m hpcai_jax.main --mode=stream` runs: measure (`measure_stream`), render
(printed.py: BabelStream's output, printed on process 0), record (record.py: the JSON record)
and write. The arrays' size is sizing.py's, from the memory read here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping

import jax
import numpy as np

from hpcai_jax import results
from hpcai_jax.distributed import allgather
from hpcai_jax.dtypes import dtype as jnp_dtype
from hpcai_jax.dtypes import itemsize
from hpcai_jax.records import write as record_write
from hpcai_jax.stream import acceptance, layout, report, rules, scan, sizing
from hpcai_jax.stream.config import StreamConfig, resolve_burst
from hpcai_jax.stream.kernels import KERNELS, RUN_ORDERS, KernelSpec, compile_kernel
from hpcai_jax.stream.measured import StreamMeasurement, StreamResult
from hpcai_jax.stream.placement import (
    Placement,
    device_memory_bytes,
    make_placement,
    make_placements,
    mem_available_bytes,
)
from hpcai_jax.stream.printed import StreamText, render_stream, show, warn_problems
from hpcai_jax.stream.record import RunSettings, stream_record
from hpcai_jax.stream.runner import run_kernels
from hpcai_jax.stream.sync import call_barrier
from hpcai_jax.stream.validate import validate

# The run's parts, named here for the callers that take them from the run's module.
__all__ = [
    "StreamMeasurement",
    "StreamResult",
    "StreamText",
    "measure_bandwidth",
    "measure_each",
    "measure_stream",
    "render_stream",
    "run_stream",
    "stream_record",
]


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
        room = _room(config, placement)
        size, size_check = sizing.sized(config, placement, room, remedy, warn)
        nbytes = itemsize(config.precision)
        spaced = _spaced(placement, size.elements // placement.num_devices * nbytes, room)
        dtype = jnp_dtype(config.precision)
        kernel_specs = KERNELS if kernel_specs is None else kernel_specs
        kernels, barrier, compile_s = _compiled(
            config, kernel_specs, placement, size.elements, dtype
        )
        run, validation, init_s, burst, arrays_layout = _run_and_validate(
            config, placement, kernels, barrier, size.elements, dtype, spaced
        )
    figures = _figures(kernels, run.times_s, size.elements, nbytes, placement.num_devices)
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
        layout=arrays_layout,
    )


def _figures(kernels, times_s, elements: int, nbytes: int, num_devices: int):
    """Each kernel's figures (report.py) from its calls' seconds."""
    return [
        report.kernel_figures(
            k.spec.key, times_s[k.spec.key], elements, nbytes, num_devices, k.cost.bytes_accessed
        )
        for k in kernels
    ]


def _room(config: StreamConfig, placement: Placement) -> sizing.Room:
    """`sizing.room` with the memory of `placement`'s first device, and the host's MemAvailable
    on CPUs (whose devices share it), read now."""
    host = mem_available_bytes() if placement.platform == "cpu" else None
    return sizing.room(config, placement, device_memory_bytes(placement.devices[0]), host)


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


def _spaced(placement: Placement, bytes_per_device: int, room: sizing.Room) -> bool:
    """Whether the arrays get spacers (layout.py); the same answer in every process the arrays
    span, which all make the same calls."""
    fits = layout.spacers_fit(placement, bytes_per_device, room.free_bytes_per_device)
    if len(placement.local_devices) < placement.num_devices:
        fits = bool(allgather(np.asarray([fits])).all())
    return fits


def _run_and_validate(
    config: StreamConfig, placement, kernels, barrier, elements: int, dtype, spaced: bool
):
    """Initialises the arrays, runs the compiled kernels num_times and checks the arrays they
    leave against the gold values; (the run, its validation, init seconds, the burst, where
    the arrays sat)."""
    start = time.perf_counter()
    arrays, arrays_layout = layout.init_arrays(placement, elements, dtype, spaced)
    init_s = time.perf_counter() - start
    burst = resolve_burst(config, placement.platform)
    run = run_kernels(kernels, arrays, config.num_times, barrier, burst)
    del arrays
    # Nstream is the one kernel a burst applies more than once (runner.py).
    replays = config.num_times * (burst if config.kernels == "nstream" else 1)
    validation = validate(
        run.arrays, run.dot_sum, config.kernels, replays, config.precision, placement
    )
    return run, validation, init_s, burst, arrays_layout


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


def measure_stream(config: StreamConfig) -> StreamMeasurement:
    """Measures as --stream_devices asks and gathers the figures every process needs (a
    collective with several processes); prints nothing."""
    if config.devices == "each":
        local = tuple(measure_each(config))
        return StreamMeasurement(local, gather_each(list(local)), None)
    result = measure_bandwidth(config)
    per_process = _per_process_best(result) if config.devices == "one" else None
    return StreamMeasurement((result,), None, per_process)


def _per_process_best(result: StreamResult) -> list[dict[str, float]]:
    """--stream_devices=one in a multi-process job: every process measured its own first
    device; gather each one's best rate per kernel (a collective: every process calls it)."""
    rates = np.array([f.gb_per_s for f in result.figures])
    gathered = allgather(rates.astype(np.float32))
    return [{f.key: float(row[i]) for i, f in enumerate(result.figures)} for row in gathered]


def run_stream(config: RunSettings) -> int:
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
        show(text, path)
    return acceptance.exit_code(record, 0 if measured.passed else 1)
