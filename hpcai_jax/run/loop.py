"""`--mode=train`: resume or initialise, compile, train the ensemble step by step with the
hooks between steps (run/hooks.py), finish (the last checks, the final checkpoint and
evaluation) and write the record. Time is the run clock's (run/clock.py); docs/design.md has
the method, docs/score.md what each figure means.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np
from absl import logging

from hpcai_jax import distributed, nodes, results
from hpcai_jax.config import RunConfig
from hpcai_jax.data.pipeline import Prefetcher, synthetic_batch, train_batches
from hpcai_jax.distributed import barrier
from hpcai_jax.engine.evaluate import EnsembleQuality
from hpcai_jax.engine.setup import RunSetup, build_setup
from hpcai_jax.engine.step import compile_step, count_lowered
from hpcai_jax.errors import UsageError
from hpcai_jax.flops.crosscheck import FlopFigures, crosscheck
from hpcai_jax.flops.device_peaks import bandwidth_at_start, matmul_peaks
from hpcai_jax.flops.roofline import stream_bandwidth
from hpcai_jax.flops.xla import XlaCost, xla_cost
from hpcai_jax.records import train
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import evaluation, fit, hooks, members, observe, processes, startup, weights
from hpcai_jax.run import interval as interval_rule
from hpcai_jax.run import record as run_record
from hpcai_jax.run.checkpoint import Checkpointer, fingerprint
from hpcai_jax.run.hooks import Outcome, Status, Stop
from hpcai_jax.run.preemption import PreemptionGuard
from hpcai_jax.run.progress import DivergenceWatch, Progress
from hpcai_jax.run.watchdog import Watchdog
from hpcai_jax.telemetry.comm import CommVolume, comm_volume, cross_member
from hpcai_jax.telemetry.memory import memory_analysis
from hpcai_jax.telemetry.mllog import MLLog
from hpcai_jax.telemetry.profile import INPUT_WAIT, STEP_ANNOTATION


def _batches(setup: RunSetup):
    """A function step → Batch (the Prefetcher closes its workers, if any)."""
    tc = setup.config.train
    if setup.datasets.synthetic:
        batch = synthetic_batch(
            setup.workload.synthetic, setup.mesh, setup.layout.ensemble_size, tc.batch_size, tc.seed
        )
        return lambda step: batch
    return train_batches(
        setup.datasets.train,
        setup.sampler,
        setup.mesh,
        setup.layout.ensemble_size,
        setup.total_steps,
        setup.config.data.data_workers,
        setup.config.data.worker_restarts,
    )


def _bad_examples(setup, member: int, step: int) -> str:
    """': --dataset=D, split 'train', examples [i, ...]': the examples of the member's batch at
    that step with a non-finite value, re-read on the host ('' where the data is generated on
    the devices or cannot be re-read)."""
    source = getattr(setup.datasets, "train", None)
    if source is None or not hasattr(source, "read"):
        return ""
    try:
        indices = np.asarray(setup.sampler.step_indices(member, step))
        fields = source.read(indices)
    except Exception as e:  # naming the examples must not hide the fault itself
        logging.warning("could not re-read member %d's batch at step %d: %s", member, step, e)
        return ""
    bad = np.zeros(len(indices), bool)
    for x in fields.values():
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.inexact):
            bad |= ~np.isfinite(x.reshape(len(indices), -1)).all(axis=1)
    names = sorted({int(i) for i in indices[bad]})
    return f": --dataset={setup.config.data.dataset}, split 'train', examples {names}"


class CompiledStep(NamedTuple):
    compiled: jax.stages.Compiled
    cost: XlaCost
    flops: FlopFigures
    memory: dict
    peaks: dict
    comm: CommVolume | None  # process 0's alone


def _compile(
    setup: RunSetup, state, progress: Progress, bandwidth: tuple[float, str] | None
) -> CompiledStep:
    """Compiles the step ahead of timing and gathers what the record says about it: XLA's and the
    analytic FLOP counts (warning loudly when they disagree), memory per device, peak FLOP/s.
    Each part after the compile is a start-up phase of its own: at hundreds of devices per
    process they took most of the start-up without a line (docs/scale_sim.md)."""
    config, layout = setup.config, setup.layout
    build = compile_step(
        setup.train_step,
        state,
        setup.mesh,
        layout,
        config.train.batch_size,
        setup.workload.spec.fields,
    )
    compiled, compile_s = build.compiled, build.seconds
    progress.compile_s.append(compile_s)
    with startup.phase("crosscheck"):
        counted = count_lowered(
            setup.count_step,
            state,
            setup.mesh,
            layout,
            config.train.batch_size,
            setup.workload.spec.fields,
        )
        cost = xla_cost(compiled, layout.num_devices, build.lowered, counted)
        cross = crosscheck(config, cost.flops, list(setup.mesh.devices.flat))
    logging.info(
        "compiled the ensemble step in %.1f s; %s FLOPs per step from %s (%s)%s",
        compile_s,
        f"{cross.train_step_flops:.4g}",
        cross.train_step_flops_source,
        cross.source_reason,
        f"; {cost.note}" if cost.note else "",
    )
    if cross.crosscheck_ok is False:
        logging.warning(
            "FLOP CROSS-CHECK FAILED: %s. FLOPS use %s; the record says so "
            "(flops.crosscheck_ok = false)",
            cross.source_reason,
            cross.train_step_flops_source,
        )
    with startup.phase("traffic"):
        node_index = nodes.device_node_index(list(setup.mesh.devices.flat))  # a collective
        # The HLO's traffic is read once, for the record process 0 writes.
        comm = _traffic(compiled, setup.mesh, node_index) if jax.process_index() == 0 else None
    memory = memory_analysis(compiled)
    if memory:
        logging.info(
            "compiled step memory per device: arguments %.1f MiB, outputs %.1f MiB, "
            "temporaries %.1f MiB",
            memory["argument_bytes"] / 2**20,
            memory["output_bytes"] / 2**20,
            memory["temp_bytes"] / 2**20,
        )
    with startup.phase("peaks"):
        peaks = matmul_peaks(config.model.dtype)
    with startup.phase("stream"):  # every process: STREAM spans them
        peaks["bandwidth_per_device"], peaks["bandwidth_source"] = bandwidth_at_start(bandwidth)
    return CompiledStep(compiled, cost, cross, memory, peaks, comm)


def _traffic(compiled, mesh, node_index: dict[int, int]) -> CommVolume:
    """The step's collectives, by axis (telemetry/comm.py), and a warning for any that spans
    two members: bagging's members must never wait for each other."""
    text = compiled.as_text()
    comm = comm_volume(text, mesh, node_index)
    for line in cross_member(text, mesh):
        logging.warning("a collective of the training step spans two members: %s", line)
    logging.info(
        "collectives per step and device: training payload %s bytes, on the wire %s bytes "
        "(%s; %d node(s)), reporting %s bytes",
        comm.payload_bytes,
        comm.wire_bytes,
        comm.link_bytes,
        comm.nodes,
        comm.metrics_payload_bytes,
    )
    return comm


