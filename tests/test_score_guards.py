"""Guards of the score, on one tiny run of the real loop (`run.trainer.train_and_evaluate`,
regression MLP on Friedman #1, M = 4, 64 examples, 6 steps of 16 = 1.5 epochs, a checkpoint
every 2 steps) on a fake clock.

The clock: the loop's and the step module's `time` are replaced by a shim whose perf_counter
(and monotonic) reads a counter that only this test advances, by known amounts:
- COMPILE_S inside `compile_step` (when it lowers the step),
- SAVE_S inside every `Checkpointer.save`,
- EVAL_S inside `evaluate`,
- STEP_S[k], the device time of step k, when the host blocks on that step's StepMetrics with
  `jax.block_until_ready` (as the run clock does), so a step's time arrives when the host waits
  for it, never at dispatch.
Steady-state FLOPS (Eq. 6) must be the step FLOPs over exactly the steps' own time: compile,
checkpoint saves and evaluation each counted there would move step_s, train_wall_s and
metrics.flops_per_s by orders of magnitude.

The same run's out-of-bag estimate is checked against a reference computed here with numpy
from the batches each member was given and each member's parameters (Breiman 1996).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time as real_time

import jax
import numpy as np
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.engine import compiled as step_module
from hpcai_jax.engine import evaluate as evaluate_module
from hpcai_jax.flops import host_cache
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import evaluation, measured_step, probes, trainer
from hpcai_jax.run.checkpoint import Checkpointer

M, B, N, STEPS = 4, 16, 64, 6  # 4 steps per epoch: the run crosses an epoch boundary
COMPILE_S, SAVE_S, EVAL_S = 1000.0, 100.0, 10_000.0
STEP_S = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5]  # distinct: a step booked to another shows
SAVES = 3  # after steps 2 and 4 (inside the training time), and the final one after the loop
OOB_EXAMPLES = 60  # of 64: not all of the set; eval batches of 26, the last one padded


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _TimeShim:
    """Stands for the `time` module in run/clock.py and step.py: the fake clock for durations, the
    real module for anything else."""

    def __init__(self, clock: FakeClock):
        self.perf_counter = self.monotonic = clock.perf_counter

    def __getattr__(self, name):
        return getattr(real_time, name)


class _TimedStep:
    """The compiled step as the loop calls it: each call's StepMetrics owes its step's device
    time, paid on the fake clock when the host blocks on it. Everything else is the real
    compiled step's (cost analysis, HLO text, memory)."""

    def __init__(self, compiled, owed: dict):
        self._compiled, self._owed, self.calls = compiled, owed, 0

    def __call__(self, state, batch):
        state, metrics = self._compiled(state, batch)
        self._owed[id(metrics)] = (metrics, STEP_S[self.calls])
        self.calls += 1
        return state, metrics

    def __getattr__(self, name):
        return getattr(self._compiled, name)


class _Lowering:
    """The jitted step as compile_step sees it: lowering it takes COMPILE_S on the fake clock."""

    def __init__(self, jitted, clock: FakeClock):
        self._jitted, self._clock = jitted, clock

    def lower(self, *args, **kwargs):
        self._clock.advance(COMPILE_S)
        return self._jitted.lower(*args, **kwargs)


