"""What happens between training steps, one hook per concern, each registered with its
schedule (`Hooks.add(hook, every=N)` or `when=`, levanter's `TrainerHooks.add_hook`; big_vision's
`itstime`): the divergence check, the progress line, the evaluation (and the stop at target),
the curves, the preemption agreement, the checkpoint and the profile window. The trainer runs
them in the order they were added; a hook that ends the run returns its `Outcome`.

A hook is called as hook(info, run): `info` (StepInfo) is what it reads, the step count, the
state, the latest booked step's metrics and the run's bookkeeping; `run` (Services) is what it
may ask of the trainer: book the step in flight, agree with the other processes, read the
members' flags, evaluate, save, keep the watchdog's bounds. Nothing else of the run reaches it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TypeVar

import jax
import numpy as np
from absl import logging

from hpcai_jax import distributed
from hpcai_jax.engine.evaluate import EnsembleQuality
from hpcai_jax.engine.setup import RunSetup
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.engine.step import StepMetrics
from hpcai_jax.errors import PREEMPTED_EXIT_CODE, DiskFull
from hpcai_jax.records import Status
from hpcai_jax.run import checkpoint_interval as interval_rule
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import evaluation, kept_weights, member_figures
from hpcai_jax.run.checkpoint import Checkpointer
from hpcai_jax.run.clock import RunClock, format_duration
from hpcai_jax.run.guards import FAILED_EXIT_CODE, PreemptionGuard, Watchdog
from hpcai_jax.run.progress import DivergenceWatch, Progress, bad_examples, skipped_examples
from hpcai_jax.telemetry.mllog import MLLog


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How the training loop ends: its status, why, whether at the quality target, and a
    complete run's final quality (`final_quality`; None before it and for another run). A hook
    that ends the run returns one; the loop's end settles the last (`settle`)."""

    status: Status
    reason: str = ""
    stopped_at_target: bool = False
    quality: EnsembleQuality | None = None

    @property
    def exit_code(self) -> int:
        if self.status is Status.PARTIAL:
            return PREEMPTED_EXIT_CODE
        return FAILED_EXIT_CODE if self.status is Status.INVALID else 0


def due(done: int, period: int, total: int | None = None) -> bool:
    """Whether a hook of `period` steps runs after `done` steps; with `total`, also after the
    last step (big_vision's `itstime`). A period of 0 never runs."""
    return bool(period) and (done % period == 0 or done == total)


_H = TypeVar("_H")


@dataclasses.dataclass(frozen=True)
class Registered:
    """A hook and its schedule: after every `every` steps (0: never), and after the last step
    too where `at_last`; or, for a schedule the hook learns as the run goes (the checkpoint's
    interval, the profile window), whenever `when(done)` says."""

    hook: Hook
    every: int
    at_last: bool = False
    when: Callable[[StepInfo], bool] | None = None

    def due(self, info: StepInfo) -> bool:
        if self.when is not None:
            return self.when(info)
        return due(info.done, self.every, info.total if self.at_last else None)


class Hooks:
    """The hooks between steps, in the order they run, each with its schedule."""

    def __init__(self) -> None:
        self._registered: list[Registered] = []

    def add(
        self,
        hook: _H,
        every: int | None = None,
        *,
        at_last: bool = False,
        when: Callable[[StepInfo], bool] | None = None,
    ) -> _H:
        """Registers `hook` to run after every `every` steps (and after the last: `at_last`),
        or whenever `when(info)` holds; one schedule, so `when` with `every` or `at_last` is
        refused rather than one silently winning. Neither: every step."""
        if when is not None and (every is not None or at_last):
            raise ValueError(f"hook {hook!r}: a schedule of every= (at_last=) or when=, not both")
        self._registered.append(Registered(hook, 1 if every is None else every, at_last, when))
        return hook

    def run(self, ctx: Context, done: int) -> Outcome | None:
        """Runs the hooks due after `done` steps; the first Outcome ends the round and the
        run."""
        run = Services(ctx)
        for r in self._registered:  # a hook before may have booked a step: a fresh info each
            info = StepInfo(done, ctx.total_steps, ctx.state, ctx.clock.last_metrics, ctx.progress)
            if not r.due(info):
                continue
            if stop := r.hook(info, run):
                return stop
        return None


