"""Evaluations of a training run: the members' and the ensemble's held-out quality now, its
point on the quality curve and its MLLOG lines, timed on the run's clock (docs/score.md §5)."""

from __future__ import annotations

import dataclasses

import numpy as np
from absl import logging

from hpcai_jax.engine.evaluate import EnsembleQuality, evaluate, out_of_bag
from hpcai_jax.run import curve
from hpcai_jax.run.clock import RunClock
from hpcai_jax.run.progress import Progress
from hpcai_jax.telemetry.mllog import MLLog


def evaluate_now(
    setup, state, progress: Progress, clock: RunClock, mlog: MLLog, *, oob: bool, training: bool
) -> EnsembleQuality | None:
    """The ensemble's quality at `progress.step` (its out-of-bag estimate too with `oob`);
    during training the evaluation is cut out of its epoch."""
    with clock.evaluating(training) as span:
        quality = evaluate(setup, state, frozenset(progress.diverged), oob=oob)
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


def with_oob(setup, state, quality: EnsembleQuality, clock: RunClock) -> EnsembleQuality:
    """An evaluation taken at the final step, completed with the out-of-bag estimate: the run's
    quality without evaluating the held-out set a second time."""
    with clock.evaluating(training=False):
        oob = out_of_bag(setup, state, np.asarray(quality.kept))
    return dataclasses.replace(quality, oob=oob)
