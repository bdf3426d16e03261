"""A held-out quality that is undefined (R² over one example: no variance to explain) is a run's
figure like any other: logged as undefined, no curve point, never the target reached, and the run
completes. `check --rerun_steps` re-runs a package with one held-out example, so a regression
package's re-run used to end in a TypeError."""

from __future__ import annotations

import types

import pytest
from helpers import run_in_process

from hpcai_jax import records
from hpcai_jax.run import evaluation
from hpcai_jax.telemetry.events import EventLog


def test_an_undefined_quality_never_reaches_the_target():
    assert not evaluation.reached(types.SimpleNamespace(ensemble=None), 0.9)
    assert evaluation.reached(types.SimpleNamespace(ensemble=0.95), 0.9)
    curve = [{"step": 5, "ensemble": None, "wall_s": 1.0}]
    seconds, why = evaluation.time_to_target(curve, 0.9, [], "complete")
    assert seconds is None and "quality undefined in 1 evaluation(s)" in why
    curve.append({"step": 9, "ensemble": 0.8, "wall_s": 2.0})
    assert "best 0.8000 in 2 evaluation(s)" in evaluation.time_to_target(curve, 0.9, [], "")[1]
    curve.append({"step": 12, "ensemble": 0.91, "wall_s": 3.0})
    assert evaluation.time_to_target(curve, 0.9, [], "complete") == (3.0, None)


def test_mllogs_run_stop_says_undefined_not_unevaluated():
    """run_stop's reason for a complete run that missed its target: an evaluation whose quality
    is undefined is not the absence of one."""
    from hpcai_jax.telemetry import mllog

    def record(curve):
        quality = types.SimpleNamespace(target=0.9, curve=curve, ensemble=None)
        return types.SimpleNamespace(quality=quality, status="complete", reason="")

    undefined = [types.SimpleNamespace(ensemble=None)] * 2
    assert mllog.outcome(record(undefined)) == {
        "status": "aborted",
        "reason": "target 0.9 not reached: quality undefined in 2 evaluation(s)",
        "record_status": "complete",
    }
    assert mllog.outcome(record([]))["reason"] == "target 0.9 not reached: no evaluation"


def test_an_undefined_scalar_writes_no_point(tmp_path):
    log = EventLog.open(str(tmp_path))
    log.scalar("final/ensemble", None, 5)
    log.scalar("final/ensemble", 0.5, 5)
    log.close()
    assert log.summary()["scalars_written"] == 1 and log.lost is None


@pytest.mark.slow
def test_a_regression_run_evaluated_on_one_example_completes(tmp_path):
    proc = run_in_process(
        "--workload=regression",
        "--model=mlp",
        "--dataset=friedman1",
        "--ensemble_size=2",
        "--parallel_degree=4",
        "--batch_size=16",
        "--train_examples=64",
        "--eval_examples=1",
        "--steps=3",
        "--target_quality=0.9",
        f"--results_dir={tmp_path}",
        "--run_name=one",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ensemble r2 undefined" in proc.stderr
    record = records.read(tmp_path / "one.json")
    assert record.status == "complete" and record.quality.ensemble is None
    assert "quality undefined" in record.time_to_target_why
