"""What happens between training steps, one hook per concern, each on its own schedule: the
divergence check, the progress line, the evaluation (and the stop at target), the preemption
agreement and the checkpoint. The loop calls them in that order after every step; a hook that
ends the run returns a `Stop`. Modelled on levanter's trainer hooks and big_vision's `itstime`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections.abc import Callable

import jax
import numpy as np
from absl import logging

from hpcai_jax import distributed
from hpcai_jax.engine.evaluate import EnsembleQuality
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import curve, evaluation, members
from hpcai_jax.run import interval as interval_rule
from hpcai_jax.run import record as run_record
from hpcai_jax.run.checkpoint import Checkpointer
from hpcai_jax.run.clock import RunClock
from hpcai_jax.run.preemption import FAILED_EXIT_CODE, PREEMPTED_EXIT_CODE, PreemptionGuard
from hpcai_jax.run.progress import DivergenceWatch, Progress
from hpcai_jax.run.timing import format_duration
from hpcai_jax.telemetry.mllog import MLLog


class Status(enum.Enum):
    """How a run ends, as its record's `status` says it."""

    COMPLETE = "complete"
    PARTIAL = "partial"  # preempted; resumable from its checkpoint
    INVALID = "invalid"  # diverged: no FLOPS figure


@dataclasses.dataclass(frozen=True)
class Stop:
    """A hook's reason to end the training loop before its last step."""

    status: Status
    reason: str = ""
    at_target: bool = False


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How the training loop ended: its status, why, and the process's exit code."""

    status: Status
    reason: str = ""
    stopped_at_target: bool = False

    @property
    def exit_code(self) -> int:
        if self.status is Status.PARTIAL:
            return PREEMPTED_EXIT_CODE
        return FAILED_EXIT_CODE if self.status is Status.INVALID else 0


def due(done: int, period: int, total: int | None = None) -> bool:
    """Whether a hook of `period` steps runs after `done` steps; with `total`, also after the
    last step (big_vision's `itstime`). A period of 0 never runs."""
    return bool(period) and (done % period == 0 or done == total)


@dataclasses.dataclass
class Context:
    """What the hooks act on: the run's live values (the loop replaces `state` every step)."""

    setup: object
    state: object
    progress: Progress
    clock: RunClock
    mlog: MLLog
    watch: DivergenceWatch
    ckpt: Checkpointer | None
    total_steps: int
    dog: object = None  # run/watchdog.Watchdog: bounds steps, agreements, saves, eval batches

    def unwatched(self) -> None:
        """What follows may rightly take long (an evaluation, which re-arms the watchdog batch
        by batch): the watchdog stands down until it is armed again."""
        if self.dog is not None:
            self.dog.disarm()

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
        self.progress.skipped_examples = run_record.skipped_examples(self.setup, self.progress)
        self.progress.mllog_lines = self.mlog.line_count()
        self.ckpt.save(step, self.state, self.progress.to_meta())


Hook = Callable[[Context, int], Stop | None]


@dataclasses.dataclass
class DivergenceCheck:
    """Reads the members' finite flags every `every` steps and after the last one; under
    --on_divergence=stop a non-finite member ends the run."""

    every: int

    def __call__(self, ctx: Context, done: int) -> Stop | None:
        if not due(done, self.every, ctx.total_steps):
            return None
        with ctx.clock.agreeing(jax.process_count() > 1):  # a gather of every process's flags
            why = ctx.watch.check(keep_last=True)
        return Stop(Status.INVALID, why) if why else None


@dataclasses.dataclass
class ProgressLine:
    """A log line each time `every` more steps have completed, and after the last: `step N/TOTAL`
    (N steps done), the Nth step's loss and training metrics, the rate and the time left. A step
    has completed once the next is dispatched (run/clock.py), so the line waits for that rather
    than for the device; only the last step is waited for."""

    every: int
    examples_per_step: int
    logged: int = dataclasses.field(default=-1, init=False)  # the last N a line was written for

    def __call__(self, ctx: Context, done: int) -> Stop | None:
        if self.every and done == ctx.total_steps:
            self._line(ctx)  # the step before the last, where its line is due
            ctx.clock.flush()
        self._line(ctx)
        return None

    def _line(self, ctx: Context) -> None:
        completed, metrics = ctx.progress.step, ctx.clock.last_metrics
        if metrics is None or completed == self.logged:
            return
        if not due(completed, self.every, ctx.total_steps):
            return
        self.logged = completed
        if jax.process_index() != 0:  # one progress line per job, not one per process
            return
        step_s = ctx.progress.step_s
        median = float(np.median(step_s)) if step_s else 0.0
        logging.info(
            "step %d/%d  loss %.4f  %s  %s examples/s  ETA %s",
            completed,
            ctx.total_steps,
            members.local_mean(metrics.loss),
            "  ".join(f"train {k} {members.local_mean(v):.3f}" for k, v in metrics.metrics.items()),
            f"{self.examples_per_step / median:.0f}" if median else "-",
            format_duration((ctx.total_steps - completed) * median),
        )


