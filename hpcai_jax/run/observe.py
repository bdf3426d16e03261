"""Seeing inside a run as JAX users do (docs/observe.md): TensorBoard curves while it goes
(`Curves`, process 0) and a profiler trace of a window of steps (`ProfileWindow`). Both are
hooks between steps (run/hooks.py); neither can end the run: a directory that cannot be written
costs one warning line, and the record's `observe` section says what was lost.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import jax

from hpcai_jax.errors import UsageError
from hpcai_jax.records import train
from hpcai_jax.run import member_figures, outputs
from hpcai_jax.run import record as run_record
from hpcai_jax.telemetry.events import EventLog
from hpcai_jax.telemetry.profile import STEP_ANNOTATION, Trace

if TYPE_CHECKING:  # run/hooks.py calls the window: imported for the annotation only
    from hpcai_jax.run.hooks import StepInfo


def step_trace(step: int) -> jax.profiler.StepTraceAnnotation:
    """The training step `step` named for a profiler trace (docs/observe.md); without a trace
    the annotation costs a microsecond."""
    return jax.profiler.StepTraceAnnotation(STEP_ANNOTATION, step_num=step)


def profile_dir(config, run_id: str) -> str:
    """Where a run's trace goes: beside its record."""
    return os.path.join(config.results.results_dir, f"{run_id}.profile")


@dataclasses.dataclass
class Curves:
    """Per step the loss (this process's members' mean) and examples/s, as the run clock books
    the step (no device wait of its own); per evaluation each member's, their mean's and the
    ensemble's quality; per epoch Eq. 6's FLOPS; at the end the out-of-bag estimate."""

    log: EventLog | None
    examples_per_step: int
    flops_per_member_step: float | None
    ensemble_size: int
    final_dir: str = ""  # where the run's commit puts the events (run/outputs.py)
    points: int = 0
    epochs: int = 0

    def completed(self, booked) -> None:
        """The steps the run clock booked since the last call, (step, metrics, seconds or None
        if untimed) each: their loss, and their rate where timed."""
        for step, metrics, seconds in booked:
            self.log.scalar("train/loss", member_figures.local_mean(metrics.loss), step + 1)
            if seconds:
                self.log.scalar("train/examples_per_s", self.examples_per_step / seconds, step + 1)

    def __call__(self, info, run) -> None:
        progress = info.progress
        if self.log is None:
            return None
        self.completed(run.booked())
        if len(progress.curve) > self.points or len(progress.epochs) > self.epochs:
            self._evaluations(progress)
            self._epochs(progress)
            self.log.flush()
        return None

    def _evaluations(self, progress) -> None:
        for point in progress.curve[self.points :]:
            step = point["step"]
            self.log.scalar("quality/ensemble", point["ensemble"], step)
            if point.get("member_mean") is not None:
                self.log.scalar("quality/member_mean", point["member_mean"], step)
            for i, q in enumerate(point.get("members") or []):
                if q is not None:
                    self.log.scalar(f"quality/member_{i}", q, step)
        self.points = len(progress.curve)

    def _epochs(self, progress) -> None:
        new = progress.epochs[self.epochs :]
        self.epochs = len(progress.epochs)
        if not self.flops_per_member_step or not new:
            return
        shown = dataclasses.replace(progress, epochs=new)
        for epoch in run_record.epochs_of(shown, self.flops_per_member_step, self.ensemble_size):
            if epoch.flops_per_s:
                self.log.scalar(
                    "eq6/flops_per_s", epoch.flops_per_s, epoch.first_step + epoch.steps
                )

    def finish(self, quality, step: int, booked) -> train.TensorBoard | None:
        """The end's figures (the steps booked after the last hook, a complete run's final
        quality and out-of-bag estimate, an engine.evaluate.EnsembleQuality or None), then
        closes; returns what the record says."""
        if self.log is None:
            return None
        self.completed(booked)
        if quality is not None:
            self.log.scalar("final/ensemble", quality.ensemble, step)
            if quality.oob is not None and quality.oob.quality is not None:
                self.log.scalar("final/out_of_bag", quality.oob.quality, step)
        self.log.close()
        return train.TensorBoard(**{**self.log.summary(), "dir": os.path.abspath(self.final_dir)})


