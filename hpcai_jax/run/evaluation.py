"""Evaluations of a training run: the members' and the ensemble's held-out quality now, its
point on the quality curve and its MLLOG lines, timed on the run's clock (docs/score.md §5).

The quality curve and time to target: Time to target is MLPerf's measure: from run_start to the end of the first evaluation at which
the ensemble reaches the target, on the run's one clock (the MLLOG's run_start and eval_stop
lines carry the same readings). It is defined for an uninterrupted run only: a target first
reached after a resume has no time to target.
"""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import numpy as np
from absl import logging

from hpcai_jax.engine.evaluate import EnsembleQuality, evaluate, out_of_bag
from hpcai_jax.records import Status
from hpcai_jax.run import interrupt
from hpcai_jax.run.clock import RunClock
from hpcai_jax.run.progress import Progress
from hpcai_jax.telemetry.mllog import MLLog
from hpcai_jax.telemetry.profile import EVALUATION


class Stopped(Exception):
    """A signal noted during an evaluation, acted on before its next batch: the run ends
    `partial`, its reason naming the batch (docs/reliability.md, Interrupts)."""

    def __init__(self, signal_name: str, what: str, batch: int, batches: int):
        super().__init__(signal_name, what, batch, batches)
        self.signal_name, self.what, self.batch, self.batches = signal_name, what, batch, batches

    @property
    def reason(self) -> str:
        return (
            f"preempted by {self.signal_name} during {self.what}: the evaluation was "
            f"interrupted at batch {self.batch} of {self.batches}"
        )


@contextlib.contextmanager
def _watched(dog, step: int, what: str = "the evaluation"):
    """Yields the evaluation's on_batch. Before each batch: a signal noted stops the
    evaluation there (`Stopped`; one process only: several would have to agree at each batch,
    so theirs run to the end), and the watchdog is re-armed at its floor (an evaluation may
    rightly take minutes; one batch, the first one's compile included, does not take
    --watchdog_min_s), disarmed at the end."""
    alone, doing = jax.process_count() == 1, interrupt.doing()

    def on_batch(done: int, batches: int) -> None:
        if alone and (name := interrupt.received()) is not None:
            raise Stopped(name, what, done + 1, batches)
        interrupt.at(f"batch {done + 1} of {batches} of {what}" if alone else what)
        if dog is not None:
            dog.arm(f"evaluation batch {done + 1} of {batches} at step {step}", None)

    try:
        yield on_batch
    finally:
        interrupt.at(*doing)
        if dog is not None:
            dog.disarm()


def evaluate_now(
    setup,
    state,
    progress: Progress,
    clock: RunClock,
    mlog: MLLog,
    *,
    oob: bool,
    training: bool,
    dog=None,
) -> EnsembleQuality | None:
    """The ensemble's quality at `progress.step` (its out-of-bag estimate too with `oob`);
    during training the evaluation is cut out of its epoch. With `dog` (run/watchdog.Watchdog)
    each eval batch is bounded by --watchdog_min_s. A signal noted meanwhile stops it before
    its next batch (`Stopped`)."""
    what = f"the evaluation at step {progress.step}" if training else "the final evaluation"
    with (
        clock.evaluating(training) as span,
        _watched(dog, progress.step, what) as on_batch,
        jax.profiler.TraceAnnotation(EVALUATION),  # a phase of a profiler trace
    ):
        quality = evaluate(setup, state, frozenset(progress.diverged), oob=oob, on_batch=on_batch)
        span.stop()
    if quality is not None:
        at_s = clock.since_start(span.end)
        progress.curve.append(point(quality, progress.step, setup.sampler.steps_per_epoch, at_s))
        mlog.evaluated(quality, span.start, span.end)
        logging.info(
            "evaluated at step %d in %.1f s: ensemble %s %s",
            progress.step,
            span.end - span.start,
            setup.workload.metric,
            "undefined" if quality.ensemble is None else f"{quality.ensemble:.4f}",
        )
    return quality


def with_oob(
    setup, state, quality: EnsembleQuality, clock: RunClock, dog=None, step: int = 0
) -> EnsembleQuality:
    """An evaluation taken at the final step, completed with the out-of-bag estimate: the run's
    quality without evaluating the held-out set a second time."""
    what = "the final evaluation's out-of-bag estimate"
    with clock.evaluating(training=False), _watched(dog, step, what) as on_batch:
        oob = out_of_bag(setup, state, np.asarray(quality.kept), on_batch)
    return dataclasses.replace(quality, oob=oob)


def point(quality: EnsembleQuality, step: int, steps_per_epoch: int, wall_s: float) -> dict:
    """A curve point: epochs trained, the step, seconds since run_start, and the qualities."""
    return {
        "epoch": step / steps_per_epoch,
        "step": step,
        "wall_s": wall_s,
        "ensemble": quality.ensemble,
        "member_mean": quality.member_mean,
        "members": quality.members,
    }


def reached(quality: EnsembleQuality | None, target: float | None) -> bool:
    """Whether the ensemble's quality is at the target (an undefined quality never is)."""
    return (
        quality is not None
        and target is not None
        and quality.ensemble is not None
        and quality.ensemble >= target
    )


def time_to_target(
    curve: list[dict], target: float | None, resumes: list[dict], status: str
) -> tuple[float | None, str | None]:
    """(seconds, None), or (None, why)."""
    if target is None:
        return None, "no quality target (no held-out quality)"
    if status == Status.INVALID:
        return None, "the run is invalid"
    # An evaluation whose quality is undefined (R² over one held-out example) reaches nothing.
    defined = [p for p in curve if p["ensemble"] is not None]
    first = next((p for p in defined if p["ensemble"] >= target), None)
    if first is None:
        if not curve:
            return None, "no evaluation"
        best = f"best {max(p['ensemble'] for p in defined):.4f}" if defined else "quality undefined"
        return None, (
            f"the ensemble never reached the target {target:g}: {best} in "
            f"{len(curve)} evaluation(s)"
        )
    resumed = [r["at_step"] for r in resumes if r["at_step"] < first["step"]]
    if resumed:
        return None, (
            f"the target was first reached at step {first['step']}, after a resume at step "
            f"{resumed[0]}: time to target is defined for an uninterrupted run"
        )
    return first["wall_s"], None
