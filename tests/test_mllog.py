"""--mllog: a real training run's MLLOG file passes the compliance checker under the project's
ruleset, broken copies of it fail, and a bad path or a missing package is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import TINY
from helpers import assert_one_line_error, run_in_process

from hpcai_jax import config as C
from hpcai_jax.errors import UsageError
from hpcai_jax.telemetry import mllog


@pytest.fixture(scope="module")
def good_run(tiny_run):
    """The session's tiny CLI run, made with --mllog (the log's directory did not exist yet): 2
    epochs of 2 steps, the ensemble evaluated after each (Eq. 6 needs a completed epoch)."""
    return tiny_run.mllog, tiny_run.record


def _lines(text: str) -> list[dict]:
    return [json.loads(line.removeprefix(":::MLLOG ")) for line in text.splitlines()]


def _check(log, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        mllog.checker_command(log, tmp_path / "checker.log"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_log_passes_the_checker(good_run, tmp_path):
    log, record = good_run
    lines = _lines(log.read_text())
    first, last = {}, {}
    for line in lines:
        first.setdefault(line["key"], line)
        last[line["key"]] = line
    value = {key: line["value"] for key, line in first.items()}
    assert value["submission_benchmark"] == "hpcai500_image_classification"
    # Fashion-MNIST has no official target: open, by the rules the record's division follows.
    assert value["submission_division"] == "open" == record["submission"]["division"]
    assert (
        first["submission_division"]["metadata"]["violations"]
        == (record["submission"]["violations"])
    )
    assert record["submission"]["violations"][0].startswith("no official target for")
    assert (value["submission_org"], value["submission_platform"]) == ("Test Org", "8 CPU devices")
    assert value["submission_status"] == "onprem"
    assert (value["number_of_nodes"], value["accelerators_per_node"]) == (1, 8)
    assert record["mllog"] == str(log)  # the record names its log
    assert (value["number_of_models"], value["per_model_batch_size"]) == (4, 16)
    assert value["global_batch_size"] == 64
    assert value["opt_name"] == "sgd" and value["opt_base_learning_rate"] == 0.1 * 16 / 256
    evals = [line for line in lines if line["key"] == "eval_accuracy"]
    assert [e["metadata"]["epoch_num"] for e in evals] == [1, 2]
    assert [e["value"] for e in evals] == [p["ensemble"] for p in record["quality"]["curve"]]
    assert last["eval_accuracy"]["value"] == record["quality"]["ensemble"]
    assert first["eval_accuracy"]["metadata"]["metric"] == "top1_accuracy"
    assert first["flops_per_s"]["metadata"]["epochs"] == 2
    assert value["flops_per_s"] == record["metrics"]["flops_per_s"]
    assert value["vflops_per_s"] == record["metrics"]["vflops_per_s"]
    assert first["epoch_start"]["metadata"]["epoch_num"] == 1
    assert value["flops_per_step"] == record["flops"]["per_step"]
    assert first["flops_per_step"]["metadata"]["source"] == record["flops"]["source"]
    # An epoch's lines are at the record's epoch boundaries: its wall time to the millisecond.
    starts = [x["time_ms"] for x in lines if x["key"] == "epoch_start"]
    stops = [x for x in lines if x["key"] == "epoch_stop"]
    assert [x["metadata"]["steps"] for x in stops] == [e["steps"] for e in record["epochs"]]
    for start, stop, epoch in zip(starts, stops, record["epochs"], strict=True):
        assert abs((stop["time_ms"] - start) / 1e3 - epoch["wall_s"]) < 0.002
    assert abs(starts[0] - first["run_start"]["time_ms"]) <= 1  # the first starts at run_start
    assert lines[-1]["key"] == "run_stop" and lines[-1]["metadata"]["status"] == "success"
    assert first["run_start"]["metadata"]["file"] == "hpcai_jax/run/loop.py"
    # Every workload, optimizer and schedule the engine runs is one the ruleset accepts.
    rules = mllog.RULESET.read_text()
    assert all(f"hpcai500_{w}" in rules for w in C.WORKLOADS)
    assert all(f"'{name}'" in rules for name in C.OPTIMIZERS + C.LR_SCHEDULES)
    assert value["model_parallel"] == 1

    proc = _check(log, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stderr and "WARNING" not in proc.stderr


@pytest.mark.parametrize(
    "key,edit,expected",
    [
        ("run_stop", None, "Required EXACTLY_ONE occurrence of 'run_stop' but found 0"),
        ("number_of_models", {"value": 0}, "CHECK for 'number_of_models' failed"),
        ("run_stop", {"metadata": {"status": "aborted"}}, "CHECK for 'run_stop' failed"),
        ("global_batch_size", {"value": 32}, "s['values']['global_batch_size'] =="),
        # Eq. 5 with P_model: the same 8 devices cannot hold members split two ways.
        ("model_parallel", {"value": 2}, "* s['values']['model_parallel'] =="),
        ("opt_name", {"value": "rmsprop"}, "CHECK for 'opt_name' failed"),
        ("number_of_nodes", None, "Required EXACTLY_ONE occurrence of 'number_of_nodes'"),
        ("submission_division", {"value": "closed"}, "CHECK for 'submission_division' failed"),
        # A run shorter than one epoch has no Eq. 6 figure: nothing a ranking can take.
        ("flops_per_s", None, "Required EXACTLY_ONE occurrence of 'flops_per_s' but found 0"),
        # FLOPs per step: its own line, the figure flops_per_s names.
        ("flops_per_step", {"value": 1.0}, "s['values']['flops_per_step']"),
        ("epoch_stop", {"metadata": {"epoch_num": 1, "step_num": 2}}, "v['metadata']['steps']"),
    ],
    ids=[
        "no-run_stop",
        "no-models",
        "aborted",
        "batch-mismatch",
        "eq5-model",
        "optimizer",
        "no-nodes",
        "closed-with-violations",
        "no-eq6",
        "flops-per-step",
        "epoch-without-steps",
    ],
)
def test_broken_log_fails_the_checker(good_run, tmp_path, key, edit, expected):
    proc = _check(_edited(good_run[0], tmp_path, {key: edit}), tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED" in proc.stderr and expected in proc.stderr, proc.stderr


def test_table_2_optimizer_and_schedule_pass_the_checker(good_run, tmp_path):
    edits = {
        "opt_name": {"value": "lars"},
        "opt_learning_rate_decay_schedule": {"value": "warmup_polynomial"},
    }
    proc = _check(_edited(good_run[0], tmp_path, edits), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _edited(log, tmp_path, edits: dict):
    """A copy of `log` with the lines of some keys changed (an edit of None drops the line)."""
    lines = []
    for line in _lines(log.read_text()):
        if line["key"] in edits:
            if edits[line["key"]] is None:
                continue
            line = {**line, **edits[line["key"]]}
        lines.append(":::MLLOG " + json.dumps(line))
    path = tmp_path / "edited.mllog"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_unwritable_mllog_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", f"--mllog={blocker}/sub/run.mllog")
    assert_one_line_error(proc, f"--mllog={blocker}/sub/run.mllog", "cannot write")
    assert blocker.read_text() == "not a directory"
    assert not list((tmp_path / "r").iterdir())  # no record either


def test_another_runs_log_is_refused_and_kept(tmp_path):
    log = tmp_path / "run.mllog"
    log.write_text(':::MLLOG {"key": "run_stop"}\n')
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", f"--mllog={log}")
    assert_one_line_error(proc, f"--mllog={log}", "another run's log", "--overwrite")
    assert log.read_text() == ':::MLLOG {"key": "run_stop"}\n'


def _segment_stop(run_id, step) -> str:
    meta = {"run_id": run_id, "step": step, "reason": "preempted"}
    return ":::MLLOG " + json.dumps({"key": "segment_stop", "value": step, "metadata": meta})


def test_a_resumed_run_appends_only_to_its_own_open_segment(tmp_path):
    log = tmp_path / "run.mllog"
    assert mllog._open_segment(log) is None  # no log
    log.write_text(":::MLLOG {}\n" + _segment_stop("a", 12) + "\nnot a log line\n")
    assert mllog._open_segment(log) == ("a", 12)
    log.write_text(_segment_stop("a", 12) + '\n:::MLLOG {"key": "run_stop"}\n')
    assert mllog._open_segment(log) is None  # ended: nothing to append to
    # A log that does not end with this run's segment_stop is moved aside, whole, and named.
    mllog._keep_earlier(log, overwrite=False, resumed_at=12)
    aside = tmp_path / "run.mllog.before-step-12"
    assert not log.exists() and aside.read_text().endswith('"run_stop"}\n')
    log.write_text("")
    mllog._keep_earlier(log, overwrite=False, resumed_at=None)  # empty: nothing to keep
    log.write_text("x")
    mllog._keep_earlier(log, overwrite=True, resumed_at=None)  # --overwrite: replaced
    with pytest.raises(UsageError, match="another run's log"):
        mllog._keep_earlier(log, overwrite=False, resumed_at=None)


def test_missing_package_is_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mlperf_logging.mllog", None)  # import fails
    setup = SimpleNamespace(config=C.RunConfig(results=C.ResultsConfig(mllog=str(tmp_path / "x"))))
    with pytest.raises(UsageError, match=r"--mllog=.*pip install 'mlperf-logging>=4\.1,<5'"):
        mllog.MLLog.start(setup, 0.0)
    assert not (tmp_path / "x").exists()
    # Without --mllog every call is a no-op.
    off = mllog.MLLog.start(SimpleNamespace(config=C.RunConfig()), 0.0)
    off.init_stop(1.0, "xla_cost_analysis")
    off.run_start(0, 0.0)
    off.epoch({"index": 1, "first_step": 0, "steps": 1}, 0.0, 1.0)
    off.evaluated(None, 0.0, 1.0)
