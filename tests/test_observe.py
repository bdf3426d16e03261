"""Profiler traces and TensorBoard curves (docs/observe.md): the tiny run's event files read
back by TensorBoard's own reader and matched against its record; a profiled run's trace, its
named phases and its division; a directory that cannot be written costs a warning, not the run."""

from __future__ import annotations

import errno
import json
import os
import shutil

import jax
import jax.numpy as jnp
import pytest
from conftest import TINY
from helpers import run_in_process

from hpcai_jax import records
from hpcai_jax.report import timeline
from hpcai_jax.telemetry import events, profile


def _scalars(directory) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator

    reader = event_accumulator.EventAccumulator(str(directory))
    reader.Reload()
    return {
        tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]
    }


def test_the_tiny_runs_curves_read_back_as_its_record_says(tiny_run):
    record = records.read(tiny_run.record)
    seen = record.observe.tensorboard
    assert seen.dir == str(tiny_run.results / "tensorboard" / "real-train")
    assert seen.lost is None and seen.scalars_lost == 0
    curves = _scalars(seen.dir)
    assert sum(len(v) for v in curves.values()) == seen.scalars_written
    assert [s for s, _ in curves["train/loss"]] == [1, 2, 3, 4]
    # The last step's loss is the record's, averaged over the members.
    last = curves["train/loss"][-1][1]
    assert last == pytest.approx(sum(record.train.final_loss) / 4, rel=1e-5)
    assert len(curves["train/examples_per_s"]) == record.timing.timed_steps
    for point in record.quality.curve:
        assert (point.step, pytest.approx(point.ensemble)) in curves["quality/ensemble"]
        for i, q in enumerate(point.members):
            assert (point.step, pytest.approx(q)) in curves[f"quality/member_{i}"]
    assert [v for _, v in curves["eq6/flops_per_s"]] == pytest.approx(
        [e.flops_per_s for e in record.epochs]
    )
    oob = record.quality.oob.quality
    assert curves["final/out_of_bag"] == [(4, pytest.approx(oob))]


def test_a_directory_that_cannot_be_written_costs_one_warning(tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    log = events.EventLog.open(str(blocker / "tb"))  # under a file: cannot be made
    log.scalar("train/loss", 1.0, 1)
    log.close()
    assert "could not open TensorBoard events" in log.lost
    assert log.summary()["scalars_lost"] == 1 and log.summary()["scalars_written"] == 0
    assert caplog.text.count("without TensorBoard curves") == 1


def test_a_full_disk_stops_the_writing_and_says_what_was_lost(tmp_path, caplog):
    log = events.EventLog.open(str(tmp_path / "tb"))
    log.scalar("a", 1.0, 1)
    log.flush()

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    log._writer._py_recordio_writer.flush = full  # the file system refuses the next flush
    log.scalar("a", 2.0, 2)
    log.flush()
    log.scalar("a", 3.0, 3)  # nothing more is tried
    log.close()
    assert "No space left on device" in log.lost
    assert (log.summary()["scalars_written"], log.summary()["scalars_lost"]) == (1, 2)
    assert caplog.text.count("without TensorBoard curves") == 1


def test_the_phase_map_names_instructions_by_their_scope():
    @jax.jit
    def step(x):
        with jax.named_scope(profile.DEVICE_PHASES[-1]):  # forward and backward
            y = jnp.sin(x) @ x
        with jax.named_scope("optimizer_update"):
            return y * 2 + 1

    mapped = profile.phase_map(step.lower(jnp.ones((8, 8))).compile().as_text())
    assert mapped["module"] == "jit_step"
    assert set(mapped["phases"].values()) == {"members_forward_backward", "optimizer_update"}


def test_a_trace_that_cannot_start_costs_one_warning(tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    trace = profile.Trace(str(blocker / "trace"))
    trace.start("HloModule m")
    trace.stop()
    assert not trace.active and "could not start a profiler trace" in trace.lost
    assert caplog.text.count("the run goes on without it") == 1


@pytest.mark.slow
def test_a_profiled_run_writes_its_trace_with_the_named_phases(tmp_path):
    proc = run_in_process(
        *TINY,
        "--train_examples=32",
        f"--results_dir={tmp_path}/r",
        "--run_name=prof",
        "--profile_steps=2:4",
        "--notensorboard",
        "--nokeep_weights",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = records.read(tmp_path / "r" / "prof.json")
    seen = record.observe
    assert seen.tensorboard is None and not (tmp_path / "r" / "tensorboard").exists()
    traced = seen.profile
    assert traced.steps == [2, 4] and traced.traced and traced.lost is None
    assert traced.dir == str(tmp_path / "r" / "prof.profile" / "process_0")
    assert traced.perfetto_trace.endswith("perfetto_trace.json.gz")
    assert traced.aside_s > 0
    assert any(v.startswith("--profile_steps=2:4") for v in record.submission.violations)
    spans = timeline.phase_spans(tmp_path / "r" / "prof.profile" / "process_0")
    assert [s for s, _ in spans["train_step"]] and len(spans["train_step"]) == 2
    for phase in ("input_wait", "members_forward_backward", "grad_allreduce_data"):
        assert spans.get(phase), phase
    assert spans.get("optimizer_update")
    timeline.draw(tmp_path / "r" / "prof.profile" / "process_0", tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_a_window_past_the_last_step_is_refused(tmp_path):
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", "--profile_steps=3:9")
    assert proc.returncode == 2
    assert "--profile_steps=3:9: the run has 4 steps" in proc.stderr.strip().splitlines()[-1]


def test_a_malformed_window_is_refused(tmp_path):
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", "--profile_steps=0:2")
    assert proc.returncode == 2
    assert "--profile_steps" in proc.stderr and "1 <= A < B" in proc.stderr


def test_the_report_links_a_runs_events_and_shows_each_members_curve(tiny_run, tmp_path):
    from hpcai_jax.report import markdown, series
    from hpcai_jax.report.collect import collect

    train = collect([str(tiny_run.results)]).train
    found = series.observed(train)
    assert [(r.run_id, r.events, r.trace) for r in found] == [
        ("real-train", tiny_run.results / "tensorboard" / "real-train", None)
    ]
    out = tmp_path / "report"
    text = markdown.observed(found, lambda p: os.path.relpath(p, out))
    assert "[real-train](../" in text and "not found here" in text  # no trace in this run
    # Records copied elsewhere find their events beside them, not at the recorded path.
    record = json.loads((tiny_run.results / "real-train.json").read_text())
    record["observe"]["tensorboard"]["dir"] = "/nowhere/real-train"
    (tmp_path / "real-train.json").write_text(json.dumps(record))
    assert series.observed(collect([str(tmp_path / "real-train.json")]).train)[0].events is None
    # Both present: the copy beside the records wins (a shipped report links its own copy).
    shutil.copytree(tiny_run.results / "tensorboard", tmp_path / "tensorboard")
    record["observe"]["tensorboard"]["dir"] = str(tiny_run.results / "tensorboard" / "real-train")
    (tmp_path / "real-train.json").write_text(json.dumps(record))
    beside = series.observed(collect([str(tmp_path / "real-train.json")]).train)[0].events
    assert beside == tmp_path / "tensorboard" / "real-train"
    (curve,) = series.quality_curves(train)
    members = [p.members for p in records.read(tiny_run.record).quality.curve]
    for point, expected in zip(curve.points, members, strict=True):
        assert list(point.members) == pytest.approx(expected)