@dataclasses.dataclass(frozen=True)
class StepInfo:
    """What a hook reads after a step (levanter's `StepInfo`): `done` of `total` steps
    dispatched, the members' `state` after them, the latest booked step's `metrics` (its loss
    and training metrics; None before one is booked) and the run's bookkeeping (`progress`:
    the booked step count, step times, evaluations, epochs), read only."""

    done: int
    total: int
    state: EnsembleState
    metrics: StepMetrics | None
    progress: Progress


class Services:
    """What a hook may ask of the trainer between steps (module docstring)."""

    def __init__(self, ctx: Context):
        self._ctx = ctx

    def flush(self) -> StepMetrics | None:
        """Books the step in flight (waits for it); the latest booked step's metrics."""
        self._ctx.clock.flush()
        return self._ctx.clock.last_metrics

    def agreeing(self, several: bool):
        """A host collective of every process, booked as agreement time (run/clock.py)."""
        return self._ctx.clock.agreeing(several)

    def aside(self):
        """Host work that is no step's and no epoch's (run/clock.py)."""
        return self._ctx.clock.aside()

    def diverged(self, keep_last: bool) -> str | None:
        """The members' finite flags read: why the run is invalid, or None."""
        return self._ctx.watch.check(keep_last=keep_last)

    def evaluate(self, *, training: bool) -> EnsembleQuality | None:
        """The ensemble evaluated now, the watchdog standing down until its first batch."""
        if self._ctx.dog is not None:  # the setup before its first batch is not a step's:
            self._ctx.dog.disarm()  # each batch re-arms the watchdog (run/evaluation.py)
        return self._ctx.evaluate(oob=False, training=training)

    @contextlib.contextmanager
    def saving(self, what: str):
        """A save inside the training time: bounded by the watchdog, booked as checkpoint time."""
        with self._ctx.bounded(what), self._ctx.clock.checkpointing():
            yield

    def save(self, step: int) -> None:
        """A checkpoint of the run now (inside `saving`)."""
        self._ctx.save(step)

    def wait_saved(self) -> None:
        """Waits until the checkpoints saved so far are on disk."""
        self._ctx.ckpt.wait()

    def save_final(self, step: int) -> None:
        """The run's last checkpoint, complete on disk before the record may say "resumable"."""
        with self.saving(f"the final checkpoint save of step {step}"):
            self.save(step)
            self._ctx.ckpt.close()

    def booked(self) -> list[tuple[int, StepMetrics, float | None]]:
        """The steps booked since the last call: (step, metrics, seconds or None if untimed)."""
        return self._ctx.clock.drain_booked()


