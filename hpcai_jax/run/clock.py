"""The training run's one clock: step time, paused time (checkpoint saves, evaluations), the
warm-up, Eq. 6's epochs and the run time a checkpoint carries (docs/score.md §5).

It is the only writer of `Progress`'s timing fields. A step's time is booked one step late: the
host blocks on step k-1 only after dispatching step k, so the device always has work queued and
timing adds no bubble. Every reading goes through `read`, which tests replace with a fake clock
(monkeypatch `hpcai_jax.run.clock.read`, or `hpcai_jax.run.clock.time.perf_counter`).

Below the clock, what it books and what is read off it: step-time statistics HPC-benchmark
style (warm-up excluded; `StepTimes`); Eq. 6's epochs (`EpochTimer`), which tile the training
time of a segment: the first starts at run_start, each next one where the previous ended (its last step's completion), and each ends at its own last step's
completion. So input waits and checkpoint saves fall inside an epoch (a save at an epoch
boundary in the next one), and nothing falls between two epochs but evaluations, which are cut
out. Compilation comes before run_start. An epoch interrupted by a preemption keeps the time it
had booked up to the checkpoint it resumes from (in `Progress.epoch_open_s`) and goes on from
the resumed segment's run_start: the steps lost to the interruption and the restart are in no
epoch, as they are in no step time.

And each process's own timing (`per_process`), gathered once at the end of the run, where the
processes meet anyway: the members it drives, its timed steps' median and slowest, its epochs'
wall times. Members never wait for each other in a step, so a process's clock is its members' own; an epoch
of the job ends when its slowest process ends it, which is the wall time Eq. 6 takes
(docs/scale.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable

import jax
import numpy as np
from jax.sharding import Mesh

from hpcai_jax.data.pipeline import Prefetcher
from hpcai_jax.distributed import allgather
from hpcai_jax.engine.step import StepMetrics
from hpcai_jax.records import train
from hpcai_jax.run import startup
from hpcai_jax.run.progress import Progress
from hpcai_jax.telemetry.energy import EnergyReading, read_energy


def read() -> float:
    """The monotonic clock, in seconds (`time.perf_counter` at each call)."""
    return time.perf_counter()


class Span:
    """A timed stretch: its start reading, and its end once `stop` is called (the first call's
    reading; a span left open ends when its block does)."""

    def __init__(self, start: float):
        self.start, self.end = start, None

    def stop(self) -> float:
        if self.end is None:
            self.end = read()
        return self.end


class RunClock:
    """Books the training segment's time into `progress`.

    Steps before `timed_from` are trained but not timed (warm-up); the energy counters are read
    where timing starts and `finish`es. `start` marks run_start: the segment's run time counts
    from it, on top of what earlier segments carried in their checkpoints."""

    def __init__(
        self,
        progress: Progress,
        timed_from: int,
        steps_per_epoch: int,
        prefetch: Prefetcher,
        on_epoch: OnClose | None = None,
    ):
        self._progress, self._timed_from, self._prefetch = progress, timed_from, prefetch
        self._steps_per_epoch, self._on_epoch = steps_per_epoch, on_epoch
        self._inflight: tuple[int, StepMetrics] | None = None
        self._wait_mark = 0.0  # the prefetcher's wait before the first timed step
        self._epochs: EpochTimer | None = None
        self.run_start = self._last_done = 0.0
        self._run_s_before = progress.run_s
        self.last_metrics: StepMetrics | None = None
        self.energy_start: EnergyReading | None = None
        self.energy_end: EnergyReading | None = None
        # The steps booked since a hook last read them (`drain_booked`), kept only once one
        # asks (`keep_booked`, the curves): (step, its metrics, its time or None if untimed).
        self._booked: list[tuple[int, StepMetrics, float | None]] | None = None

    def start(self) -> float:
        """run_start: the segment's training time begins now (after compiling)."""
        self.run_start = self._last_done = read()
        self._epochs = EpochTimer(
            self._progress, self._steps_per_epoch, self.run_start, self._on_epoch
        )
        if self._timed_from == self._progress.step:
            self.energy_start = read_energy()
        return self.run_start

    def since_start(self, reading: float) -> float:
        """Run time at a reading: earlier segments', then this one's since its run_start."""
        return self._run_s_before + reading - self.run_start

    def dispatched(self, step: int, metrics: StepMetrics) -> None:
        """Step `step` was dispatched: complete the one before it."""
        self.flush()
        self._inflight = (step, metrics)

    def flush(self) -> None:
        """Blocks on the step in flight, if any, and books its time."""
        if self._inflight is None:
            return
        step, metrics = self._inflight
        self._inflight = None
        jax.block_until_ready(metrics)
        now = read()
        self._epochs.completed(step, now)
        seconds = now - self._last_done if step >= self._timed_from else None
        if seconds is not None:
            self._progress.time_step(step, seconds)
        elif step == self._timed_from - 1:
            self._wait_mark = self._prefetch.wait_s
            self.energy_start = read_energy()
        self._last_done, self.last_metrics = now, metrics
        self._progress.step = step + 1
        if self._booked is not None:  # read by a hook, in the next step's shadow
            self._booked.append((step, metrics, seconds))

    def keep_booked(self) -> None:
        """From now on, keep each booked step for `drain_booked`."""
        self._booked = []

    def drain_booked(self) -> list[tuple[int, StepMetrics, float | None]]:
        """The steps booked since the last call (none unless `keep_booked`)."""
        if not self._booked:
            return []
        booked, self._booked = self._booked, []
        return booked

    @contextlib.contextmanager
    def checkpointing(self):
        """A save inside the training time: booked as checkpoint time, it stays in its epoch."""
        self.flush()
        start = read()
        yield
        self._last_done = read()
        self._progress.checkpoint_s += self._last_done - start

    @contextlib.contextmanager
    def agreeing(self, several: bool):
        """A host collective of every process (the divergence check, the preemption agreement):
        with `several` processes the step in flight is booked first and the wait for the others
        is booked as agreement time, not as a step's (it stays in its epoch's wall time). One
        process waits for nobody: nothing is flushed."""
        if not several:
            yield
            return
        self.flush()
        start = read()
        yield
        self._last_done = read()
        self._progress.agree_s += self._last_done - start

    @contextlib.contextmanager
    def evaluating(self, training: bool = True):
        """An evaluation, yielding its `Span`: booked as evaluation time and, during training,
        cut out of its epoch (Eq. 6 counts training time only), from the last booked instant
        (the check of who votes, just before it, is the evaluation's too), so that the next
        epoch starts after it, as the MLLOG's lines are ordered. An evaluation stopped by a
        signal (run/evaluation.Stopped) is booked as far as it went."""
        self.flush()
        booked = self._last_done
        span = Span(read())
        try:
            yield span
        finally:
            end = span.stop()
            self._progress.eval_s += end - span.start
            if training:
                self._last_done = read()
                self._epochs.excise(self._last_done - booked)

    @contextlib.contextmanager
    def aside(self):
        """Host work that is no step's and no epoch's (starting and writing a profiler trace),
        yielding its `Span`: the step in flight is booked first, and the time is cut out of
        its epoch as an evaluation's is."""
        self.flush()
        span = Span(read())
        yield span
        self._last_done = span.stop()
        self._epochs.excise(self._last_done - span.start)

    def carry_run_time(self) -> None:
        """The run time so far, as the next checkpoint carries it."""
        self._progress.run_s = self.since_start(read())

    def finish(self) -> None:
        """The segment's training is over: the last step booked, the input waits and the energy
        counters read."""
        self.flush()
        self._progress.data_wait_s += self._prefetch.wait_s - self._wait_mark
        self.energy_end = read_energy()


