"""Eq. 6 per epoch and time to target, through the real training loop on a fake clock.

One in-process Fashion-MNIST run, shared by the tests here: 8 steps per epoch, 3 planned epochs,
held-out evaluation every epoch, --stop_at_target with a target the ensemble first reaches after
epoch 2, a checkpoint every 6 steps (inside each epoch, never right after an evaluation, so that
neither can hide the other), --mllog. The run clock is replaced by one that moves only
when the run waits for input, completes a step, compiles, saves a checkpoint or evaluates, each
by its own power of ten, so every timing figure of the record is an exact sum whose terms can be
read off: a second that lands in the wrong window changes the digits.
"""

from __future__ import annotations

import json
import subprocess

import jax
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.data.pipeline import Prefetcher
from hpcai_jax.engine.step import StepMetrics
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import evaluation, measured_step, probes, trainer
from hpcai_jax.run.checkpoint import Checkpointer
from hpcai_jax.run.clock import EpochTimer
from hpcai_jax.run.progress import Progress
from hpcai_jax.telemetry import mllog

WAIT, STEP, SAVE, EVAL, COMPILE = 1.0, 10.0, 100.0, 1_000.0, 10_000.0
STEPS_PER_EPOCH, CHECKPOINT_EVERY = 8, 6
# Reached after epoch 2 and not after epoch 1 (0.155 then 0.265 on this configuration).
TARGET = 0.2


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def after(self, seconds: float, call):
        """`call` wrapped so that the clock moves by `seconds` each time it runs."""

        def wrapped(*args, **kwargs):
            result = call(*args, **kwargs)
            self.now += seconds
            return result

        return wrapped


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(record, MLLOG path, {step: metadata of the checkpoint saved there}) of the shared run.
    Saves only move the clock and keep the metadata: orbax's own time is not under test."""
    tmp = tmp_path_factory.mktemp("epochs")
    config = tiny_config(
        data=C.DataConfig(train_examples=16 * STEPS_PER_EPOCH, eval_examples=200, oob_examples=64),
        train=C.TrainConfig(
            batch_size=16,
            epochs=3,
            eval_batch_size=100,
            log_every=100,
            eval_every_epochs=1,
            stop_at_target=True,
        ),
        optim=C.OptimConfig(lr_schedule="constant", learning_rate=1.6),
        results=C.ResultsConfig(
            target_quality=TARGET, results_dir=str(tmp / "r"), mllog=str(tmp / "run.mllog")
        ),
        reliability=C.ReliabilityConfig(
            checkpoint_dir=str(tmp / "ck"), checkpoint_every=str(CHECKPOINT_EVERY)
        ),
    )
    clock, saved = FakeClock(), {}
    block = jax.block_until_ready

    def block_step(x):  # a step's device time shows when the host waits for it
        if isinstance(x, StepMetrics):
            clock.now += STEP
        return block(x)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_clock, "read", clock)
        mp.setattr(jax, "block_until_ready", block_step)
        mp.setattr(Prefetcher, "next", clock.after(WAIT, Prefetcher.next))
        mp.setattr(
            Checkpointer, "save", clock.after(SAVE, lambda _, s, __, m: saved.update({s: m}))
        )
        mp.setattr(evaluation, "evaluate", clock.after(EVAL, evaluation.evaluate))
        mp.setattr(measured_step, "compile_step", clock.after(COMPILE, measured_step.compile_step))

        # Not under test, and seconds each: the peak and bandwidth measurements at start, stood
        # in for through the probes' registry, which then neither reads nor keeps them.
        def fake_peaks(m):
            return {"dtype": m.setup.config.model.dtype, "measured_method": "fake"}

        stand_ins = probes.replaced(peaks=fake_peaks, stream=lambda m: (1e9, "a test"))
        mp.setattr(probes, "PROBES", stand_ins)
        done = trainer.train_and_evaluate(config)
    assert done.exit_code == 0, done.record.reason
    return done.record, tmp / "run.mllog", saved


@pytest.mark.slow
def test_epoch_and_steady_windows_on_the_fake_clock(run):
    record, _, _ = run
    epochs, timing = record.epochs, record.timing
    assert [(e.index, e.first_step, e.steps) for e in epochs] == [(1, 0, 8), (2, 8, 8)]
    # An epoch: its steps, their input waits, and the save inside it (at step 6, at step 12).
    # Never the compilation, never an evaluation.
    assert [e.wall_s for e in epochs] == [8 * (WAIT + STEP) + SAVE] * 2
    # The steady window: timed steps 1..15 and the input waits after step 0 completed (steps
    # 2..15); no save, no evaluation, no compilation.
    assert timing.timed_steps == 15
    assert timing.train_wall_s == 15 * STEP + 14 * WAIT
    assert timing.eval_s == 2 * EVAL  # the final quality is the second evaluation's
    assert timing.checkpoint_s == 3 * SAVE  # steps 6, 12, and the final save
    # Eq. 6: every completed epoch's FLOPs (all 4 members healthy) over their time.
    per_step = record.flops.per_step
    assert [e.flops for e in epochs] == [8 * per_step, 8 * per_step]
    assert epochs[0].flops_per_s == pytest.approx(8 * per_step / epochs[0].wall_s)
    m = record.metrics
    assert m.flops_per_s == pytest.approx(16 * per_step / sum(e.wall_s for e in epochs))
    assert m.flops_per_s_why is None
    assert m.flops_per_s_steady == pytest.approx(15 * per_step / timing.train_wall_s)
    assert m.vflops_per_s == pytest.approx(m.flops_per_s * m.penalty)
    assert m.vflops_per_s_steady == pytest.approx(m.flops_per_s_steady * m.penalty)