@dataclasses.dataclass
class Context:
    """What the hooks act on: the run's live values (the loop replaces `state` every step)."""

    setup: RunSetup
    state: EnsembleState
    progress: Progress
    clock: RunClock
    mlog: MLLog
    watch: DivergenceWatch
    ckpt: Checkpointer | None
    total_steps: int
    dog: Watchdog | None = None  # bounds steps, agreements, saves, eval batches

    @classmethod
    def open(
        cls, setup: RunSetup, state, progress: Progress, mlog: MLLog, ckpt, batches, held
    ) -> Context:
        """The hooks' view of a run going on from `progress` with the input pipeline `batches`:
        its clock (timing from the first step after the warm-up), divergence watch and
        watchdog (closed with the run, `held`'s: an armed one must not outlive it)."""
        tc, rc = setup.config.train, setup.config.reliability
        first, total = progress.step, setup.total_steps
        timed_from = first + min(tc.timing_warmup_steps, max(0, total - first - 1))
        clock = RunClock(progress, timed_from, setup.sampler.steps_per_epoch, batches, mlog.epoch)
        watch = DivergenceWatch(
            progress,
            rc.on_divergence,
            lambda member, step: bad_examples(setup, member, step),
        )
        dog = Watchdog(rc.watchdog_factor, rc.watchdog_min_s, jax.process_index())
        held.callback(dog.close)
        return cls(setup, state, progress, clock, mlog, watch, ckpt, total, dog)

    @contextlib.contextmanager
    def bounded(self, what: str):
        """A write that may take long but not for ever (a checkpoint save, the kept weights):
        the watchdog bounds it by --watchdog_min_s alone, so that a hung file system or a
        peer stopped inside orbax's barriers ends the run with the hung code (requeued)
        rather than holding the job, or failing unrequeued, at orbax's own 20-minute timeout."""
        if self.dog is None:
            yield
            return
        self.dog.arm(what, None)  # no step median: the floor
        try:
            yield
        finally:
            self.dog.disarm()

    def evaluate(self, *, oob: bool, training: bool) -> EnsembleQuality | None:
        """The ensemble evaluated now (run/evaluation.evaluate_now), each batch watched."""
        return evaluation.evaluate_now(
            self.setup,
            self.state,
            self.progress,
            self.clock,
            self.mlog,
            oob=oob,
            training=training,
            dog=self.dog,
        )

    def save(self, step: int) -> None:
        """A checkpoint of the run now: device state, and what its record will need."""
        self.clock.carry_run_time()
        self.progress.skipped_examples = skipped_examples(self.setup, self.progress)
        self.progress.mllog_lines = self.mlog.line_count()
        self.ckpt.save(step, self.state, self.progress.to_meta())


Hook = Callable[[StepInfo, Services], Outcome | None]


@dataclasses.dataclass
class DivergenceCheck:
    """Reads the members' finite flags (registered every --divergence_check_every steps and
    after the last one); under --on_divergence=stop a non-finite member ends the run."""

    def __call__(self, info: StepInfo, run: Services) -> Outcome | None:
        with run.agreeing(jax.process_count() > 1):  # a gather of every process's flags
            why = run.diverged(keep_last=True)
        return Outcome(Status.INVALID, why) if why else None


@dataclasses.dataclass
class ProgressLine:
    """A log line each time `every` more steps have completed, and after the last: `step N/TOTAL`
    (N steps done), the Nth step's loss and training metrics, the rate and the time left. A step
    has completed once the next is dispatched (run/clock.py), so the line waits for that rather
    than for the device; only the last step is waited for."""

    every: int
    examples_per_step: int
    logged: int = dataclasses.field(default=-1, init=False)  # the last N a line was written for

    def due(self, info: StepInfo) -> bool:
        """The schedule: once a due step is booked (its line not yet written), and after the
        last step, which is waited for."""
        return bool(self.every) and (info.done == info.total or self._due(info, info.metrics))

    def _due(self, info: StepInfo, metrics) -> bool:
        completed = info.progress.step
        return (
            metrics is not None
            and completed != self.logged
            and due(completed, self.every, info.total)
        )

    def __call__(self, info: StepInfo, run: Services) -> Outcome | None:
        metrics = info.metrics
        if info.done == info.total:
            self._line(info, metrics)  # the step before the last, where its line is due
            metrics = run.flush()
        self._line(info, metrics)
        return None

    def _line(self, info: StepInfo, metrics) -> None:
        completed, total = info.progress.step, info.total
        if not self._due(info, metrics):
            return
        self.logged = completed
        if jax.process_index() != 0:  # one progress line per job, not one per process
            return
        step_s = info.progress.step_s
        median = float(np.median(step_s)) if step_s else 0.0
        logging.info(
            "step %d/%d  loss %.4f  %s  %s examples/s  ETA %s",
            completed,
            total,
            member_figures.local_mean(metrics.loss),
            "  ".join(
                f"train {k} {member_figures.local_mean(v):.3f}" for k, v in metrics.metrics.items()
            ),
            f"{self.examples_per_step / median:.0f}" if median else "-",
            format_duration((total - completed) * median),
        )


