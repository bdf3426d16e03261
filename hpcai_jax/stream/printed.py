"""What `--mode=stream` prints, rendered from its measurement alone: BabelStream's report
(`report.render`, which `check` runs again on a packed record), the validation failures and the
figure of merit; `show` prints it on process 0."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
from absl import logging

from hpcai_jax.stream import report
from hpcai_jax.stream.measured import StreamMeasurement
from hpcai_jax.stream.placement import implementation_label


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


def show(text: StreamText, path) -> None:
    """Process 0's output: the report, the failures, where the record went, the figure of merit."""
    print(text.report)
    for failure in text.failures:
        print(failure, file=sys.stderr)
    if path:
        logging.info("STREAM: record written to %s", path)
    print(text.figure_of_merit, file=sys.stderr if text.merit_to_stderr else sys.stdout, flush=True)