@pytest.mark.slow
def test_stopped_at_target_with_its_curve_and_time_to_target(run):
    record, _, _ = run
    q, epoch = record.quality, 8 * (WAIT + STEP)
    assert record.status == "complete" and q.stopped_at_target is True
    assert record.timing.steps == 16 < record.timing.planned_steps == 24
    curve = q.curve
    assert [(p.epoch, p.step) for p in curve] == [(1.0, 8), (2.0, 16)]
    # Seconds since run_start at the end of each evaluation: the epochs and evaluations so far.
    assert [p.wall_s for p in curve] == [epoch + SAVE + EVAL, 2 * (epoch + SAVE + EVAL)]
    assert curve[0].ensemble < TARGET <= curve[1].ensemble
    assert record.time_to_target_s == curve[1].wall_s
    assert record.time_to_target_why is None
    # The run's quality is the evaluation that reached the target, with the out-of-bag estimate.
    assert q.ensemble == curve[1].ensemble and q.members == curve[1].members
    assert q.oob.subset == 64
    assert len(curve[1].members) == 4 and curve[1].member_mean == q.member_mean


@pytest.mark.slow
def test_the_runs_mllog_passes_the_checker(run, tmp_path):
    record, log, _ = run
    lines = [json.loads(line.removeprefix(":::MLLOG ")) for line in log.read_text().splitlines()]
    evals = [line for line in lines if line["key"] == "eval_accuracy"]
    assert [line["metadata"]["epoch_num"] for line in evals] == [1, 2]
    assert [line["value"] for line in evals] == [p.ensemble for p in record.quality.curve]
    at = {
        (line["key"], line["metadata"].get("epoch_num")): line["time_ms"]
        for line in lines
        if line["key"] in ("run_start", "eval_stop")
    }
    # The log times the run on the record's clock: eval_stop - run_start is the time to target.
    to_target = at[("eval_stop", 2)] - at[("run_start", None)]
    assert abs(to_target - record.time_to_target_s * 1e3) <= 1
    flops = next(line for line in lines if line["key"] == "flops_per_s")
    assert flops["value"] == record.metrics.flops_per_s and flops["metadata"]["epochs"] == 2
    proc = subprocess.run(
        mllog.checker_command(log, tmp_path / "checker.log"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stderr and "WARNING" not in proc.stderr


@pytest.mark.slow
def test_checkpoints_carry_the_completed_epochs_and_the_open_ones_time(run):
    record, _, saved = run
    assert sorted(saved) == [6, 12, 16]
    # Step 12: epoch 1 complete, 4 steps of epoch 2 booked, one evaluation; what a resume from
    # it reports (Progress.from_meta).
    meta = Progress.from_meta(json.loads(json.dumps(saved[12])))
    assert meta.epochs == [{k: getattr(record.epochs[0], k) for k in meta.epochs[0]}]
    assert meta.epoch_open_s == 4 * (WAIT + STEP)
    assert meta.curve == records.to_dict(record.quality.curve[:1])
    assert meta.run_s == record.epochs[0].wall_s + EVAL + 4 * (WAIT + STEP)
    assert Progress.from_meta(saved[16]).epochs == [
        {k: getattr(e, k) for k in ("index", "first_step", "steps", "wall_s")}
        for e in record.epochs
    ]


def test_an_interrupted_epoch_keeps_its_time_across_a_resume():
    """Epoch 1 done, epoch 2 preempted after 3 of its 4 steps: the checkpoint's metadata carries
    both, and the resumed segment adds its own time to the open epoch from its run_start."""
    progress = Progress(run_id="r")
    timer = EpochTimer(progress, steps_per_epoch=4, start=100.0)
    for step, now in enumerate([101.0, 102.0, 103.0, 104.0, 105.0, 106.0, 107.0]):
        timer.completed(step, now)
    meta = json.loads(json.dumps(progress.to_meta()))  # as the checkpoint stores it
    resumed = Progress.from_meta(meta)
    assert resumed.epochs == [{"index": 1, "first_step": 0, "steps": 4, "wall_s": 4.0}]
    assert resumed.epoch_open_s == 3.0
    timer = EpochTimer(resumed, steps_per_epoch=4, start=500.0)  # the resume's run_start
    timer.completed(7, 502.5)
    assert resumed.epochs[1] == {"index": 2, "first_step": 4, "steps": 4, "wall_s": 5.5}
    assert resumed.epoch_open_s == 0.0


def test_an_evaluation_is_cut_out_of_its_epoch():
    progress = Progress(run_id="r")
    timer = EpochTimer(progress, steps_per_epoch=2, start=0.0)
    timer.completed(0, 1.0)
    timer.completed(1, 2.0)
    timer.excise(50.0)  # evaluated from 2 to 52
    timer.completed(2, 53.0)
    timer.completed(3, 54.0)
    assert [e["wall_s"] for e in progress.epochs] == [2.0, 2.0]