@dataclasses.dataclass
class Evaluation:
    """The ensemble evaluated (registered every --eval_every_epochs); a diverged member votes no
    more. With `target` (--stop_at_target) the run ends at the first evaluation that reaches
    it. `last` is the latest evaluation: (step, quality)."""

    target: float | None = None
    last: tuple[int, EnsembleQuality | None] | None = None

    def __call__(self, info: StepInfo, run: Services) -> Outcome | None:
        done = info.done
        run.flush()
        if why := run.diverged(keep_last=False):
            return Outcome(Status.INVALID, why)
        try:
            quality = run.evaluate(training=True)
        except evaluation.Stopped as e:  # a signal: the run ends here, resumable
            return Outcome(Status.PARTIAL, e.reason)
        self.last = (done, quality)
        if self.target is not None and evaluation.reached(quality, self.target):
            logging.info("the ensemble reached the target %g at step %d", self.target, done)
            return Outcome(Status.COMPLETE, stopped_at_target=True)
        return None


@dataclasses.dataclass
class Preemption:
    """A SIGTERM stops the run at a step boundary every process agrees on (agreed every
    `every` steps); the checkpoint after the loop makes it resumable. From its making to
    `restore` its guard notes SIGTERM and a first SIGINT instead of acting on them
    (run/guards.py)."""

    every: int
    guard: PreemptionGuard = dataclasses.field(default_factory=PreemptionGuard)

    def restore(self) -> None:
        """The signal handlers as they were before the guard (a second call does nothing)."""
        self.guard.restore()

    def __call__(self, info: StepInfo, run: Services) -> Outcome | None:
        done = info.done
        if done >= info.total:
            return None
        at_check = done % self.every == 0
        with run.agreeing(at_check and jax.process_count() > 1):
            stop = self.guard.stop_now(at_check)
        if stop:
            return Outcome(Status.PARTIAL, f"preempted by {self.guard.signal_name} at step {done}")
        return None


@dataclasses.dataclass
class Checkpoint:
    """A save whenever the checkpointer is due (--checkpoint_every), inside the training time;
    the final save comes after the loop. Under --checkpoint_every=auto the first save is a probe
    at `probe_at`, waited for until it is on disk, and its times set the interval
    (run/checkpoint_interval.py); `interval` is what the record says."""

    interval: interval_rule.Interval
    ckpt: Checkpointer | None = None
    probe_at: int | None = None  # auto: the step of the probe save; None once decided
    total: int = 0  # the run's steps: none is saved at or after the last (the final save is)
    mtbf: tuple[float | None, int] = (None, 1)  # --mtbf_hours, and the devices it scales by

    def due(self, info: StepInfo) -> bool:
        """The schedule: the probe at `probe_at` under auto, then every interval's steps."""
        done = info.done
        if self.ckpt is None or done >= self.total:
            return False
        if self.probe_at is not None:
            return done >= self.probe_at
        return self.ckpt.due(done)

    def __call__(self, info: StepInfo, run: Services) -> Outcome | None:
        done = info.done
        if self.probe_at is not None:
            self._probe(info, run)
            return None
        with run.saving(f"the checkpoint save of step {done}"):
            run.save(done)
        return None

    def _probe(self, info: StepInfo, run: Services) -> None:
        done = info.done
        with run.saving(f"the probe save of step {done}"):
            start = run_clock.read()
            run.save(done)
            saved = run_clock.read()
            run.wait_saved()
            written = run_clock.read()
        step_s = interval_rule.median_step(info.progress.step_s) or (saved - start)
        # Every process must save at the same steps: process 0's measurements decide.
        figures = np.asarray([saved - start, written - start, step_s], np.float64)
        save_s, write_s, step_s = (float(v) for v in distributed.allgather(figures)[0])
        mtbf_h, mtbf_why = interval_rule.mtbf_hours(*self.mtbf)
        self.interval = interval_rule.young_daly(
            save_s, write_s, step_s, mtbf_h, mtbf_why, info.total - done
        )
        self.ckpt.every, self.probe_at = self.interval.steps, None
        logging.info("checkpoint interval %s", self.interval.why)