@dataclasses.dataclass(frozen=True)
class StepTimes:
    count: int
    min_s: float
    median_s: float
    max_s: float
    mean_s: float
    total_s: float

    @classmethod
    def of(cls, seconds: list[float]) -> StepTimes:
        if not seconds:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return cls(
            len(seconds),
            min(seconds),
            statistics.median(seconds),
            max(seconds),
            statistics.fmean(seconds),
            sum(seconds),
        )


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


# Called when an epoch closes: (the epoch's record entry, start reading, end reading), where
# end - start is the time this segment booked into it (all of wall_s unless it was resumed).
OnClose = Callable[[dict, float, float], None]


class EpochTimer:
    """Books clock readings into `progress.epochs`; it never reads a clock itself (the loop's
    run clock hands it the readings, run/clock.py)."""

    def __init__(
        self,
        progress: Progress,
        steps_per_epoch: int,
        start: float,
        on_close: OnClose | None = None,
    ):
        self._progress, self._steps_per_epoch = progress, steps_per_epoch
        self._since = start  # where the open epoch's unbooked time begins
        self._booked = 0.0  # what this segment booked into the open epoch
        self._on_close = on_close

    def completed(self, step: int, now: float) -> None:
        """Step `step` completed at `now`: its time joins the open epoch, which it may close."""
        progress = self._progress
        progress.epoch_open_s += now - self._since
        self._booked += now - self._since
        self._since = now
        done = step + 1
        if done % self._steps_per_epoch == 0:
            epoch = {
                "index": done // self._steps_per_epoch,  # 1-based, as MLLOG's epoch_num
                "first_step": done - self._steps_per_epoch,
                "steps": self._steps_per_epoch,
                "wall_s": progress.epoch_open_s,
            }
            progress.epochs.append(epoch)
            progress.epoch_open_s = 0.0
            if self._on_close is not None:  # the MLLOG's epoch_start/epoch_stop readings
                self._on_close(epoch, now - self._booked, now)
            self._booked = 0.0

    def excise(self, seconds: float) -> None:
        """`seconds` just spent (an evaluation) belong to no epoch."""
        self._since += seconds


