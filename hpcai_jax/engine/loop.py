"""The training run: resume or initialise, compile, train with timing, watch for divergence and
preemption, checkpoint, evaluate the ensemble, write the record.

Step times are read one step late (the host blocks on step k-1 after dispatching step k), so the
device always has work queued and the timing adds no bubble; divergence flags are computed on the
device every step and read every few steps.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from hpcai_jax import results
from hpcai_jax.config import RunConfig
from hpcai_jax.data.pipeline import Prefetcher, synthetic_batch, train_batch
from hpcai_jax.distributed import barrier
from hpcai_jax.engine import record as run_record
from hpcai_jax.engine.checkpoint import Checkpointer, fingerprint
from hpcai_jax.engine.evaluate import evaluate
from hpcai_jax.engine.flop_count import crosscheck
from hpcai_jax.engine.preemption import FAILED_EXIT_CODE, PREEMPTED_EXIT_CODE, PreemptionGuard
from hpcai_jax.engine.progress import Progress
from hpcai_jax.engine.setup import RunSetup, build_setup
from hpcai_jax.engine.step import compile_step
from hpcai_jax.engine.timing import format_duration
from hpcai_jax.errors import UsageError
from hpcai_jax.flops.peaks import measure_matmul_peak_all, peak_flops_per_device
from hpcai_jax.flops.xla import xla_cost


def _batches(setup: RunSetup):
    """A function step → Batch."""
    tc = setup.config.train
    if setup.datasets.synthetic:
        batch = synthetic_batch(setup.workload.synthetic, setup.mesh, setup.layout.ensemble_size,
                                tc.batch_size, tc.seed)
        return lambda step: batch
    return functools.partial(train_batch, setup.datasets.train, setup.sampler, setup.mesh,
                             setup.layout.ensemble_size)


def _claim_record_path(config: RunConfig, run_id: str, resuming: bool) -> None:
    """Refuses, before any compute, to overwrite another run's record. A resumed run may replace
    its own partial record."""
    path = Path(config.results.results_dir) / f"{run_id}.json"
    if not path.exists() or config.results.overwrite or jax.process_index() != 0:
        return
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError):
        existing = {}
    if resuming and existing.get("run_id") == run_id and existing.get("status") == "partial":
        return
    raise UsageError(f"--results_dir={config.results.results_dir} already holds a record of run id "
                     f"{run_id}: choose another --run_name, or pass --overwrite to replace it")


def _peak_flops(dtype: str) -> dict:
    """Per-device peak FLOP/s for MFU: the datasheet figure where the device is in the table, and
    a large-matmul figure measured with all local devices at once, as the step runs them (on a
    CPU the devices share the cores, so one device alone would overstate each one's share)."""
    kind = jax.local_devices()[0].device_kind
    measured = measure_matmul_peak_all(dtype)
    return {"device_kind": kind, "dtype": dtype,
            "datasheet_per_device": peak_flops_per_device(kind, dtype),
            "measured_per_device": measured.per_device,
            "measured_aggregate": measured.aggregate,
            "measured_method": measured.method}


def _poison(state, member: int):
    """The --inject_nan test hook: NaN in every parameter of one member, shardings kept."""
    shardings = jax.tree.map(lambda x: x.sharding, state)

    def set_nan(s):
        return s.replace(params=jax.tree.map(lambda p: p.at[member].set(jnp.nan), s.params))

    return jax.jit(set_nan, out_shardings=shardings, donate_argnums=0)(state)


def _divergence(watch, progress: Progress, policy: str, keep_last: bool) -> str:
    """Logs newly diverged members; returns why the run must stop ('' to go on)."""
    for member in watch.check(keep_last):
        logging.error("member %d diverged: non-finite loss or parameters at step %d", member,
                      progress.pruned[member])
    if not progress.pruned or policy != "stop":
        return ""
    member = min(progress.pruned, key=progress.pruned.get)
    return f"member {member} diverged at step {progress.pruned[member]} (non-finite loss or parameters)"


class _Watch:
    """Reads the on-device finite flags of completed steps, a few steps at a time."""

    def __init__(self, progress: Progress):
        self._pending: list[tuple[int, jax.Array]] = []
        self._progress = progress

    def add(self, step: int, finite: jax.Array) -> None:
        self._pending.append((step, finite))

    def check(self, keep_last: bool) -> list[int]:
        """Newly non-finite members (first bad step recorded in progress.pruned)."""
        ready = self._pending[:-1] if keep_last else self._pending
        self._pending = self._pending[-1:] if keep_last else []
        new = []
        for step, finite in ready:
            for member in np.flatnonzero(~np.asarray(finite)):
                if int(member) not in self._progress.pruned:
                    self._progress.pruned[int(member)] = step
                    new.append(int(member))
        return new


def train_and_evaluate(config: RunConfig) -> tuple[dict, int]:
    """Runs the bagged-ensemble benchmark; returns its record (also written) and the exit code."""
    wall_start = time.perf_counter()
    results.check_writable(config.results.results_dir)
    setup = build_setup(config)
    rc = config.reliability
    ckpt = (Checkpointer(rc.checkpoint_dir, rc.checkpoint_every, rc.keep_checkpoints,
                         fingerprint(config, setup.layout)) if rc.checkpoint_dir else None)
    try:
        return _train(setup, ckpt, wall_start)
    finally:
        if ckpt:  # waits for pending saves on every path, errors and divergence included
            ckpt.close()


def _train(setup: RunSetup, ckpt: Checkpointer | None, wall_start: float) -> tuple[dict, int]:
    config = setup.config
    layout, tc, rc = setup.layout, config.train, config.reliability
    resuming = ckpt is not None and ckpt.latest_step() is not None
    if resuming:
        state, meta = ckpt.restore(setup.abstract_state)
        progress = Progress.from_meta(meta)
        progress.note_resume()
        logging.info("resumed run %s from step %d of %d (%s)", progress.run_id, progress.step,
                     setup.total_steps, rc.checkpoint_dir)
    else:
        progress = Progress(run_id=config.results.run_name or results.new_run_id("train"))
    _claim_record_path(config, progress.run_id, resuming)
    if not resuming:
        state = setup.init_state()
    logging.info("mesh %s: M=%d members, %d per device, P_degree=%d, %d devices; strategy %s (%s)",
                 dict(setup.mesh.shape), layout.ensemble_size, layout.members_per_device,
                 layout.parallel_degree, layout.num_devices, setup.member_strategy,
                 setup.member_strategy_why)

    compiled, compile_s = compile_step(setup.train_step, state, setup.mesh, layout, tc.batch_size,
                                       setup.workload.spec.fields)
    progress.compile_s.append(compile_s)
    cost = xla_cost(compiled, layout.num_devices)
    cross = crosscheck(config, cost.flops, list(setup.mesh.devices.flat))
    logging.info("compiled the ensemble step in %.1f s; %s FLOPs per step from %s (%s)%s",
                 compile_s, f"{cross['train_step_flops']:.4g}", cross["train_step_flops_source"],
                 cross["source_reason"], f"; {cost.note}" if cost.note else "")
    if cross["crosscheck_ok"] is False:
        logging.warning("FLOP CROSS-CHECK FAILED: %s. FLOPS use %s; the record says so "
                        "(flops.crosscheck_ok = false)", cross["source_reason"],
                        cross["train_step_flops_source"])
    peaks = _peak_flops(config.model.dtype)

    guard = PreemptionGuard()
    watch = _Watch(progress)
    check_every = rc.divergence_check_every or tc.log_every
    images_per_step = layout.ensemble_size * tc.batch_size
    first = progress.step
    timed_from = first + min(tc.timing_warmup_steps, max(0, setup.total_steps - first - 1))
    injection = rc.nan_injection
    status, reason = "complete", ""
    last_metrics = inflight = None
    barrier("before-timing")
    prefetch = Prefetcher(_batches(setup), first, setup.total_steps, config.data.prefetch)
    last_done, wait_mark = time.perf_counter(), 0.0

    def complete(step, metrics):
        """Blocks on `step` (dispatched earlier) and books its time."""
        nonlocal last_done, wait_mark, last_metrics
        jax.block_until_ready(metrics)
        now = time.perf_counter()
        if step >= timed_from:
            progress.time_step(step, now - last_done)
        elif step == timed_from - 1:
            wait_mark = prefetch.wait_s
        last_done, last_metrics = now, metrics
        progress.step = step + 1

    try:
        for step in range(first, setup.total_steps):
            batch = prefetch.next()
            if injection and injection[1] == step:
                state = _poison(state, injection[0])
            state, metrics = compiled(state, batch)
            watch.add(step, metrics.finite)
            if inflight is not None:
                complete(*inflight)
            inflight = (step, metrics)
            done = step + 1
            if done % check_every == 0 or done == setup.total_steps:
                reason = _divergence(watch, progress, rc.on_divergence, keep_last=True)
                if reason:
                    status = "invalid"
                    break
            if done % tc.log_every == 0 and last_metrics is not None:
                median = float(np.median(progress.step_s)) if progress.step_s else 0.0
                logging.info("step %d/%d  loss %.4f  %s  %s examples/s  ETA %s",
                             progress.step, setup.total_steps,
                             float(np.nanmean(last_metrics.loss)),
                             "  ".join(f"train {k} {float(np.nanmean(v)):.3f}"
                                       for k, v in last_metrics.metrics.items()),
                             f"{images_per_step / median:.0f}" if median else "-",
                             format_duration((setup.total_steps - done) * median))
            if done < setup.total_steps and guard.stop_now(done % check_every == 0):
                status, reason = "partial", f"preempted by {guard.signal_name} at step {done}"
                break
            if ckpt and ckpt.due(done) and done < setup.total_steps:
                complete(*inflight)
                inflight = None
                save_start = time.perf_counter()
                ckpt.save(done, state, progress.to_meta())
                last_done = time.perf_counter()  # the save is booked apart, not as step time
                progress.checkpoint_s += last_done - save_start
        if inflight is not None:
            complete(*inflight)
        if status == "complete":
            reason = _divergence(watch, progress, rc.on_divergence, keep_last=False)
            status = "invalid" if reason else status
    finally:
        prefetch.close()
        guard.restore()
    progress.data_wait_s += prefetch.wait_s - wait_mark
    if progress.pruned and rc.on_divergence == "prune" and len(progress.pruned) == layout.ensemble_size:
        status, reason = "invalid", "every member diverged"

    if ckpt and status != "invalid":
        save_start = time.perf_counter()
        ckpt.save(progress.step, state, progress.to_meta())
        ckpt.close()  # the record may only say "resumable" once the save is complete
        progress.checkpoint_s += time.perf_counter() - save_start
    elif status == "partial":
        logging.warning("preempted without --checkpoint_dir: this run cannot be resumed")
    quality, eval_s = None, 0.0
    if status == "complete":
        eval_start = time.perf_counter()
        quality = evaluate(setup, state, frozenset(progress.pruned))
        eval_s = time.perf_counter() - eval_start
    record = run_record.build(setup, progress, cost, cross, peaks, status, quality, last_metrics,
                              eval_s, time.perf_counter() - wall_start, reason)
    path = results.write_record(config.results.results_dir, progress.run_id, record)
    barrier("exit")
    record["path"] = str(path) if path else None
    if status == "partial":
        return record, PREEMPTED_EXIT_CODE
    return record, FAILED_EXIT_CODE if status == "invalid" else 0
