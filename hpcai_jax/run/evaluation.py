"""Evaluations of a training run: the members' and the ensemble's held-out quality now, its
point on the quality curve and its MLLOG lines, timed on the run's clock (docs/score.md §5)."""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import numpy as np
from absl import logging

from hpcai_jax.engine.evaluate import EnsembleQuality, evaluate, out_of_bag
from hpcai_jax.run import curve
from hpcai_jax.run.clock import RunClock
from hpcai_jax.run.progress import Progress
from hpcai_jax.telemetry.mllog import MLLog
from hpcai_jax.telemetry.profile import EVALUATION


@contextlib.contextmanager
def _watched(dog, step: int):
    """Yields the evaluation's on_batch: the watchdog re-armed before each batch at its floor
    (an evaluation may rightly take minutes; one batch, the first one's compile included, does
    not take --watchdog_min_s), disarmed at the end; None without a watchdog."""
    if dog is None:
        yield None
        return

    def on_batch(done: int, batches: int) -> None:
        dog.arm(f"evaluation batch {done + 1} of {batches} at step {step}", None)

    try:
        yield on_batch
    finally:
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
    each eval batch is bounded by --watchdog_min_s."""
    with (
        clock.evaluating(training) as span,
        _watched(dog, progress.step) as on_batch,
        jax.profiler.TraceAnnotation(EVALUATION),  # a phase of a profiler trace
    ):
        quality = evaluate(setup, state, frozenset(progress.diverged), oob=oob, on_batch=on_batch)
        span.stop()
    if quality is not None:
        at_s = clock.since_start(span.end)
        progress.curve.append(
            curve.point(quality, progress.step, setup.sampler.steps_per_epoch, at_s)
        )
        mlog.evaluated(quality, span.start, span.end)
        logging.info(
            "evaluated at step %d in %.1f s: ensemble %s %.4f",
            progress.step,
            span.end - span.start,
            setup.workload.metric,
            quality.ensemble,
        )
    return quality


def with_oob(
    setup, state, quality: EnsembleQuality, clock: RunClock, dog=None, step: int = 0
) -> EnsembleQuality:
    """An evaluation taken at the final step, completed with the out-of-bag estimate: the run's
    quality without evaluating the held-out set a second time."""
    with clock.evaluating(training=False), _watched(dog, step) as on_batch:
        oob = out_of_bag(setup, state, np.asarray(quality.kept), on_batch)
    return dataclasses.replace(quality, oob=oob)