@dataclasses.dataclass
class Evaluation:
    """The ensemble evaluated every `every` steps (--eval_every_epochs); a diverged member votes
    no more. With `target` (--stop_at_target) the run ends at the first evaluation that
    reaches it. `last` is the latest evaluation: (step, quality)."""

    every: int
    target: float | None = None
    last: tuple[int, EnsembleQuality | None] | None = None

    def __call__(self, ctx: Context, done: int) -> Stop | None:
        if not due(done, self.every):
            return None
        ctx.clock.flush()
        if why := ctx.watch.check(keep_last=False):
            return Stop(Status.INVALID, why)
        ctx.unwatched()  # what precedes the first batch (its setup) is not a step's
        quality = ctx.evaluate(oob=False, training=True)
        self.last = (done, quality)
        if self.target is not None and curve.reached(quality, self.target):
            logging.info("the ensemble reached the target %g at step %d", self.target, done)
            return Stop(Status.COMPLETE, at_target=True)
        return None


@dataclasses.dataclass
class Preemption:
    """A SIGTERM stops the run at a step boundary every process agrees on (agreed every
    `every` steps); the checkpoint after the loop makes it resumable."""

    guard: PreemptionGuard
    every: int

    def __call__(self, ctx: Context, done: int) -> Stop | None:
        if done >= ctx.total_steps:
            return None
        at_check = done % self.every == 0
        with ctx.clock.agreeing(at_check and jax.process_count() > 1):
            stop = self.guard.stop_now(at_check)
        if stop:
            return Stop(Status.PARTIAL, f"preempted by {self.guard.signal_name} at step {done}")
        return None


@dataclasses.dataclass
class Checkpoint:
    """A save whenever the checkpointer is due (--checkpoint_every), inside the training time;
    the final save comes after the loop. Under --checkpoint_every=auto the first save is a probe
    at `probe_at`, waited for until it is on disk, and its times set the interval
    (run/interval.py); `interval` is what the record says."""

    interval: interval_rule.Interval
    probe_at: int | None = None  # auto: the step of the probe save; None once decided

    def __call__(self, ctx: Context, done: int) -> Stop | None:
        if ctx.ckpt is None or done >= ctx.total_steps:
            return None
        if self.probe_at is not None:
            if done >= self.probe_at:
                self._probe(ctx, done)
            return None
        if ctx.ckpt.due(done):
            with ctx.bounded(f"the checkpoint save of step {done}"), ctx.clock.checkpointing():
                ctx.save(done)
        return None

    def _probe(self, ctx: Context, done: int) -> None:
        with ctx.bounded(f"the probe save of step {done}"), ctx.clock.checkpointing():
            start = run_clock.read()
            ctx.save(done)
            saved = run_clock.read()
            ctx.ckpt.wait()
            written = run_clock.read()
        step_s = interval_rule.median_step(ctx.progress.step_s) or (saved - start)
        # Every process must save at the same steps: process 0's measurements decide.
        figures = np.asarray([saved - start, written - start, step_s], np.float64)
        save_s, write_s, step_s = (float(v) for v in distributed.allgather(figures)[0])
        mtbf_h, mtbf_why = interval_rule.mtbf_hours(
            ctx.setup.config.reliability.mtbf_hours, ctx.setup.layout.num_devices
        )
        self.interval = interval_rule.young_daly(
            save_s, write_s, step_s, mtbf_h, mtbf_why, ctx.total_steps - done
        )
        ctx.ckpt.every, self.probe_at = self.interval.steps, None
        logging.info("checkpoint interval %s", self.interval.why)


def poison(state, member: int):
    """The --inject_nan test hook: NaN in every parameter of one member, shardings kept."""
    import jax.numpy as jnp

    shardings = jax.tree.map(lambda x: x.sharding, state)

    def set_nan(s):
        return s.replace(params=jax.tree.map(lambda p: p.at[member].set(jnp.nan), s.params))

    return jax.jit(set_nan, out_shardings=shardings, donate_argnums=0)(state)
