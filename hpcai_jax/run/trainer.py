"""`--mode=train`: the benchmark run as a trainer in five named stages, restore, compile, run
steps, finish and record, with the hooks between steps registered with their periods
(run/hooks.py) and everything the run holds released by one `contextlib.ExitStack`, newest
first, on every path. Time is the run clock's (run/clock.py); docs/design.md has the method and
the step's path, docs/score.md what each figure means.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import jax
from absl import logging

from hpcai_jax import distributed, records
from hpcai_jax.config import RunConfig
from hpcai_jax.distributed import barrier
from hpcai_jax.engine.setup import RunSetup, build_setup
from hpcai_jax.errors import DiskFull
from hpcai_jax.records import Status
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import hooks, interrupt, observe, outputs, resume, startup, summary
from hpcai_jax.run import record as run_record
from hpcai_jax.run.hooks import Outcome
from hpcai_jax.run.measured_step import MeasuredStep, given_bandwidth, measure_step


def run_train(config: RunConfig) -> int:
    """`--mode=train`: the benchmark run; prints the summary (process 0), returns the exit code."""
    done = train_and_evaluate(config)
    if jax.process_index() == 0:
        print(summary.summary(done.record, done.path))
        if line := _interrupted_line(done, config):
            print(line, file=sys.stderr, flush=True)
    return done.exit_code


@dataclasses.dataclass(frozen=True)
class Finished:
    """A training run's end: its typed record (as written), where it was written (None on the
    processes that write nothing) and the exit code."""

    record: records.TrainRecord
    path: str | None
    exit_code: int


def _interrupted_line(done: Finished, config: RunConfig) -> str | None:
    """What a signal in the training loop or after it left (docs/reliability.md, Interrupts):
    a preempted run's checkpoint and partial record, or the record of a run that finished
    before it acted on the signal; None if no signal came."""
    record, exit_code = done.record, done.exit_code
    kept = f"the record {done.path} ({record.status})"
    if record.status == Status.PARTIAL.value:
        steps, where = record.timing.steps, config.reliability.checkpoint_dir
        if where:
            return (
                f"hpcai_jax: {record.reason}: kept the checkpoint of step {steps} in {where}"
                f" and {kept}; the same command resumes; exit {exit_code}"
            )
        return (
            f"hpcai_jax: {record.reason}: kept {kept}; without --checkpoint_dir the run "
            f"cannot resume; exit {exit_code}"
        )
    if (name := interrupt.received()) is not None:
        return f"hpcai_jax: {name} came after the last step: kept {kept}; exit {exit_code}"
    return None


def train_and_evaluate(config: RunConfig) -> Finished:
    """Runs the bagged-ensemble benchmark: its record (also written), path and exit code."""
    wall_start = run_clock.read()
    outputs.refuse_at_once(config)  # the results directory and the names of its outputs
    bandwidth = given_bandwidth(config)  # a bad --stream_record fails at once
    # --resume_members=fit: the members that fit these devices (docs/reliability.md).
    fitted = resume.fit(config, jax.device_count(), jax.local_device_count())
    with startup.phase("setup"):
        setup = build_setup(fitted.config)
    ckpt = resume.checkpointer(config, setup, fitted)
    observe.check_profile_window(setup)
    # Everything that can be checked before any work is (the layout on these devices, the data,
    # the results directory, a --stream_record): main's settings table may follow.
    startup.valid()
    return Trainer(setup, ckpt, wall_start, bandwidth, fitted.dropped).run()


class Trainer:
    """One training run (or one segment of a resumed one): `run` goes through the stages."""

    # Set by the stages, in their order, with `mlog` (--mllog's lines: outputs.open_mllog) and
    # `batches` (the steps' input pipeline: RunSetup.batches).
    start: resume.Start
    claimed: outputs.Claim
    measured: MeasuredStep
    ctx: hooks.Context
    preemption: hooks.Preemption  # the SIGTERM guard and its hook (`run_steps`)
    hooks: hooks.Hooks  # the schedule between steps (`_register_hooks`)
    # The hooks whose results the record reads (`_register_hooks`).
    evaluation: hooks.Evaluation
    curves: observe.Curves
    checkpoint: hooks.Checkpoint

    def __init__(
        self,
        setup: RunSetup,
        ckpt,
        wall_start: float,
        bandwidth: tuple[float, str] | None,
        dropped: tuple[int, ...] = (),
    ):
        """`ckpt`: the run's checkpointer (resume.checkpointer), None without --checkpoint_dir."""
        self.setup, self.ckpt, self.wall_start = setup, ckpt, wall_start
        self.bandwidth, self.dropped = bandwidth, dropped
        self.not_kept: DiskFull | None = None  # the kept weights' full disk (`finish`)
        self.window: observe.ProfileWindow | None = None  # the profile window (`_register_hooks`)

    def run(self) -> Finished:
        """The stages in order: the record (also written), its path and the exit code."""
        with contextlib.ExitStack() as held:
            if self.ckpt:  # waits for pending saves on every path, errors and divergence too
                held.callback(self.ckpt.close)
            try:
                self.restore()
                self.compile()
            except BaseException as e:  # the MLLOG a new run began goes (telemetry/mllog.py)
                if getattr(self, "mlog", None) is not None:
                    self.mlog.discard_unstarted()
                if isinstance(e, interrupt.Interrupted):  # a resumed run's checkpoint stays
                    raise e.keeping(self._restored()) from None
                raise
            try:
                stop = self.run_steps(held)
                outcome = self.final_quality(self.finish(stop))
                record = self.record(outcome)
            except Exception as e:  # before `held` releases: a lost peer ends it at once
                distributed.exit_if_lost(e)
                raise
            return self.write(record, outcome)

    # The stages.

    def restore(self) -> None:
        """The newest checkpoint or a new run's start; the results and the MLLOG claimed for
        its id before the state is initialised, so that a clash fails fast."""
        setup, config = self.setup, self.setup.config
        with startup.phase("state", "checkpoint"):  # finding and restoring one, if any
            self.start = resume.start(setup, self.ckpt, self.dropped)
        progress = self.start.progress
        self.claimed = outputs.claim(config, progress.run_id, self.start.resuming)
        self.mlog = outputs.open_mllog(setup, self.wall_start, progress, self.start.resuming)
        interrupt.on_hard_exit(self.mlog.discard_unstarted)  # a second signal in start-up
        if self.start.resuming:
            interrupt.keeping(f"no record was written; {self._restored()} stays")
        if self.start.state is None:
            with startup.phase("state", "initialised"):
                self.start = self.start._replace(state=setup.init_state())

    def compile(self) -> None:
        """The step compiled ahead of timing and measured for the record (run/measured_step.py)."""
        self.measured = measure_step(
            self.setup, self.start.state, self.bandwidth, self.start.progress.run_id
        )
        self.start.progress.compile_s.append(self.measured.compile_s)
        startup.record("compile", self.measured.compile_s)
        flops = self.measured.flops
        self.mlog.init_stop(flops.train_step_flops, flops.train_step_flops_source)

    def run_steps(self, held: contextlib.ExitStack) -> Outcome | None:
        """Every remaining step, the hooks after each; returns a hook's Outcome, if one ended
        the run. Registers in `held` the release of what the steps hold: the input pipeline, the
        watchdog, the signal handlers and the trace (`finish` releases them in order on the
        way out; each release may run twice)."""
        self._context(held)
        ctx, progress = self.ctx, self.ctx.progress
        self.preemption = hooks.Preemption(self._check_every)  # SIGTERM noted from here on
        held.callback(self.preemption.restore)
        self._register_hooks()
        window = self.window
        if window is not None:  # a run that ends inside the window still writes its trace
            held.callback(window.close, hooks.Services(ctx).aside)
        with startup.phase("barrier"):
            barrier("before-timing")
        interrupt.at("the training step under way", ", then write a partial record")
        where = self.setup.config.reliability.checkpoint_dir
        if self.ckpt is not None:
            interrupt.keeping(
                f"no record was written; the checkpoints saved before stay in {where} (the "
                "same command resumes from the newest)"
            )
        self.mlog.run_start(progress.step, ctx.clock.start())
        logging.info(
            "process %d: training steps %d to %d",
            jax.process_index(),
            progress.step,
            ctx.total_steps,
        )
        injection = self.setup.config.reliability.nan_injection
        for step in range(progress.step, ctx.total_steps):
            # Named for a profiler trace (docs/observe.md); without one they cost a microsecond.
            # The hooks run outside it: a profile window starts and stops between two steps.
            with observe.step_trace(step):
                ctx.dog.arm(f"step {step}", progress.recent_median_s())
                if injection and injection[1] == step:
                    ctx.state = hooks.poison(ctx.state, injection[0])
                ctx.state, metrics = self.step(ctx.state)
                ctx.watch.add(step, metrics.finite, metrics.input_finite)
                ctx.clock.dispatched(step, metrics)
            if stop := self.hooks.run(ctx, step + 1):
                return stop
        return None

    def step(self, state):
        """One training step, the start of the step's path (docs/design.md): the members' batch
        (the prefetcher's, its wait a profiler trace's `input_wait`), then the compiled ensemble
        step (engine/step.py): the updated EnsembleState and its StepMetrics."""
        return self.measured.compiled(state, self.batches.next())

    def finish(self, stop: Outcome | None) -> Outcome:
        """The loop's end: the trace closed, every step's flags read, the input pipeline
        stopped, the clock finished, the final checkpoint and the kept weights, then the signal
        handlers restored."""
        ctx = self.ctx
        if self.window is not None:
            self.window.close(hooks.Services(ctx).aside)
        ctx.dog.arm("the last step and the processes' final check", ctx.progress.recent_median_s())
        ctx.clock.flush()
        outcome = hooks.settle(ctx, stop)
        ctx.dog.disarm()
        self.batches.close()
        ctx.clock.finish()
        interrupt.at("the final checkpoint and weights")  # then the final evaluation stops
        self.not_kept = hooks.final_save(ctx, outcome)
        self.preemption.restore()
        return outcome

    def final_quality(self, outcome: Outcome) -> Outcome:
        """A complete run's final quality (None for another); a signal during its evaluation
        makes the run `partial` (resumable from the final checkpoint, which re-evaluates)."""
        interrupt.at("the set-up of the final evaluation")  # each batch names itself
        try:
            return hooks.final_quality(self.ctx, outcome, self.evaluation.last)
        finally:
            interrupt.at("the record's writing")

    def record(self, outcome: Outcome) -> records.TrainRecord:
        """The run's record: its final quality, the members' last figures and every process's
        timing (the end of the run: every process is here); an epoch lasts as long as its
        slowest process took."""
        ctx, setup, quality = self.ctx, self.setup, outcome.quality
        progress, clock, dog = ctx.progress, ctx.clock, ctx.dog
        dog.arm("the processes' end-of-run gather", progress.recent_median_s())
        final, timings = run_record.run_figures(clock, progress, setup)
        dog.disarm()
        end = run_record.RunEnd(
            setup,
            progress,
            self.measured,
            outcome.status.value,
            quality,
            final,
            run_clock.read() - self.wall_start,
            outcome.reason,
            outcome.stopped_at_target,
            energy=(clock.energy_start, clock.energy_end),
            per_process=timings,
            interval=self.checkpoint.interval,
            observe=observe.record_section(
                self.curves,
                self.window,
                quality,
                progress.step,
                hooks.Services(ctx).booked(),
            ),
        )
        record = run_record.train_record(end)
        dog.close()
        if self.not_kept is not None:  # the run is what it is; its weights are not kept
            why = f"the members' weights were not kept: {self.not_kept}"
            record = dataclasses.replace(
                record, reason="; ".join(filter(None, (record.reason, why)))
            )
        return record

    def write(self, record: records.TrainRecord, outcome: Outcome) -> Finished:
        """Writes the record; only then may the MLLOG say success (a run that can resume ends
        only a segment). Both are written under their partial names, then committed with the
        events and the kept weights (run/outputs.py)."""
        config, progress = self.setup.config, self.ctx.progress
        path = outputs.stage_record(config, progress.run_id, record)
        resumable = outcome.status is Status.PARTIAL and self.ckpt is not None
        self.mlog.run_stop(record, resumable=resumable)
        if path is not None:
            path = outputs.Outputs.of(config, progress.run_id).commit(record.status, resumable)
            interrupt.keeping(f"kept the record {path} ({record.status})")
        self.claimed.release()
        barrier("exit")
        if self.not_kept is not None:  # one line, exit 74, once the record that says so is in
            raise DiskFull(f"{self.not_kept}; the record {path} is written without them")
        if self.mlog.lost is not None:  # the log found no space, here or at its spare path
            raise self.mlog.lost
        return Finished(record, str(path) if path else None, outcome.exit_code)

    # What the stages share.

    def _restored(self) -> str | None:
        """The checkpoint this run resumes from, for an interrupt's line; None for a new run."""
        start = getattr(self, "start", None)
        if start is None or not start.resuming:
            return None
        where = self.setup.config.reliability.checkpoint_dir
        return f"the checkpoint of step {start.progress.step} in {where}"

    def _context(self, held: contextlib.ExitStack) -> None:
        """The steps' input pipeline, and the hooks' view of the run (hooks.Context.open: its
        clock, divergence watch and watchdog), each closed with the run."""
        setup, progress = self.setup, self.start.progress
        self.batches = setup.batches(progress.step)
        held.callback(self.batches.close)
        self.ctx = hooks.Context.open(
            setup, self.start.state, progress, self.mlog, self.ckpt, self.batches, held
        )

    @property
    def _check_every(self) -> int:
        """The steps between the processes' agreements on the members' flags and on SIGTERM."""
        rc = self.setup.config.reliability
        return rc.divergence_check_every or self.setup.config.train.log_every

    def _register_hooks(self) -> None:
        """The schedule between steps, in the order the hooks run; the profile window, if any,
        last (it starts its trace after the step's other work). Each schedule is here: a
        period, or `when=` for those learnt as the run goes (a progress line once a due step
        is booked, one dispatch late; the checkpoint's interval; the profile window). Period
        1: each step's curve point, and a SIGTERM read (agreed every `check_every`)."""
        setup, ctx = self.setup, self.ctx
        config = setup.config
        tc = config.train
        target = config.quality_target().target if config.scored and tc.stop_at_target else None
        run_id, flops = ctx.progress.run_id, self.measured.flops.train_step_flops
        self.evaluation = hooks.Evaluation(target)
        self.curves = observe.curves(setup, run_id, flops, ctx.clock, self.start.resuming)
        self.checkpoint = hooks.checkpoint(setup, ctx.progress.step, self.ckpt)
        self.window = observe.profile_window(setup, run_id, self.measured.compiled.as_text())
        self.hooks = hooks.Hooks()
        add = self.hooks.add
        add(hooks.DivergenceCheck(), every=self._check_every, at_last=True)
        line = hooks.ProgressLine(tc.log_every, setup.layout.ensemble_size * tc.batch_size)
        add(line, when=line.due)
        add(self.evaluation, every=tc.eval_every_epochs * setup.sampler.steps_per_epoch)
        add(self.curves, every=1)
        add(self.preemption, every=1)
        add(self.checkpoint, when=self.checkpoint.due)
        if self.window is not None:
            add(self.window, when=self.window.due)