def curves(
    setup, run_id: str, flops_per_step: float | None, clock, resuming: bool = False
) -> Curves:
    """Process 0's curves under --tensorboard, reading the steps the run clock booked (the clock
    keeps them for it), written under the folder's partial name until the run commits its
    outputs (a resumed run's beside what the run wrote before); a hook that writes nothing
    otherwise."""
    config, m = setup.config, setup.layout.ensemble_size
    on = config.results.tensorboard and jax.process_index() == 0
    final = outputs.tensorboard_dir(config, run_id)
    hook = Curves(
        EventLog.open(str(outputs.stage_folder(final, resuming))) if on else None,
        m * config.train.batch_size,
        flops_per_step / m if flops_per_step else None,
        m,
        final,
    )
    if hook.log is not None:
        clock.keep_booked()
    return hook


@dataclasses.dataclass
class ProfileWindow:
    """A trace of steps [first, last): started once step first-1 has completed, stopped once
    step last-1 has; the time spent starting and writing it is in no step and no epoch."""

    first: int
    last: int
    trace: Trace | None  # None: this process does not trace (--noprofile_all_processes)
    hlo_text: str
    aside_s: float = 0.0

    total: int = 0  # the run's steps: a trace still running at the last one is stopped there

    def due(self, info: StepInfo) -> bool:
        """The schedule: the window's first step and its last (or the run's, inside it)."""
        done = info.done
        if self.trace is None:
            return False
        return done in (self.first, self.last) or (done == self.total and self.trace.active)

    def __call__(self, info, run) -> None:
        if info.done == self.first:
            with run.aside() as span:
                self.trace.start(self.hlo_text)
            self.aside_s += span.stop() - span.start
        else:
            self.close(run.aside)
        return None

    def close(self, aside) -> None:
        """Stops the trace, if it runs (also when the loop ends early); `aside`: the run
        clock's (run/clock.py)."""
        if self.trace is None or not self.trace.active:
            return
        with aside() as span:
            self.trace.stop()
        self.aside_s += span.stop() - span.start

    def summary(self) -> train.Profile:
        trace = self.trace
        return train.Profile(
            steps=[self.first, self.last],
            traced=trace is not None,
            dir=os.path.abspath(trace.directory) if trace else None,
            files=list(trace.files) if trace else [],
            perfetto_trace=trace.perfetto() if trace else None,
            aside_s=self.aside_s,
            lost=trace.lost if trace else None,
        )


def record_section(curves: Curves, window, quality, step: int, booked) -> train.Observe:
    """The record's `observe` section: the curves closed with the final quality (None: none)
    at `step`, with `booked` (hooks.Services.booked), and the profile window's summary."""
    return train.Observe(
        tensorboard=curves.finish(quality, step, booked),
        profile=window.summary() if window else None,
    )


def check_profile_window(setup) -> None:
    """--profile_steps=A:B must end by the run's last step."""
    window = setup.config.results.profile_range
    if window and window[1] > setup.total_steps:
        raise UsageError(
            f"--profile_steps={setup.config.results.profile_steps}: the run has "
            f"{setup.total_steps} steps; B may be at most {setup.total_steps}"
        )


def profile_window(setup, run_id: str, hlo_text: str) -> ProfileWindow | None:
    """The --profile_steps window, or None without it."""
    config = setup.config
    window = config.results.profile_range
    if window is None:
        return None
    traces = config.results.profile_all_processes or jax.process_index() == 0
    process = os.path.join(profile_dir(config, run_id), f"process_{jax.process_index()}")
    trace = Trace(process) if traces else None
    return ProfileWindow(window[0], window[1], trace, hlo_text, total=setup.total_steps)