def members_by_process(mesh: Mesh, members_per_device: int) -> dict[int, list[int]]:
    """process index → the members whose devices it drives (the mesh's first axis is
    `ensemble`; each of its rows holds `members_per_device` members)."""
    out: dict[int, set[int]] = {}
    for row, devices in enumerate(mesh.devices):
        first = row * members_per_device
        for device in np.asarray(devices).flat:
            out.setdefault(device.process_index, set()).update(
                range(first, first + members_per_device)
            )
    return {p: sorted(members) for p, members in sorted(out.items())}


def owners(mesh: Mesh, members_per_device: int) -> list[int]:
    """member → the first process whose devices train it (the one that reports its figures)."""
    first: dict[int, int] = {}
    for p, members in members_by_process(mesh, members_per_device).items():
        for member in members:
            first.setdefault(member, p)
    return [first[m] for m in sorted(first)]


def _figure(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def per_process(
    progress: Progress, mesh: Mesh, members_per_device: int
) -> list[train.ProcessTiming]:
    """Every process's timing, in process order (a collective: every process calls it)."""
    steps = np.asarray(progress.step_s, np.float64)
    walls = [float(e["wall_s"]) for e in progress.epochs]
    mine = np.array(
        [
            np.median(steps) if steps.size else np.nan,
            steps.max() if steps.size else np.nan,
            progress.agree_s,
            startup.total_s(),
            *walls,
        ],
        np.float64,
    )
    owners = members_by_process(mesh, members_per_device)
    return [
        train.ProcessTiming(
            process_index=p,
            members=owners.get(p, []),
            step_s=train.ProcessStepTimes(median_s=_figure(row[0]), max_s=_figure(row[1])),
            agree_s=float(row[2]),
            startup_s=float(row[3]),
            epoch_wall_s=[float(w) for w in row[4:]],
        )
        for p, row in enumerate(allgather(mine))
    ]


def take_slowest_epochs(progress: Progress, timings: list[train.ProcessTiming]) -> None:
    """Each completed epoch's wall time becomes its slowest process's (what the record's
    epochs and Eq. 6 use); with one process nothing changes."""
    for i, epoch in enumerate(progress.epochs):
        epoch["wall_s"] = max(t.epoch_wall_s[i] for t in timings)