def run_train(config: RunConfig) -> int:
    """`--mode=train`: the benchmark run; prints the summary (process 0), returns the exit code."""
    record, exit_code = train_and_evaluate(config)
    if jax.process_index() == 0:
        print(run_record.summary(record))
    return exit_code


def train_and_evaluate(config: RunConfig) -> tuple[dict, int]:
    """Runs the bagged-ensemble benchmark; returns its record (also written) and the exit code."""
    wall_start = run_clock.read()
    results.check_writable(config.results.results_dir)
    # A --stream_record is read before any work, so that a bad one fails at once.
    bandwidth = (
        stream_bandwidth(config.results.stream_record) if config.results.stream_record else None
    )
    # --resume_members=fit: the members that fit these devices (docs/reliability.md).
    fitted = fit.fit(config, jax.device_count(), jax.local_device_count())
    with startup.phase("setup"):
        setup = build_setup(fitted.config)
    rc = config.reliability
    # The checkpoint's fingerprint is the flags' M, whatever the resume runs, and the data set's
    # own values (--num_classes=0 and =10 train the same Fashion-MNIST run).
    asked = dataclasses.replace(setup.layout, ensemble_size=config.mesh.ensemble_size)
    trained = dataclasses.replace(config, data=setup.config.data)
    ckpt = (
        Checkpointer(
            rc.checkpoint_dir,
            rc.checkpoint_steps,
            rc.keep_checkpoints,
            fingerprint(trained, asked),
            setup.layout,
            fewer_members=bool(fitted.dropped),
        )
        if rc.checkpoint_dir
        else None
    )
    _check_profile_window(setup)
    # Everything that can be checked before any work is (the layout on these devices, the data,
    # the results directory, a --stream_record): main's settings table may follow.
    startup.valid()
    try:
        return _train(setup, ckpt, wall_start, bandwidth, fitted.dropped)
    finally:
        if ckpt:  # waits for pending saves on every path, errors and divergence included
            ckpt.close()