@dataclasses.dataclass
class Run:
    record: records.TrainRecord
    exit_code: int
    now: float  # the fake clock at the end
    saves: list  # steps saved
    evaluated: list  # (setup, state, pruned, quality) of every evaluate call
    eval_batches: list  # (done, batches) of every on_batch call the evaluations made


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guards")
    stream = tmp / "stream.json"  # the roofline's bandwidth: not measured here
    stream.write_text(
        json.dumps({"mode": "stream", "kernels": {"triad": {"gb_per_s_per_device": 5.0}}})
    )
    config = tiny_config(
        mesh=C.MeshConfig(M, 1, 2),
        model=C.ModelConfig(workload="regression", model="mlp"),
        data=C.DataConfig(
            dataset="friedman1", train_examples=N, eval_examples=64, oob_examples=OOB_EXAMPLES
        ),
        train=C.TrainConfig(
            batch_size=B, steps=STEPS, eval_batch_size=25, timing_warmup_steps=0, log_every=3
        ),
        results=C.ResultsConfig(
            results_dir=str(tmp / "results"),
            run_name="guards",
            target_quality=0.5,
            stream_record=str(stream),
        ),
        reliability=C.ReliabilityConfig(checkpoint_dir=str(tmp / "ckpt"), checkpoint_every="2"),
    )
    clock, owed, saves, evaluated, eval_batches = FakeClock(), {}, [], [], []
    real_compile, real_evaluate = measured_step.compile_step, evaluation.evaluate
    real_save, real_block = Checkpointer.save, jax.block_until_ready

    def compile_step(step_fn, *args):
        build = real_compile(_Lowering(step_fn, clock), *args)
        return dataclasses.replace(build, compiled=_TimedStep(build.compiled, owed))

    def block_until_ready(x):
        out = real_block(x)
        if id(x) in owed:
            clock.advance(owed.pop(id(x))[1])
        return out

    def save(self, step, state, meta):
        clock.advance(SAVE_S)
        saves.append(step)
        return real_save(self, step, state, meta)

    def evaluate(setup, state, pruned=frozenset(), **kwargs):
        clock.advance(EVAL_S)
        if (given := kwargs.get("on_batch")) is not None:

            def on_batch(done, batches):
                eval_batches.append((done, batches))
                given(done, batches)

            kwargs["on_batch"] = on_batch
        quality = real_evaluate(setup, state, pruned, **kwargs)
        evaluated.append((setup, state, pruned, quality))
        return quality

    with pytest.MonkeyPatch.context() as mp:
        shim = _TimeShim(clock)
        mp.setattr(run_clock, "time", shim)
        mp.setattr(step_module, "time", shim)
        mp.setattr(measured_step, "compile_step", compile_step)
        mp.setattr(evaluation, "evaluate", evaluate)
        # STREAM measured, no real one reused nor this one kept (the process's, host_cache.py)
        mp.setattr(host_cache, "_MEASURED", {})
        mp.delenv("HPCAI_JAX_STARTUP_CACHE", raising=False)  # nor in the suite's
        fake_peaks = {"measured_per_device": 1e9, "measured_method": "-"}
        mp.setattr(probes, "PROBES", probes.replaced(peaks=lambda m: dict(fake_peaks)))
        mp.setattr(Checkpointer, "save", save)
        mp.setattr(jax, "block_until_ready", block_until_ready)
        done = trainer.train_and_evaluate(config)
    assert not owed, "a step's metrics were never waited for"
    return Run(done.record, done.exit_code, clock.now, saves, evaluated, eval_batches)


def test_steady_window_holds_the_steps_and_nothing_else(run):
    record = run.record
    assert run.exit_code == 0 and record.status == "complete", record.reason
    t = record.timing
    assert t.timed_steps == STEPS == t.steps
    assert record.data.epochs_trained == STEPS * B / N
    assert records.to_dict(t.step_s) == pytest.approx(
        {
            "count": STEPS,
            "min_s": min(STEP_S),
            "median_s": statistics.median(STEP_S),
            "max_s": max(STEP_S),
            "mean_s": statistics.fmean(STEP_S),
            "total_s": sum(STEP_S),
        }
    ), "step times hold something other than the steps (compile, a save, evaluation?)"
    assert t.train_wall_s == pytest.approx(sum(STEP_S))
    assert run.saves == [2, 4, STEPS] and len(run.evaluated) == 1
    # What is not in the window is booked where it belongs, and the whole adds up.
    assert t.compile_s == pytest.approx(COMPILE_S)
    assert t.checkpoint_s == pytest.approx(SAVES * SAVE_S)
    assert t.eval_s == pytest.approx(EVAL_S)
    assert t.total_wall_s == pytest.approx(run.now)
    assert run.now == pytest.approx(COMPILE_S + sum(STEP_S) + SAVES * SAVE_S + EVAL_S)
    # The steady figure: (FLOPs per step / M) × useful member-steps / timed seconds.
    f, m = record.flops, record.metrics
    assert f.useful_member_steps == f.timed_member_steps == STEPS * M
    assert f.per_step > 0
    assert m.flops_per_s_steady == pytest.approx(f.per_step * STEPS / sum(STEP_S))
    assert m.images_per_s == pytest.approx(M * B * STEPS / sum(STEP_S))
    assert m.mfu_measured == pytest.approx(m.flops_per_s_steady / 8 / 1e9)
    # Eq. 6 over the one completed epoch (steps 0-3): its steps and the save after step 2 (the
    # save after step 4, on the boundary, belongs to the next epoch); no compile, no evaluation.
    spe = N // B
    (epoch,) = record.epochs
    assert (epoch.index, epoch.first_step, epoch.steps) == (1, 0, spe)
    assert epoch.wall_s == pytest.approx(sum(STEP_S[:spe]) + SAVE_S)
    assert m.flops_per_s == pytest.approx(f.per_step * spe / epoch.wall_s)


