"""The training run: compile, train with timing, evaluate the ensemble, write the record."""

from __future__ import annotations

import functools
import time

import jax
import numpy as np
from absl import logging

from hpcai_jax import metrics, results
from hpcai_jax.assemble import RunSetup, assemble
from hpcai_jax.config import RunConfig
from hpcai_jax.data.pipeline import Prefetcher, synthetic_batch, train_batch
from hpcai_jax.evaluate import evaluate
from hpcai_jax.flops.xla import xla_cost
from hpcai_jax.timing import StepTimes, format_duration
from hpcai_jax.train_step import compile_step


def _batches(setup: RunSetup):
    """A function step → Batch, and whether it is synthetic (no host data at all)."""
    tc = setup.config.train
    if setup.datasets.synthetic:
        batch = synthetic_batch(setup.workload.spec, setup.mesh, setup.layout.ensemble_size,
                                tc.batch_size, tc.seed)
        return lambda step: batch
    return functools.partial(train_batch, setup.datasets.train, setup.sampler, setup.mesh,
                             setup.layout.ensemble_size)


def train_and_evaluate(config: RunConfig) -> dict:
    """Runs the bagged-ensemble benchmark and returns (and writes) its results record."""
    run_id = results.new_run_id(config.results.run_name or "train")
    results.check_writable(config.results.results_dir)
    wall_start = time.perf_counter()
    setup = assemble(config)
    layout, tc = setup.layout, config.train
    logging.info("mesh %s: M=%d members, %d per device, P_degree=%d, %d devices; strategy %s (%s)",
                 dict(setup.mesh.shape), layout.ensemble_size, layout.members_per_device,
                 layout.parallel_degree, layout.num_devices, setup.member_strategy,
                 setup.member_strategy_why)

    state = setup.init_state()
    compiled, compile_s = compile_step(setup.train_step, state, setup.mesh, layout, tc.batch_size,
                                       setup.workload.spec.image_shape)
    cost = xla_cost(compiled, layout.num_devices)
    logging.info("compiled the ensemble step in %.1f s; XLA: %s FLOPs per step%s", compile_s,
                 f"{cost.flops:.4g}" if cost.flops is not None else "unknown",
                 f" ({cost.note})" if cost.note else "")

    images_per_step = layout.ensemble_size * tc.batch_size
    warmup = min(tc.timing_warmup_steps, setup.total_steps - 1)
    prefetch = Prefetcher(_batches(setup), 0, setup.total_steps, config.data.prefetch)
    step_s: list[float] = []
    timed_start = time.perf_counter()
    try:
        for step in range(setup.total_steps):
            if step == warmup:
                timed_start, prefetch.wait_s = time.perf_counter(), 0.0
            batch = prefetch.next()
            start = time.perf_counter()
            state, step_metrics = compiled(state, batch.images, batch.labels)
            jax.block_until_ready(step_metrics)
            if step >= warmup:
                step_s.append(time.perf_counter() - start)
            done = step + 1
            if done % tc.log_every == 0 or done == setup.total_steps:
                rate = images_per_step / (step_s[-1] if step_s else time.perf_counter() - start)
                eta = (setup.total_steps - done) * (np.median(step_s) if step_s else 0.0)
                logging.info("step %d/%d  loss %.4f  train acc %.3f  %.0f img/s  ETA %s", done,
                             setup.total_steps, float(np.mean(step_metrics.loss)),
                             float(np.mean(step_metrics.accuracy)), rate, format_duration(eta))
    finally:
        prefetch.close()
    train_wall_s = time.perf_counter() - timed_start
    data_wait_s = prefetch.wait_s

    eval_start = time.perf_counter()
    quality = evaluate(setup, state)
    eval_s = time.perf_counter() - eval_start

    timed_steps = len(step_s)
    flops = metrics.flops_per_s(cost.flops, timed_steps, train_wall_s)
    achieved = quality.ensemble if quality else None
    record = {
        "run_id": run_id,
        "mode": "train",
        "status": "complete",
        "config": config.to_dict(),
        "provenance": results.provenance(),
        "mesh": {
            "shape": dict(setup.mesh.shape), "ensemble_size": layout.ensemble_size,
            "members_per_device": layout.members_per_device,
            "parallel_degree": layout.parallel_degree, "num_devices": layout.num_devices,
            "member_strategy": setup.member_strategy,
            "member_strategy_why": setup.member_strategy_why,
        },
        "data": {
            "dataset": config.data.dataset, "synthetic": setup.datasets.synthetic,
            "train_examples": setup.sampler.num_examples,
            "eval_examples": quality.examples if quality else 0,
            "bootstrap": tc.bootstrap, "steps_per_epoch": setup.sampler.steps_per_epoch,
            "epochs_trained": setup.total_steps / setup.sampler.steps_per_epoch,
        },
        "timing": {
            "compile_s": compile_s, "steps": setup.total_steps, "warmup_steps": warmup,
            "timed_steps": timed_steps, "step_s": StepTimes.of(step_s).__dict__,
            "train_wall_s": train_wall_s, "data_wait_s": data_wait_s, "eval_s": eval_s,
            "total_wall_s": time.perf_counter() - wall_start,
        },
        "flops": {
            "per_step": cost.flops, "per_step_per_device": cost.flops_per_device,
            "source": "xla_cost_analysis", "note": cost.note,
        },
        "metrics": {
            "flops_per_s": flops,
            "vflops_per_s": metrics.vflops_per_s(flops, achieved, config.target_quality,
                                                 config.quality_exponent),
            "penalty": (metrics.penalty(achieved, config.target_quality, config.quality_exponent)
                        if achieved is not None else None),
            "images_per_s": images_per_step * timed_steps / train_wall_s if train_wall_s else None,
            "images_per_s_per_member": tc.batch_size * timed_steps / train_wall_s if train_wall_s else None,
        },
        "quality": {
            "metric": "top1_accuracy", "target": config.target_quality,
            "exponent": config.quality_exponent,
            "members": quality.members if quality else None,
            "member_mean": quality.member_mean if quality else None,
            "ensemble": achieved,
        },
        "train": {
            "final_loss": np.asarray(step_metrics.loss).tolist(),
            "final_batch_accuracy": np.asarray(step_metrics.accuracy).tolist(),
        },
    }
    path = results.write_record(config.results.results_dir, run_id, record)
    record["path"] = str(path) if path else None
    return record