def _check_profile_window(setup: RunSetup) -> None:
    """--profile_steps=A:B must end by the run's last step."""
    window = setup.config.results.profile_range
    if window and window[1] > setup.total_steps:
        raise UsageError(
            f"--profile_steps={setup.config.results.profile_steps}: the run has "
            f"{setup.total_steps} steps; B may be at most {setup.total_steps}"
        )


def _resume_or_start(setup: RunSetup, ckpt: Checkpointer | None, dropped: tuple[int, ...]):
    """(state or None, progress, resuming): from the newest checkpoint, or a new run's; a fit
    resume (`dropped`) stops those members at the checkpoint's step."""
    config, layout = setup.config, setup.layout
    if ckpt is None or ckpt.latest_step() is None:
        # One id for the whole job: each process would stamp its own time and pid.
        run_id = distributed.from_process_zero(results.run_id(config, "train"))
        return None, Progress(run_id=run_id), False
    state, meta = ckpt.restore(setup.abstract_state)
    progress = Progress.from_meta(meta)
    named = config.results.run_name
    if named and named != progress.run_id:  # never continue one run under another's name
        raise UsageError(
            f"--run_name={named}: --checkpoint_dir={config.reliability.checkpoint_dir} holds "
            f"run {progress.run_id}; resume it with --run_name={progress.run_id} (or none), or "
            "start this run in another --checkpoint_dir"
        )
    mesh = dataclasses.asdict(layout)
    progress.note_resume(mesh)
    why = f"--resume_members=fit on {layout.num_devices} devices"
    if new := progress.drop(dropped, why):
        logging.warning(
            "resumed with the members that fit: %d of %d (%s); members %s stop at step %d",
            layout.ensemble_size,
            layout.ensemble_size + len(progress.dropped),
            why,
            new,
            progress.step,
        )
    logging.info(
        "resumed run %s from step %d of %d (%s)%s",
        progress.run_id,
        progress.step,
        setup.total_steps,
        config.reliability.checkpoint_dir,
        f" on another mesh: written on {meta['layout']}, now {mesh}"
        if meta.get("layout") not in (None, mesh)
        else "",
    )
    return state, progress, True


def _log_mesh(setup: RunSetup) -> None:
    layout = setup.layout
    logging.info(
        "mesh %s: M=%d members, %d per device, P_degree=%d, P_model=%d, %d devices; "
        "strategy %s (%s)",
        dict(setup.mesh.shape),
        layout.ensemble_size,
        layout.members_per_device,
        layout.parallel_degree,
        layout.model_parallel,
        layout.num_devices,
        setup.member_strategy,
        setup.member_strategy_why,
    )


def _checkpoint_hook(setup: RunSetup, first: int) -> hooks.Checkpoint:
    """Saves every --checkpoint_every steps, or under auto a probe save after the warm-up and
    PROBE_STEPS timed steps of this segment, whose times set the interval."""
    rc = setup.config.reliability
    if not rc.checkpoint_dir:
        return hooks.Checkpoint(interval_rule.Interval(None, "no --checkpoint_dir"))
    if not rc.checkpoint_auto:
        return hooks.Checkpoint(interval_rule.fixed(rc.checkpoint_steps))
    probe_at = first + setup.config.train.timing_warmup_steps + interval_rule.PROBE_STEPS
    mtbf_h, _ = interval_rule.mtbf_hours(rc.mtbf_hours, setup.layout.num_devices)
    return hooks.Checkpoint(interval_rule.not_probed(probe_at, mtbf_h), probe_at)


def _hooks(ctx: hooks.Context, guard: PreemptionGuard, first: int, built: CompiledStep) -> list:
    """The hooks in the order they run after each step; the profile window, if any, last (it
    starts its trace after the step's other work)."""
    setup, run_id = ctx.setup, ctx.progress.run_id
    config = setup.config
    tc, rc = config.train, config.reliability
    check_every = rc.divergence_check_every or tc.log_every
    target = config.quality_target().target if config.scored and tc.stop_at_target else None
    steps = [
        hooks.DivergenceCheck(check_every),
        hooks.ProgressLine(tc.log_every, setup.layout.ensemble_size * tc.batch_size),
        hooks.Evaluation(tc.eval_every_epochs * setup.sampler.steps_per_epoch, target),
        observe.curves(setup, run_id, built.flops.train_step_flops, ctx.clock),
        hooks.Preemption(guard, check_every),
        _checkpoint_hook(setup, first),
    ]
    if config.results.profile_range:
        steps.append(observe.profile_window(setup, run_id, built.compiled.as_text()))
    return steps


