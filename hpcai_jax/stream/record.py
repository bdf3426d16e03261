"""The STREAM record (`records.StreamRecord`, docs/record.md) of a measurement: the training
runs' envelope (`results.envelope`, the whole configuration in it) with STREAM's figures, its
programs' proofs and its validation. `benchmark.run_stream` writes it."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax

from hpcai_jax import results
from hpcai_jax.config import ResultsConfig
from hpcai_jax.records import stream as stream_records
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.stream import report
from hpcai_jax.stream.cache import SizeCheck
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.kernels import RUN_ORDERS
from hpcai_jax.stream.measured import StreamResult
from hpcai_jax.stream.placement import implementation_label

BELOW_RULE = report.BELOW_RULE


class RunSettings(Protocol):
    """What STREAM reads of the settings `main` composed (`settings.Settings`, which imports
    STREAM's): its own section, where the record goes, and the whole for the record's `config`."""

    stream: StreamConfig
    results: ResultsConfig

    def to_dict(self) -> dict: ...


def stream_record(
    config: RunSettings,
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
        layout=_layout(result),
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


def _layout(result: StreamResult) -> stream_records.ArrayLayout | None:
    if result.layout is None:
        return None
    return stream_records.ArrayLayout(**dataclasses.asdict(result.layout))


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