def summary(record: dict) -> str:
    """A short human-readable table of the record's headline figures."""
    m, q, t, mesh = record["metrics"], record["quality"], record["timing"], record["mesh"]

    def num(value, fmt="{:.4g}"):
        return "n/a" if value is None else fmt.format(value)

    rows = [
        ("mesh (ensemble x data)", f"{mesh['shape']}  M={mesh['ensemble_size']} "
                                   f"P_degree={mesh['parallel_degree']} strategy={mesh['member_strategy']}"),
        ("steps (timed)", f"{t['steps']} ({t['timed_steps']})"),
        ("step time median [s]", num(t["step_s"]["median_s"])),
        ("compile / data wait [s]", f"{t['compile_s']:.1f} / {t['data_wait_s']:.2f}"),
        ("images/s", num(m["images_per_s"], "{:.1f}")),
        ("FLOPS [FLOP/s]", num(m["flops_per_s"])),
        ("member accuracies", "n/a" if q["members"] is None else " ".join(f"{a:.4f}" for a in q["members"])),
        ("ensemble accuracy", num(q["ensemble"], "{:.4f}")),
        ("VFLOPS [FLOP/s]", f"{num(m['vflops_per_s'])} (target {q['target']}, n={q['exponent']:g})"),
        ("record", str(record.get("path"))),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