def _recent_median(progress: Progress) -> float | None:
    """What the watchdog scales with: the median of the last 101 timed steps."""
    return interval_rule.median_step(progress.step_s)


def _train_steps(
    ctx: hooks.Context, compiled, prefetch: Prefetcher, steps: list, dog: Watchdog
) -> Stop | None:
    """Steps until the last one or a hook's Stop; the watchdog bounds each step with its hooks
    (the previous step's completion and the processes' agreements among them)."""
    injection = ctx.setup.config.reliability.nan_injection
    for step in range(ctx.progress.step, ctx.total_steps):
        # Named for a profiler trace (docs/observe.md); without one they cost a microsecond.
        # The hooks run outside it: a profile window starts and stops between two steps.
        with jax.profiler.StepTraceAnnotation(STEP_ANNOTATION, step_num=step):
            dog.arm(f"step {step}", _recent_median(ctx.progress))
            with jax.profiler.TraceAnnotation(INPUT_WAIT):
                batch = prefetch.next()
            if injection and injection[1] == step:
                ctx.state = hooks.poison(ctx.state, injection[0])
            ctx.state, metrics = compiled(ctx.state, batch)
            ctx.watch.add(step, metrics.finite, metrics.input_finite)
            ctx.clock.dispatched(step, metrics)
        for hook in steps:
            if stop := hook(ctx, step + 1):
                return stop
    return None


def _settle(ctx: hooks.Context, stop: Stop | None) -> Outcome:
    """The loop's end: every step's flags read (a preemption's too, so a member that went
    non-finite just before the stop is dated or pruned as it would have been without it)."""
    outcome = (
        Outcome(Status.COMPLETE)
        if stop is None
        else Outcome(stop.status, stop.reason, stop.at_target)
    )
    if outcome.status is not Status.INVALID and (why := ctx.watch.check(keep_last=False)):
        outcome = Outcome(Status.INVALID, why, outcome.stopped_at_target)
    rc, m = ctx.setup.config.reliability, ctx.setup.layout.ensemble_size
    if rc.on_divergence == "prune" and len(ctx.progress.diverged) == m:
        outcome = Outcome(Status.INVALID, "every member diverged", outcome.stopped_at_target)
    return outcome


def _final_save(ctx: hooks.Context, outcome: Outcome) -> None:
    """The checkpoint a complete or preempted run ends with. Still under the preemption guard:
    a SIGTERM now is noted, not fatal, so the save is never cut short by it."""
    if ctx.ckpt and outcome.status is not Status.INVALID:
        step = ctx.progress.step
        with ctx.bounded(f"the final checkpoint save of step {step}"), ctx.clock.checkpointing():
            ctx.save(step)
            ctx.ckpt.close()  # the record may only say "resumable" once the save is complete
    elif outcome.status is Status.PARTIAL:
        logging.warning("preempted without --checkpoint_dir: this run cannot be resumed")


def _final_quality(ctx: hooks.Context, outcome: Outcome, last_eval) -> EnsembleQuality | None:
    """A complete run's quality: the last evaluation where it was taken at the final step (only
    the out-of-bag estimate still to compute), else a final evaluation."""
    if outcome.status is not Status.COMPLETE:
        return None
    if last_eval and last_eval[0] == ctx.progress.step and last_eval[1]:
        return evaluation.with_oob(
            ctx.setup, ctx.state, last_eval[1], ctx.clock, ctx.dog, ctx.progress.step
        )
    return ctx.evaluate(oob=True, training=False)


