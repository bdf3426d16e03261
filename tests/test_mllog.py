"""--mllog: a real training run's MLLOG file passes the compliance checker under the project's
ruleset, broken copies of it fail, and a bad path or a missing package is one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import TINY
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.telemetry import mllog

# A log this project wrote: its lines name a file of the package (records/owned.py).
OUR_LOG = ':::MLLOG {"key": "run_stop", "metadata": {"file": "hpcai_jax/telemetry/mllog.py"}}\n'


@pytest.fixture(scope="module")
def good_run(tiny_run):
    """The session's tiny CLI run, made with --mllog (the log's directory did not exist yet): 2
    epochs of 2 steps, the ensemble evaluated after each (Eq. 6 needs a completed epoch)."""
    return tiny_run.mllog, records.read(tiny_run.record)


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
    assert value["submission_division"] == "open" == record.submission.division
    assert first["submission_division"]["metadata"]["violations"] == (record.submission.violations)
    assert record.submission.violations[0].startswith("no official target for")
    assert (value["submission_org"], value["submission_platform"]) == ("Test Org", "8 CPU devices")
    assert value["submission_status"] == "onprem"
    assert (value["number_of_nodes"], value["accelerators_per_node"]) == (1, 8)
    assert record.mllog == str(log)  # the record names its log
    assert (value["number_of_models"], value["per_model_batch_size"]) == (4, 16)
    assert value["global_batch_size"] == 64
    assert value["opt_name"] == "sgd" and value["opt_base_learning_rate"] == 0.1 * 16 / 256
    evals = [line for line in lines if line["key"] == "eval_accuracy"]
    assert [e["metadata"]["epoch_num"] for e in evals] == [1, 2]
    assert [e["value"] for e in evals] == [p.ensemble for p in record.quality.curve]
    assert last["eval_accuracy"]["value"] == record.quality.ensemble
    assert first["eval_accuracy"]["metadata"]["metric"] == "top1_accuracy"
    assert first["flops_per_s"]["metadata"]["epochs"] == 2
    assert value["flops_per_s"] == record.metrics.flops_per_s
    assert value["vflops_per_s"] == record.metrics.vflops_per_s
    assert first["epoch_start"]["metadata"]["epoch_num"] == 1
    assert value["flops_per_step"] == record.flops.per_step
    assert first["flops_per_step"]["metadata"]["source"] == record.flops.source
    # An epoch's lines are at the record's epoch boundaries: its wall time to the millisecond.
    starts = [x["time_ms"] for x in lines if x["key"] == "epoch_start"]
    stops = [x for x in lines if x["key"] == "epoch_stop"]
    assert [x["metadata"]["steps"] for x in stops] == [e.steps for e in record.epochs]
    for start, stop, epoch in zip(starts, stops, record.epochs, strict=True):
        assert abs((stop["time_ms"] - start) / 1e3 - epoch.wall_s) < 0.002
    assert abs(starts[0] - first["run_start"]["time_ms"]) <= 1  # the first starts at run_start
    # The target (0.9) is out of reach of 4 steps: aborted as MLPerf reads it, yet complete.
    stop = lines[-1]
    assert stop["key"] == "run_stop" and record.status == "complete"
    assert (
        stop["metadata"]["status"] == "aborted" and stop["metadata"]["record_status"] == "complete"
    )
    reason = f"target 0.9 not reached: ensemble {record.quality.ensemble:g}"
    assert stop["metadata"]["reason"].startswith(reason)
    assert first["run_start"]["metadata"]["file"] == "hpcai_jax/run/trainer.py"
    # Every workload, optimizer and schedule the engine runs is one the ruleset accepts.
    rules = mllog.RULESET.read_text()
    assert all(f"hpcai500_{w}" in rules for w in C.WORKLOADS)
    assert all(f"'{name}'" in rules for name in C.OPTIMIZERS + C.LR_SCHEDULES)
    assert value["model_parallel"] == 1

    proc = _check(log, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stderr and "WARNING" not in proc.stderr


def _stop(status: str, reason: str = "target 0.9 not reached", record_status="complete") -> dict:
    """An edit of run_stop's metadata."""
    meta = {"status": status, "record_status": record_status}
    return {"metadata": {**meta, "reason": reason} if reason else meta}


