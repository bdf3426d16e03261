"""The training run: resume or initialise, compile, train with timing, watch for divergence and
preemption, checkpoint, evaluate the ensemble (every --eval_every_epochs, and at the end), write
the record.

Step times are read one step late (the host blocks on step k-1 after dispatching step k), so the
device always has work queued and the timing adds no bubble; divergence flags are computed on the
device every step and read every few steps. Every training-time figure (steps, epochs, run time,
evaluations, checkpoint saves) is read through `clock`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from hpcai_jax import nodes, results
from hpcai_jax.config import RunConfig
from hpcai_jax.data.pipeline import Prefetcher, synthetic_batch, train_batches
from hpcai_jax.distributed import barrier
from hpcai_jax.engine.evaluate import EnsembleQuality, evaluate, out_of_bag
from hpcai_jax.engine.setup import RunSetup, build_setup
from hpcai_jax.engine.step import StepMetrics, compile_step
from hpcai_jax.flops.peaks import measure_matmul_peak_all, peak_flops_per_device
from hpcai_jax.flops.xla import XlaCost, xla_cost
from hpcai_jax.run import curve
from hpcai_jax.run import record as run_record
from hpcai_jax.run.checkpoint import Checkpointer, fingerprint
from hpcai_jax.run.epochs import EpochTimer
from hpcai_jax.run.preemption import FAILED_EXIT_CODE, PREEMPTED_EXIT_CODE, PreemptionGuard
from hpcai_jax.run.progress import DivergenceWatch, Progress
from hpcai_jax.run.timing import format_duration
from hpcai_jax.telemetry.comm import CommVolume, comm_volume
from hpcai_jax.telemetry.energy import read_energy
from hpcai_jax.telemetry.flop_count import FlopFigures, crosscheck
from hpcai_jax.telemetry.memory import memory_analysis
from hpcai_jax.telemetry.mllog import MLLog
from hpcai_jax.telemetry.roofline import stream_bandwidth


def clock() -> float:
    """The loop's one monotonic clock, in seconds. A test replaces it (monkeypatch
    `hpcai_jax.run.loop.clock`); it reads `time.perf_counter` at each call, so patching
    `hpcai_jax.run.loop.time.perf_counter` reaches it too."""
    return time.perf_counter()


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


def _peak_flops(dtype: str) -> dict:
    """Per-device peak FLOP/s for MFU: the datasheet figure where the device is in the table, and
    a large-matmul figure measured with all local devices at once, as the step runs them (on a
    CPU the devices share the cores, so one device alone would overstate each one's share)."""
    kind = jax.local_devices()[0].device_kind
    measured = measure_matmul_peak_all(dtype)
    return {
        "device_kind": kind,
        "dtype": dtype,
        "datasheet_per_device": peak_flops_per_device(kind, dtype),
        "measured_per_device": measured.per_device,
        "measured_aggregate": measured.aggregate,
        "measured_method": measured.method,
    }


_MEASURED: dict[tuple, object] = {}  # (what, local device ids) -> what a run measured at start
_REUSED = "; measured by this process's first run"


def _measured_once(what: tuple, measure) -> tuple[object, bool]:
    """(measure(), False) the first time this process asks for `what` on its local devices,
    then (that result, True): a process that trains several runs (an in-process sweep, the
    test suite) measures the same devices' matmul peak and STREAM bandwidth once (≈ 2 s a run
    on a CPU), and its later records say so."""
    key = (*what, tuple(d.id for d in jax.local_devices()))
    if key in _MEASURED:
        return _MEASURED[key], True
    _MEASURED[key] = measure()
    return _MEASURED[key], False


def _peaks_at_start(dtype: str, bandwidth: tuple[float, str] | None) -> dict:
    """The record's `peak_flops`: `_peak_flops` with the per-device bandwidth, that of a
    --stream_record where one is given (None: STREAM's Triad measured here)."""
    measured, again = _measured_once(("matmul", dtype), lambda: _peak_flops(dtype))
    peaks = dict(measured, measured_method=measured["measured_method"] + (_REUSED if again else ""))
    if not bandwidth:
        (per_device, source), again = _measured_once(("stream",), lambda: stream_bandwidth(""))
        bandwidth = per_device, source + (_REUSED if again else "")
    peaks["bandwidth_per_device"], peaks["bandwidth_source"] = bandwidth
    return peaks


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


def _poison(state, member: int):
    """The --inject_nan test hook: NaN in every parameter of one member, shardings kept."""
    shardings = jax.tree.map(lambda x: x.sharding, state)

    def set_nan(s):
        return s.replace(params=jax.tree.map(lambda p: p.at[member].set(jnp.nan), s.params))

    return jax.jit(set_nan, out_shardings=shardings, donate_argnums=0)(state)


class StepClock:
    """Books each step's time one step late: the host blocks on step k-1 only after dispatching
    step k, so the device always has work queued and the timer adds no bubble. Steps before
    `timed_from` (warm-up) are trained but not timed; checkpoint saves and evaluations are
    booked apart. Every completion also goes to the epoch timer (Eq. 6)."""

    def __init__(
        self, progress: Progress, timed_from: int, prefetch: Prefetcher, epochs: EpochTimer
    ):
        self._progress, self._timed_from, self._prefetch = progress, timed_from, prefetch
        self._epochs = epochs
        self._inflight: tuple[int, StepMetrics] | None = None
        self._last_done = clock()
        self._wait_mark = 0.0  # the prefetcher's wait before the first timed step
        self.last_metrics: StepMetrics | None = None
        first = progress.step
        self.energy_start = read_energy() if timed_from == first else None

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
        now = clock()
        self._epochs.completed(step, now)
        if step >= self._timed_from:
            self._progress.time_step(step, now - self._last_done)
        elif step == self._timed_from - 1:
            self._wait_mark = self._prefetch.wait_s
            self.energy_start = read_energy()
        self._last_done, self.last_metrics = now, metrics
        self._progress.step = step + 1

    @contextlib.contextmanager
    def paused(self, evaluation: bool = False):
        """Time spent inside is no step's: a checkpoint save (booked as checkpoint time; it stays
        in its epoch) or an evaluation (booked by the caller, and cut out of the epoch)."""
        self.flush()
        start = clock()
        yield
        self._last_done = clock()
        if evaluation:
            self._epochs.excise(self._last_done - start)
        else:
            self._progress.checkpoint_s += self._last_done - start

    @property
    def data_wait_s(self) -> float:
        """How long the timed steps waited for data."""
        return self._prefetch.wait_s - self._wait_mark


def _log_progress(progress: Progress, total: int, metrics: StepMetrics, examples_per_step: int):
    median = float(np.median(progress.step_s)) if progress.step_s else 0.0
    logging.info(
        "step %d/%d  loss %.4f  %s  %s examples/s  ETA %s",
        progress.step,
        total,
        float(np.nanmean(metrics.loss)),
        "  ".join(f"train {k} {float(np.nanmean(v)):.3f}" for k, v in metrics.metrics.items()),
        f"{examples_per_step / median:.0f}" if median else "-",
        format_duration((total - progress.step) * median),
    )


class CompiledStep(NamedTuple):
    compiled: jax.stages.Compiled
    cost: XlaCost
    flops: FlopFigures
    memory: dict
    peaks: dict
    comm: CommVolume


def _compile(
    setup: RunSetup, state, progress: Progress, bandwidth: tuple[float, str] | None
) -> CompiledStep:
    """Compiles the step ahead of timing and gathers what the record says about it: XLA's and the
    analytic FLOP counts (warning loudly when they disagree), memory per device, peak FLOP/s."""
    config, layout = setup.config, setup.layout
    compiled, compile_s = compile_step(
        setup.train_step,
        state,
        setup.mesh,
        layout,
        config.train.batch_size,
        setup.workload.spec.fields,
    )
    progress.compile_s.append(compile_s)
    cost = xla_cost(compiled, layout.num_devices)
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
    comm = comm_volume(
        compiled.as_text(), setup.mesh, nodes.device_node_index(list(setup.mesh.devices.flat))
    )
    logging.info(
        "collectives per step and device: training payload %s bytes, on the wire %s bytes "
        "(%s; %d node(s)), member metrics %s bytes",
        comm.payload_bytes,
        comm.wire_bytes,
        comm.link_bytes,
        comm.nodes,
        comm.metrics_payload_bytes,
    )
    memory = memory_analysis(compiled)
    if memory:
        logging.info(
            "compiled step memory per device: arguments %.1f MiB, outputs %.1f MiB, "
            "temporaries %.1f MiB",
            memory["argument_bytes"] / 2**20,
            memory["output_bytes"] / 2**20,
            memory["temp_bytes"] / 2**20,
        )
    peaks = _peaks_at_start(config.model.dtype, bandwidth)
    return CompiledStep(compiled, cost, cross, memory, peaks, comm)


def _evaluate(setup, state, progress: Progress, mlog: MLLog, since_start, oob: bool):
    """Members' and ensemble's held-out quality now, timed on the loop's clock and booked as
    evaluation time; adds the curve point and logs eval_start/eval_stop/eval_accuracy."""
    start = clock()
    quality = evaluate(setup, state, frozenset(progress.diverged), oob=oob)
    end = clock()
    progress.eval_s += end - start
    if quality is not None:
        at = since_start(end)
        progress.curve.append(
            curve.point(quality, progress.step, setup.sampler.steps_per_epoch, at)
        )
        mlog.evaluated(quality, start, end)
        logging.info(
            "evaluated at step %d in %.1f s: ensemble %s %.4f",
            progress.step,
            end - start,
            setup.workload.metric,
            quality.ensemble,
        )
    return quality


def _with_oob(setup, state, quality: EnsembleQuality, progress: Progress) -> EnsembleQuality:
    """The last evaluation, taken at the final step, as the run's quality: only the out-of-bag
    estimate is still to compute (booked as evaluation time)."""
    start = clock()
    oob = out_of_bag(setup, state, np.asarray(quality.kept))
    progress.eval_s += clock() - start
    return dataclasses.replace(quality, oob=oob)


def run_train(config: RunConfig) -> int:
    """`--mode=train`: the benchmark run; prints the summary (process 0), returns the exit code."""
    record, exit_code = train_and_evaluate(config)
    if jax.process_index() == 0:
        print(run_record.summary(record))
    return exit_code


def train_and_evaluate(config: RunConfig) -> tuple[dict, int]:
    """Runs the bagged-ensemble benchmark; returns its record (also written) and the exit code."""
    wall_start = clock()
    results.check_writable(config.results.results_dir)
    # A --stream_record is read before any work, so that a bad one fails at once.
    bandwidth = (
        stream_bandwidth(config.results.stream_record) if config.results.stream_record else None
    )
    setup = build_setup(config)
    rc = config.reliability
    ckpt = (
        Checkpointer(
            rc.checkpoint_dir,
            rc.checkpoint_every,
            rc.keep_checkpoints,
            fingerprint(config, setup.layout),
            setup.layout,
        )
        if rc.checkpoint_dir
        else None
    )
    try:
        return _train(setup, ckpt, wall_start, bandwidth)
    finally:
        if ckpt:  # waits for pending saves on every path, errors and divergence included
            ckpt.close()


def _train(
    setup: RunSetup,
    ckpt: Checkpointer | None,
    wall_start: float,
    bandwidth: tuple[float, str] | None,
) -> tuple[dict, int]:
    config = setup.config
    layout, tc, rc = setup.layout, config.train, config.reliability
    resuming = ckpt is not None and ckpt.latest_step() is not None
    if resuming:
        state, meta = ckpt.restore(setup.abstract_state)
        progress = Progress.from_meta(meta)
        mesh = dataclasses.asdict(layout)
        progress.note_resume(mesh)
        logging.info(
            "resumed run %s from step %d of %d (%s)%s",
            progress.run_id,
            progress.step,
            setup.total_steps,
            rc.checkpoint_dir,
            f" on another mesh: written on {meta['layout']}, now {mesh}"
            if meta.get("layout") not in (None, mesh)
            else "",
        )
    else:
        progress = Progress(run_id=results.run_id(config, "train"))
    claimed = results.claim(
        config.results.results_dir, progress.run_id, config.results.overwrite, resuming
    )
    # --mllog: MLPerf-style lines (no-op without it); a resumed run appends to its own.
    mlog = MLLog.start(
        setup, wall_start, clock, progress.run_id, progress.step if resuming else None
    )
    if not resuming:
        state = setup.init_state()
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

    built = _compile(setup, state, progress, bandwidth)
    compiled = built.compiled
    mlog.init_stop(built.flops.train_step_flops, built.flops.train_step_flops_source)

    guard = PreemptionGuard()
    watch = DivergenceWatch(
        progress, rc.on_divergence, lambda member, step: _bad_examples(setup, member, step)
    )
    check_every = rc.divergence_check_every or tc.log_every
    first = progress.step
    timed_from = first + min(tc.timing_warmup_steps, max(0, setup.total_steps - first - 1))
    injection = rc.nan_injection
    status, reason = "complete", ""
    steps_per_epoch = setup.sampler.steps_per_epoch
    eval_every = tc.eval_every_epochs * steps_per_epoch
    target = config.quality_target().target if config.scored else None
    stopped_at_target = False
    last_eval: tuple[int, EnsembleQuality | None] | None = None  # (step, quality) of the latest
    barrier("before-timing")
    run_start, run_s_before = clock(), progress.run_s
    mlog.run_start(first, run_start)

    def since_start(reading: float) -> float:
        """Run time at a clock reading: earlier segments', then this one's since its run_start."""
        return run_s_before + reading - run_start

    def save(step: int) -> None:
        progress.run_s = since_start(clock())
        progress.skipped_examples = run_record.skipped_examples(setup, progress)
        ckpt.save(step, state, progress.to_meta())

    prefetch = Prefetcher(_batches(setup), first, setup.total_steps, config.data.prefetch)
    timer = StepClock(
        progress,
        timed_from,
        prefetch,
        EpochTimer(progress, steps_per_epoch, run_start, mlog.epoch),
    )
    try:
        try:
            for step in range(first, setup.total_steps):
                batch = prefetch.next()
                if injection and injection[1] == step:
                    state = _poison(state, injection[0])
                state, metrics = compiled(state, batch)
                watch.add(step, metrics.finite, metrics.input_finite)
                timer.dispatched(step, metrics)
                done = step + 1
                if done % check_every == 0 or done == setup.total_steps:
                    reason = watch.check(keep_last=True)
                    if reason:
                        status = "invalid"
                        break
                if done % tc.log_every == 0 and timer.last_metrics is not None:
                    _log_progress(
                        progress,
                        setup.total_steps,
                        timer.last_metrics,
                        layout.ensemble_size * tc.batch_size,
                    )
                if eval_every and done % eval_every == 0:
                    timer.flush()
                    reason = watch.check(keep_last=False)  # a diverged member votes no more
                    if reason:
                        status = "invalid"
                        break
                    with timer.paused(evaluation=True):
                        quality = _evaluate(setup, state, progress, mlog, since_start, oob=False)
                    last_eval = (done, quality)
                    if tc.stop_at_target and curve.reached(quality, target):
                        stopped_at_target = True
                        logging.info("the ensemble reached the target %g at step %d", target, done)
                        break
                if done < setup.total_steps and guard.stop_now(done % check_every == 0):
                    status, reason = "partial", f"preempted by {guard.signal_name} at step {done}"
                    break
                if ckpt and ckpt.due(done) and done < setup.total_steps:
                    with timer.paused():
                        save(done)
            timer.flush()
            if status in ("complete", "partial"):
                # Every step's flags are read before the record and the checkpoint, a preemption's
                # included: a member that went non-finite just before the stop is dated, pruned or
                # (under --on_divergence=stop) makes the run invalid as it would have without it.
                why = watch.check(keep_last=False)
                if why:
                    status, reason = "invalid", why
        finally:
            prefetch.close()
        progress.data_wait_s += timer.data_wait_s
        energy_end = read_energy()
        diverged = progress.diverged
        if diverged and rc.on_divergence == "prune" and len(diverged) == layout.ensemble_size:
            status, reason = "invalid", "every member diverged"

        if ckpt and status != "invalid":
            # Still under the guard: a SIGTERM now (a second one, or the first one after the
            # last step) is noted, not fatal, so the save is never cut short by it.
            save_start = clock()
            save(progress.step)
            ckpt.close()  # the record may only say "resumable" once the save is complete
            progress.checkpoint_s += clock() - save_start
        elif status == "partial":
            logging.warning("preempted without --checkpoint_dir: this run cannot be resumed")
    finally:
        guard.restore()
    quality = None
    if status == "complete" and last_eval and last_eval[0] == progress.step and last_eval[1]:
        quality = _with_oob(setup, state, last_eval[1], progress)  # no second evaluation
    elif status == "complete":
        quality = _evaluate(setup, state, progress, mlog, since_start, oob=True)
    record = run_record.build(
        setup,
        progress,
        built.cost,
        built.flops,
        built.peaks,
        status,
        quality,
        timer.last_metrics,
        progress.eval_s,
        clock() - wall_start,
        reason,
        memory=built.memory,
        comm=built.comm,
        energy=(timer.energy_start, energy_end),
        stopped_at_target=stopped_at_target,
    )
    path = results.write_record(config.results.results_dir, progress.run_id, record)
    claimed.release()
    # Only now may the log say success; a run that can resume ends only a segment.
    mlog.run_stop(record, resumable=status == "partial" and ckpt is not None)
    barrier("exit")
    record["path"] = str(path) if path else None
    if status == "partial":
        return record, PREEMPTED_EXIT_CODE
    return record, FAILED_EXIT_CODE if status == "invalid" else 0