def _mlp(params: dict, x: np.ndarray) -> np.ndarray:
    """The regression workload's MLP in numpy (float64): Dense + relu, ..., Dense(1)."""
    names = sorted(params, key=lambda name: int(name.rsplit("_", 1)[1]))
    h = x.astype(np.float64)
    for i, name in enumerate(names):
        h = h @ np.asarray(params[name]["kernel"], np.float64) + params[name]["bias"]
        h = np.maximum(h, 0.0) if i < len(names) - 1 else h
    return h[:, 0]


def _r2(prediction: np.ndarray, y: np.ndarray) -> float:
    return 1.0 - np.sum((prediction - y) ** 2) / np.sum((y - y.mean()) ** 2)


def _reference_oob(setup, state, kept: list[bool]) -> tuple[float, int, float]:
    """Breiman's out-of-bag estimate from first principles: member m trained on the examples of
    its batches (one epoch of them is its whole bootstrap sample: 4 steps × 16 = N = 64 draws,
    with replacement); each of the first OOB_EXAMPLES training examples is predicted by the mean
    of the kept members that never got it, and only examples with at least one such member are
    scored. Returns (R², scored, mean voters)."""
    sampler = setup.sampler
    assert sampler.steps_per_epoch * B == sampler.num_examples == N
    rows = np.arange(OOB_EXAMPLES)
    seen = np.zeros((M, sampler.num_examples), bool)
    for member in range(M):
        for t in range(sampler.steps_per_epoch):
            seen[member, sampler.step_indices(member, t)] = True
    data = setup.datasets.train.read(rows)
    params = jax.tree.map(np.asarray, state.params)
    preds = np.stack([_mlp(jax.tree.map(lambda p, m=m: p[m], params), data["x"]) for m in range(M)])
    votes = ~seen[:, rows] & np.asarray(kept)[:, None]  # [M, examples]
    voters = votes.sum(axis=0)
    scored = voters > 0
    mean = (preds * votes).sum(axis=0)[scored] / voters[scored]
    return _r2(mean, data["y"][scored]), int(scored.sum()), float(voters[scored].mean())


def test_out_of_bag_matches_an_independent_reference(run):
    setup, state, pruned, quality = run.evaluated[0]
    assert pruned == frozenset()
    oob = quality.oob
    assert records.to_dict(run.record.quality.oob) == oob.to_dict()
    want_q, want_scored, want_voters = _reference_oob(setup, state, [True] * M)
    assert oob.subset == OOB_EXAMPLES
    assert (oob.scored, oob.mean_voters) == (want_scored, pytest.approx(want_voters)), (
        "out-of-bag votes are not the members that never trained on the example"
    )
    assert 0.5 * OOB_EXAMPLES < want_scored < OOB_EXAMPLES  # (1 − 0.632^4 ≈ 84 % expected)
    assert oob.quality == pytest.approx(want_q, rel=1e-5, abs=1e-5)
    # The held-out figures too: every member, and the ensemble's mean of all kept members.
    held = setup.datasets.eval.read(np.arange(len(setup.datasets.eval)))
    params = jax.tree.map(np.asarray, state.params)
    preds = [_mlp(jax.tree.map(lambda p, m=m: p[m], params), held["x"]) for m in range(M)]
    assert quality.members == pytest.approx([_r2(p, held["y"]) for p in preds], rel=1e-5, abs=1e-5)
    assert quality.ensemble == pytest.approx(_r2(np.mean(preds, 0), held["y"]), rel=1e-5, abs=1e-5)
    # A pruned member votes nowhere.
    pruned_q = evaluate_module.evaluate(setup, state, frozenset({1}))
    want_q, want_scored, want_voters = _reference_oob(setup, state, [True, False, True, True])
    assert (pruned_q.oob.scored, pruned_q.oob.mean_voters) == (
        want_scored,
        pytest.approx(want_voters),
    )
    assert pruned_q.oob.quality == pytest.approx(want_q, rel=1e-5, abs=1e-5)


def test_every_eval_batch_re_arms_the_watchdog(run):
    """The final evaluation calls the run's on_batch (run/evaluation._watched: the watchdog
    re-armed at its floor) before each batch of its held-out pass and of its out-of-bag pass, so
    a hung device or peer is bounded inside an evaluation as in a step."""
    passes = []
    for done, batches in run.eval_batches:
        if done == 0:
            passes.append([])
        passes[-1].append((done, batches))
    assert len(passes) == 2, run.eval_batches  # held-out, then out-of-bag
    for calls in passes:
        total = calls[0][1]
        assert total >= 2 and calls == [(i, total) for i in range(total)], calls
