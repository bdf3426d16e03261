"""The training run's one clock: step time, paused time (checkpoint saves, evaluations), the
warm-up, Eq. 6's epochs and the run time a checkpoint carries (docs/score.md §5).

It is the only writer of `Progress`'s timing fields. A step's time is booked one step late: the
host blocks on step k-1 only after dispatching step k, so the device always has work queued and
timing adds no bubble. Every reading goes through `read`, which tests replace with a fake clock
(monkeypatch `hpcai_jax.run.clock.read`, or `hpcai_jax.run.clock.time.perf_counter`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import jax

from hpcai_jax.data.pipeline import Prefetcher
from hpcai_jax.engine.step import StepMetrics
from hpcai_jax.run.epochs import EpochTimer, OnClose
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
        # Called as each step is booked: (step, its metrics, its time or None if untimed).
        self.on_step: list[Callable[[int, StepMetrics, float | None], None]] = []

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
        for listener in self.on_step:  # after the reading: in the next step's shadow
            listener(step, metrics, seconds)

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
        epoch starts after it, as the MLLOG's lines are ordered."""
        self.flush()
        booked = self._last_done
        span = Span(read())
        yield span
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