def _train(
    setup: RunSetup,
    ckpt: Checkpointer | None,
    wall_start: float,
    bandwidth: tuple[float, str] | None,
    dropped: tuple[int, ...] = (),
) -> tuple[dict, int]:
    config = setup.config
    with startup.phase("state", "checkpoint"):  # finding and restoring one, if any
        state, progress, resuming = _resume_or_start(setup, ckpt, dropped)
    claimed = results.claim(
        config.results.results_dir, progress.run_id, config.results.overwrite, resuming
    )
    # --mllog: MLPerf-style lines (no-op without it); a resumed run appends to its own.
    mlog = MLLog.start(
        setup,
        wall_start,
        run_clock.read,
        progress.run_id,
        progress.step if resuming else None,
        progress.mllog_lines,
    )
    if state is None:  # initialised once the results and the log are claimed: fails fast
        with startup.phase("state", "initialised"):
            state = setup.init_state()
    _log_mesh(setup)
    built = _compile(setup, state, progress, bandwidth)
    startup.record("compile", progress.compile_s[-1])
    mlog.init_stop(built.flops.train_step_flops, built.flops.train_step_flops_source)

    tc = config.train
    first = progress.step
    timed_from = first + min(tc.timing_warmup_steps, max(0, setup.total_steps - first - 1))
    prefetch = Prefetcher(_batches(setup), first, setup.total_steps, config.data.prefetch)
    clock = run_clock.RunClock(
        progress, timed_from, setup.sampler.steps_per_epoch, prefetch, mlog.epoch
    )
    watch = DivergenceWatch(
        progress,
        config.reliability.on_divergence,
        lambda member, step: _bad_examples(setup, member, step),
    )
    rc = config.reliability
    dog = Watchdog(rc.watchdog_factor, rc.watchdog_min_s, jax.process_index())
    ctx = hooks.Context(setup, state, progress, clock, mlog, watch, ckpt, setup.total_steps, dog)
    guard = PreemptionGuard()
    steps = _hooks(ctx, guard, first, built)
    with startup.phase("barrier"):
        barrier("before-timing")
    mlog.run_start(first, clock.start())
    logging.info("process %d: training steps %d to %d", jax.process_index(), first, ctx.total_steps)
    try:  # on every path the watchdog ends with its run: an armed one must not outlive it
        try:
            try:
                try:
                    stop = _train_steps(ctx, built.compiled, prefetch, steps, dog)
                finally:  # a run that ends inside the window still writes its trace
                    for hook in steps:
                        if isinstance(hook, observe.ProfileWindow):
                            hook.close(clock)
                dog.arm("the last step and the processes' final check", _recent_median(progress))
                clock.flush()
                outcome = _settle(ctx, stop)
                dog.disarm()
            finally:
                prefetch.close()
            clock.finish()
            _final_save(ctx, outcome)
            with ctx.bounded("keeping the members' final weights"):
                weights.keep(ctx, outcome.status is Status.COMPLETE)
        finally:
            guard.restore()
        record = _record(ctx, built, outcome, steps, wall_start, dog)
    finally:
        dog.close()
    path = results.write_record(config.results.results_dir, progress.run_id, record)
    claimed.release()
    # Only now may the log say success; a run that can resume ends only a segment.
    mlog.run_stop(record, resumable=outcome.status is Status.PARTIAL and ckpt is not None)
    barrier("exit")
    record["path"] = str(path) if path else None
    return record, outcome.exit_code


def _record(
    ctx: hooks.Context,
    built: CompiledStep,
    outcome: Outcome,
    steps: list,
    wall_start: float,
    dog: Watchdog,
) -> dict:
    """The run's record: its final quality, the members' last figures and every process's
    timing (the end of the run: every process is here); an epoch lasts as long as its slowest
    process took."""
    setup, progress, clock = ctx.setup, ctx.progress, ctx.clock
    last_eval = next(h.last for h in steps if isinstance(h, hooks.Evaluation))
    interval = next(h.interval for h in steps if isinstance(h, hooks.Checkpoint))
    quality = _final_quality(ctx, outcome, last_eval)
    seen = _observed(steps, quality, progress.step)
    dog.arm("the processes' end-of-run gather", _recent_median(progress))
    final = None if clock.last_metrics is None else members.gather_tree(clock.last_metrics)
    timings = processes.per_process(progress, setup.mesh, setup.layout.members_per_device)
    dog.disarm()
    processes.take_slowest_epochs(progress, timings)
    return run_record.build(
        setup,
        progress,
        built.cost,
        built.flops,
        built.peaks,
        outcome.status.value,
        quality,
        final,
        progress.eval_s,
        run_clock.read() - wall_start,
        outcome.reason,
        memory=built.memory,
        comm=built.comm,
        energy=(clock.energy_start, clock.energy_end),
        stopped_at_target=outcome.stopped_at_target,
        per_process=timings,
        interval=interval,
        observe=seen,
    )


def _observed(steps: list, quality, step: int) -> train.Observe:
    """The record's `observe` section: the curves closed with the final quality, the trace."""
    curves = next(h for h in steps if isinstance(h, observe.Curves))
    window = next((h for h in steps if isinstance(h, observe.ProfileWindow)), None)
    return train.Observe(
        tensorboard=curves.finish(quality, step),
        profile=window.summary() if window else None,
    )
