"""`--mode=stream` as measure → render → record: BabelStream's output and the record are
functions of one measurement; a forged one (other times, other devices) shows they read nothing
else."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hpcai_jax.config import ResultsConfig
from hpcai_jax.settings import Settings
from hpcai_jax.stream import report
from hpcai_jax.stream.benchmark import (
    StreamMeasurement,
    measure_stream,
    render_stream,
    stream_record,
)
from hpcai_jax.stream.config import StreamConfig

N = 1 << 13


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Settings:
    return Settings(
        mode="stream",
        stream=StreamConfig(
            allow_small_arrays=True, array_size=N, num_times=3, kernels="triad", precision="float32"
        ),
        results=ResultsConfig(results_dir=str(tmp_path_factory.mktemp("stream"))),
    ).validate()


@pytest.fixture(scope="module")
def measured(config) -> StreamMeasurement:
    return measure_stream(config.stream)


def _forged(result, times: list[float]):
    """`result` with Triad's call times replaced."""
    times_s = np.array(times)
    figure = report.kernel_figures("triad", times_s, N, result.itemsize, 1, None)
    return dataclasses.replace(result, figures=[figure], times_s={"triad": times_s}), figure


def test_the_output_and_the_record_come_from_the_measurement_alone(config, measured):
    assert measured.passed and measured.per_process is not None  # --stream_devices=one
    assert render_stream(measured) == render_stream(measured)
    forged, figure = _forged(measured.result, [1.0, 0.5, 0.25])
    text = render_stream(dataclasses.replace(measured, local=(forged,)))
    rate = f"{figure.rate(mibibytes=False):.3f}"
    assert any(line.split()[:2] == ["Triad", rate] for line in text.report.splitlines())
    assert text.figure_of_merit.startswith(f"Figure of merit: Triad {rate} MBytes/sec")
    assert text.failures == () and not text.merit_to_stderr
    record = stream_record(config, "s", forged, measured.per_process)
    assert record.figure_of_merit.gb_per_s == figure.gb_per_s
    assert record.kernels["triad"].gb_per_s == figure.gb_per_s
    assert record.metrics["stream/triad/min_s"] == 0.25
    csv = dataclasses.replace(forged, config=dataclasses.replace(forged.config, csv=True))
    text = render_stream(dataclasses.replace(measured, local=(csv,)))
    assert text.report.startswith("function,num_times") and text.merit_to_stderr


def test_each_device_alone_renders_and_records_the_slowest_and_the_failed(config, measured):
    fast, fast_figure = _forged(measured.result, [1.0, 0.5, 0.25])
    _, slow_figure = _forged(measured.result, [1.0, 2.0, 1.0])
    devices = [
        report.DeviceFigures(device_id=0, process_index=0, figures=[fast_figure], passed=True),
        report.DeviceFigures(device_id=1, process_index=0, figures=[slow_figure], passed=False),
    ]
    each = StreamMeasurement(local=(fast,), devices=devices, per_process=None)
    assert not each.passed
    text = render_stream(each)
    assert text == render_stream(each)
    assert "Each device alone (2 devices" in text.report
    assert f"Triad {slow_figure.rate(mibibytes=False):.3f} MBytes/sec" in text.figure_of_merit
    assert text.figure_of_merit.endswith(
        "; the slowest of 2 devices, each measured alone; arrays below NERSC-10's 4x-cache rule)"
    )
    record = stream_record(config, "s", each.result, None, devices)
    assert (record.status, record.reason) == ("invalid", "validation failed: on devices [1]")
    assert record.validation.devices_failed == [1]
    assert record.figure_of_merit.gb_per_s == slow_figure.gb_per_s
    assert [d.validation_passed for d in record.per_device] == [True, False]