def checkpoint(setup: RunSetup, first: int, ckpt: Checkpointer | None) -> Checkpoint:
    """Saves every --checkpoint_every steps, or under auto a probe save after the warm-up and
    PROBE_STEPS timed steps of this segment, whose times set the interval."""
    rc, total = setup.config.reliability, setup.total_steps
    if not rc.checkpoint_dir or ckpt is None:
        return Checkpoint(interval_rule.Interval(None, "no --checkpoint_dir"))
    if not rc.checkpoint_auto:
        return Checkpoint(interval_rule.fixed(rc.checkpoint_steps), ckpt, total=total)
    probe_at = first + setup.config.train.timing_warmup_steps + interval_rule.PROBE_STEPS
    mtbf = (rc.mtbf_hours, setup.layout.num_devices)
    mtbf_h, _ = interval_rule.mtbf_hours(*mtbf)
    return Checkpoint(interval_rule.not_probed(probe_at, mtbf_h), ckpt, probe_at, total, mtbf)


def settle(ctx: Context, stop: Outcome | None) -> Outcome:
    """The loop's end: every step's flags read (a preemption's too, so a member that went
    non-finite just before the stop is dated or pruned as it would have been without it)."""
    outcome = stop or Outcome(Status.COMPLETE)
    if outcome.status is not Status.INVALID and (why := ctx.watch.check(keep_last=False)):
        outcome = Outcome(Status.INVALID, why, outcome.stopped_at_target)
    rc, m = ctx.setup.config.reliability, ctx.setup.layout.ensemble_size
    if rc.on_divergence == "prune" and len(ctx.progress.diverged) == m:
        outcome = Outcome(Status.INVALID, "every member diverged", outcome.stopped_at_target)
    return outcome


def final_save(ctx: Context, outcome: Outcome) -> DiskFull | None:
    """The checkpoint a complete or preempted run ends with, then a complete run's weights
    kept (run/kept_weights.py): the full disk that kept none, for the run to raise once its
    record says so, else None. Still under the preemption guard: a SIGTERM now is noted, not
    fatal, so the save is never cut short by it (a second SIGINT, a person's "stop now", does:
    run/interrupt.py)."""
    if ctx.ckpt and outcome.status is not Status.INVALID:
        Services(ctx).save_final(ctx.progress.step)
    elif outcome.status is Status.PARTIAL:
        logging.warning("preempted without --checkpoint_dir: this run cannot be resumed")
    with ctx.bounded("keeping the members' final weights"):
        return kept_weights.keep(ctx, outcome.status is Status.COMPLETE)


def final_quality(
    ctx: Context, outcome: Outcome, last_eval: tuple[int, EnsembleQuality | None] | None
) -> Outcome:
    """The outcome with a complete run's quality: the last evaluation where it was taken at
    the final step (only the out-of-bag estimate still to compute), else a final evaluation;
    a run that did not complete has none. A signal during it (run/evaluation.Stopped) makes
    the run `partial`, resumable from the final checkpoint, which re-evaluates."""
    if outcome.status is not Status.COMPLETE:
        return outcome
    last = ctx.progress.step
    try:
        if last_eval and last_eval[0] == last and last_eval[1]:
            quality = evaluation.with_oob(
                ctx.setup, ctx.state, last_eval[1], ctx.clock, ctx.dog, last
            )
        else:
            quality = ctx.evaluate(oob=True, training=False)
    except evaluation.Stopped as e:
        logging.warning("%s", e.reason)
        return Outcome(Status.PARTIAL, e.reason)
    return dataclasses.replace(outcome, quality=quality)


def poison(state, member: int):
    """The --inject_nan test hook: NaN in every parameter of one member, shardings kept."""
    import jax.numpy as jnp

    shardings = jax.tree.map(lambda x: x.sharding, state)

    def set_nan(s):
        return s.replace(params=jax.tree.map(lambda p: p.at[member].set(jnp.nan), s.params))

    return jax.jit(set_nan, out_shardings=shardings, donate_argnums=0)(state)