@pytest.mark.parametrize(
    "key,edit,expected",
    [
        ("run_stop", None, "Required EXACTLY_ONE occurrence of 'run_stop' but found 0"),
        ("number_of_models", {"value": 0}, "CHECK for 'number_of_models' failed"),
        # success claimed by a run that missed its target; aborted without a reason; a run
        # that is not complete (preempted without a checkpoint, invalid) is never scored.
        ("run_stop", _stop("success"), "CHECK for 'run_stop' failed"),
        ("run_stop", _stop("aborted", reason=""), "CHECK for 'run_stop' failed"),
        ("run_stop", _stop("aborted", record_status="partial"), "CHECK for 'run_stop' failed"),
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
        "success-below-target",
        "aborted-without-reason",
        "not-complete",
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
    assert not (tmp_path / "r").exists()  # no record, and the folder the run made is gone


def test_another_runs_log_is_refused_and_kept(tmp_path):
    log = tmp_path / "run.mllog"
    log.write_text(OUR_LOG)
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", f"--mllog={log}")
    assert_one_line_error(proc, f"--mllog={log}", "another run's log", "--overwrite")
    assert log.read_text() == OUR_LOG


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


def _run_log(run_id, lines, stop=None) -> str:
    """A run's log: its init_start naming `run_id`, `lines` more, and a segment_stop at `stop`."""
    ours = {"file": "hpcai_jax/telemetry/mllog.py"}
    start = {"key": "init_start", "value": None, "metadata": {"run_id": run_id, **ours}}
    body = [json.dumps(start)] + [json.dumps({"key": "x", "value": i}) for i in range(lines)]
    text = "".join(f":::MLLOG {line}\n" for line in body)
    return text + (_segment_stop(run_id, stop) + "\n" if stop is not None else "")


def test_a_resumed_run_never_takes_up_another_runs_partial_log(tmp_path):
    """Run x was killed before its commit (its log at PATH.partial); run y, started after it,
    staged its own at PATH.<pid>.partial. Resumed, y continues its own log (committed at PATH,
    or left under its earlier process's id), and x's is neither cut nor appended to."""
    path, own = tmp_path / "run.mllog", tmp_path / f"run.mllog.{os.getpid()}.partial"
    config = SimpleNamespace(results=SimpleNamespace(overwrite=False))
    spare = tmp_path / "spare.mllog"
    theirs = _run_log("x", 9)
    (tmp_path / "run.mllog.partial").write_text(theirs)
    # y was preempted and committed its log at PATH: a copy is taken up and appended to.
    path.write_text(_run_log("y", 5, stop=12))
    assert mllog._continued(config, path, spare, "y", 12, 3) == (own, True, False)
    assert own.read_text() == path.read_text()
    own.unlink()
    # y was killed: its log, under its earlier process's id, is moved to this process's name
    # and cut back to its checkpoint's lines.
    earlier = tmp_path / "run.mllog.4242.partial"
    earlier.write_text(_run_log("y", 5))
    assert mllog._continued(config, path, spare, "y", 12, 3)[1:] == (True, True)
    assert not earlier.exists() and own.read_text().startswith(_run_log("y", 2)[:-1])
    assert len(own.read_text().splitlines()) == 3  # (start() then adds a segment_stop)
    assert (tmp_path / "run.mllog.lost").read_text().count("\n") == 3  # named after --mllog
    assert (tmp_path / "run.mllog.partial").read_text() == theirs
    # The log at the partial name that is the run's own is continued there.
    assert mllog._resumed_stage(path, "x") == tmp_path / "run.mllog.partial"


def test_a_resumed_run_takes_up_no_link_fifo_or_malformed_log(tmp_path):
    """The logs a resumed run may take up are regular MLLOG files of its own: a link (to a log
    of its, outside), a FIFO (which would block a read) and malformed headers are passed by,
    and a link where this process would stage its log is refused in one line."""
    path = tmp_path / "run.mllog"
    config = SimpleNamespace(results=SimpleNamespace(overwrite=False))
    (tmp_path / "run.mllog.partial").write_text(_run_log("x", 3))
    outside = tmp_path / "outside.mllog"
    outside.write_text(_run_log("y", 5))
    (tmp_path / "run.mllog.11.partial").symlink_to(outside)
    os.mkfifo(tmp_path / "run.mllog.12.partial")
    own = tmp_path / f"run.mllog.{os.getpid()}.partial"
    assert mllog._resumed_stage(path, "y") == own and not own.exists()
    assert outside.read_text() == _run_log("y", 5)
    headers = [
        "[" * 100_000 + "]" * 100_000,  # nesting too deep for the parser
        '{"key": "init_start", "metadata": {"run_id": NaN}}',
        '{"key": "init_start", "metadata": {"run_id": 1e400}}',
        '{"key": "init_start", "metadata": ["y"]}',
        '["init_start"]',
    ]
    for header in headers:
        (tmp_path / "odd.mllog").write_text(f":::MLLOG {header}\n")
        assert mllog._log_run_id(tmp_path / "odd.mllog") is None, header[:40]
    own.symlink_to(outside)
    with pytest.raises(UsageError, match="is a symbolic link"):
        mllog._continued(config, path, tmp_path / "spare", "y", 12, 0)
    with pytest.raises(UsageError, match="is a symbolic link"):  # a new run's stage, too
        mllog._continued(config, path, tmp_path / "spare", "z", None, 0)
    assert outside.read_text() == _run_log("y", 5)


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


def test_lines_in_time_order_at_their_call_sites_with_exact_qualities(good_run):
    """As MLPerf's tools read a log: time_ms never goes back (init_start before the submission
    lines, an epoch after the evaluation before it); each start-up line names the source line
    that logged it, no two the same; an accuracy is a count of held-out examples over their
    number, exactly, in the log as in the record (not float32's 0.10000000149011612)."""
    log, record = good_run
    lines = _lines(log.read_text())
    times = [line["time_ms"] for line in lines]
    assert times == sorted(times), [(line["key"], line["time_ms"]) for line in lines]
    assert [line["key"] for line in lines[:2]] == ["cache_clear", "init_start"]
    startup = lines[: [line["key"] for line in lines].index("run_start") + 1]
    sites = [(line["metadata"]["file"], line["metadata"]["lineno"]) for line in startup]
    assert len(set(sites)) == len(sites), sites
    for line, (file, lineno) in zip(startup, sites, strict=True):
        source = (ROOT / file).read_text().splitlines()[lineno - 1]
        assert line["key"] in source, (line["key"], file, lineno, source)
    n, q = record.data.eval_examples, record.quality
    values = [line["value"] for line in lines if line["key"] == "eval_accuracy"]
    values += [q.ensemble, *q.members]
    values += [v for point in q.curve for v in (point.ensemble, *point.members)]
    assert all(v == round(v * n) / n for v in values), values


def test_a_run_that_missed_its_target_is_scored_packed_and_checked(tiny_run, tmp_path):
    """The tiny run missed its target (aborted, the reason in run_stop): a complete run, still
    scored (VFLOPS with its penalty), that packs and passes `submission check`; its packed
    flagfile states the data set's classes."""
    from hpcai_jax.submission.__main__ import main

    record = records.read(tiny_run.record)
    q, m = record.quality, record.metrics
    assert q.ensemble < q.target == 0.9
    assert m.penalty == pytest.approx((q.ensemble / 0.9) ** 5)
    assert m.vflops_per_s == pytest.approx(m.flops_per_s * m.penalty)
    system = tmp_path / "site.json"
    system.write_text(json.dumps({"interconnect": "none: one host"}))
    out = tmp_path / "package"
    run = tiny_run.results / "real-train.json"
    assert main(["pack", str(run), f"--out={out}", f"--system_json={system}"]) == 0
    assert _lines((out / "real-train.mllog").read_text())[-1]["metadata"]["status"] == "aborted"
    assert "--num_classes=10\n" in (out / "real-train.flags").read_text()
    assert main(["check", str(out)]) == 0


def test_a_run_that_reached_its_target_logs_success(good_run, tmp_path):
    """The tiny run's log with its target halved (below what the ensemble reached; VFLOPS
    re-derived): success passes the checker, aborted fails it."""
    log, _ = good_run
    lines = _lines(log.read_text())
    vflops = next(line for line in lines if line["key"] == "vflops_per_s")
    flops = next(line for line in lines if line["key"] == "flops_per_s")["value"]
    meta = {**vflops["metadata"], "target": vflops["metadata"]["quality"] / 2}
    meta["penalty"] = 2.0 ** meta["exponent"]
    edits = {"vflops_per_s": {"value": flops * meta["penalty"], "metadata": meta}}
    for status, code in (("success", 0), ("aborted", 1)):
        edits["run_stop"] = _stop(status, reason="" if status == "success" else "missed")
        proc = _check(_edited(log, tmp_path, edits), tmp_path)
        assert proc.returncode == code, proc.stdout + proc.stderr


def test_a_log_that_cannot_be_written_goes_whole_to_the_spare_path_and_comes_back(tmp_path, capsys):
    """--mllog's directory gone for good (here a file stands where it was): the whole log goes
    to the spare path (--checkpoint_dir/<run id>.mllog) with one line naming it; a resumed run
    takes it back from there when it ends the segment it resumes."""
    import io
    import logging as std_logging

    from hpcai_jax.telemetry import mllog as m

    (tmp_path / "gone").write_text("not a directory")
    log = m.MLLog()
    log._path, log._spare = tmp_path / "gone" / "run.mllog", tmp_path / "ck" / "r1.mllog"
    log._kept = m._KeptLines(io.StringIO())
    stop = {"key": "segment_stop", "value": 3, "metadata": {"run_id": "r1", "step": 3}}
    for text in ('{"key": "cache_clear"}', json.dumps(stop)):
        log._kept.emit(std_logging.makeLogRecord({"msg": m._PREFIX + text}))
    log._keep_complete()
    assert "whole log was written again to " + str(log._spare) in capsys.readouterr().err
    assert log._spare.read_text().splitlines() == [
        m._PREFIX + '{"key": "cache_clear"}',
        m._PREFIX + json.dumps(stop),
    ]
    fresh = tmp_path / "logs" / "run.mllog"
    m._recover(fresh, log._spare, ("r1", 3))
    assert fresh.read_text() == log._spare.read_text()
    m._recover(tmp_path / "other.mllog", log._spare, ("r1", 5))  # not the segment resumed
    assert not (tmp_path / "other.mllog").exists()


def test_the_log_names_the_bytes_of_the_splits_it_read(tiny_run, tmp_path, monkeypatch):
    """data_digest: the Fashion-MNIST files hashed here again give the log's figure; a large
    file is named by its size and both ends (sampled), and a change at an end shows."""
    import hashlib
    from pathlib import Path

    from hpcai_jax.data import digest, fashion_mnist

    (line,) = [x for x in _lines(tiny_run.mllog.read_text()) if x["key"] == "data_digest"]
    h = hashlib.sha256()
    for stem in fashion_mnist._FILES["train"]:
        path = fashion_mnist._find(Path(fashion_mnist.DEFAULT_DIR), stem)
        h.update(f"{path.name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    assert line["value"] == line["metadata"]["train"]["sha256"] == h.hexdigest()
    assert line["metadata"]["train"]["sampled"] is False
    monkeypatch.setattr(digest, "FULL_BYTES", 8)
    monkeypatch.setattr(digest, "SAMPLE_BYTES", 4)
    big = tmp_path / "shard"
    big.write_bytes(b"abcdefghijklmnop")
    first, sampled = digest.file_digest(big)
    big.write_bytes(b"abcdefghijklmnoX")
    assert sampled and digest.file_digest(big)[0] != first
