"""The record's arithmetic on a fake clock: FLOPS (Eq. 6 per epoch, and steady), MFU, VFLOPS,
useful member-steps, pruned members, time to target, and what a failed FLOP cross-check does to
the record."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.data.datasets import Datasets
from hpcai_jax.engine.evaluate import EnsembleQuality, OutOfBag
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.errors import UsageError
from hpcai_jax.flops.crosscheck import SOURCE_ANALYTIC, SOURCE_XLA, FlopFigures, crosscheck
from hpcai_jax.flops.roofline import stream_bandwidth
from hpcai_jax.run import record as run_record
from hpcai_jax.run import summary
from hpcai_jax.run.measured_step import MeasuredStep
from hpcai_jax.run.progress import Progress, skipped_examples
from hpcai_jax.xla_cost import XlaCost

M, B, DEVICES = 4, 16, 8
STEP_S = [0.4, 0.5, 0.6, 0.5, 0.5]  # the fake clock: timed steps 1..5 (step 0 is warm-up)
WALL = sum(STEP_S)


@pytest.fixture(scope="module")
def setup():
    return build_setup(tiny_config())


def _progress(pruned: dict[int, int]) -> Progress:
    progress = Progress(run_id="fake", step=6, diverged=dict(pruned))
    for step, seconds in enumerate(STEP_S, start=1):
        progress.time_step(step, seconds)
    return progress


def _quality(kept: list[bool]) -> EnsembleQuality:
    return EnsembleQuality(
        members=[0.80, 0.10, 0.82, 0.84],
        kept=kept,
        ensemble=0.86,
        examples=200,
        oob=OutOfBag(0.83, 180, 512, 1.47),
    )


def _cross(flops: float, source: str = SOURCE_XLA, ok: bool | None = True) -> FlopFigures:
    return FlopFigures(
        model="m",
        input_shape=[1],
        batch_size=B,
        ensemble_size=M,
        analytic={},
        xla_train_step_flops=flops,
        xla_over_analytic=1.0,
        xla_over_table3=1.0,
        tolerance=0.1,
        crosscheck_ok=ok,
        train_step_flops=flops,
        train_step_flops_source=source,
        source_reason="fake",
        apc=flops,
        apc_table3=flops,
        notes=[],
    )


def _end(setup, progress, cost, cross, peaks, status, quality) -> run_record.RunEnd:
    """A run's end with these figures: no last step's metrics, 9 s of wall time."""
    step = MeasuredStep(None, cost, cross, {}, peaks, None)
    return run_record.RunEnd(setup, progress, step, status, quality, None, 9.0)


def _build(setup, progress, cross, quality, status="complete", peaks=None):
    cost = XlaCost(cross.train_step_flops / DEVICES, None, DEVICES)
    peaks = peaks or {"datasheet_per_device": 2e9, "measured_per_device": 1e9}
    return run_record.train_record(_end(setup, progress, cost, cross, peaks, status, quality))


def test_flops_mfu_vflops_from_the_clock(setup):
    record = _build(setup, _progress({}), _cross(M * 1e9), _quality([True] * 4))
    m = record.metrics
    assert record.flops.useful_member_steps == 5 * M == record.flops.timed_member_steps
    flops = M * 1e9 * len(STEP_S) / WALL  # per-step FLOPs × timed steps / timed seconds
    assert m.flops_per_s_steady == pytest.approx(flops)
    assert m.flops_per_s_per_device == pytest.approx(flops / DEVICES)
    assert m.mfu_measured == pytest.approx(flops / DEVICES / 1e9)
    assert m.mfu_datasheet == pytest.approx(flops / DEVICES / 2e9)
    assert m.penalty == pytest.approx((0.86 / 0.9) ** 5)
    assert m.vflops_per_s_steady == pytest.approx(flops * (0.86 / 0.9) ** 5)
    # 6 steps of an epoch of 32: no Eq. 6 figure, and the record and the summary say why.
    assert record.epochs == [] and m.flops_per_s is None and m.vflops_per_s is None
    assert m.flops_per_s_why.startswith("no completed epoch (6 steps of 32 per epoch)")
    assert m.images_per_s == m.useful_images_per_s == pytest.approx(M * B * 5 / WALL)
    q = record.quality
    assert (q.target, q.exponent, q.target_is_official) == (0.9, 5.0, False)
    assert q.member_mean == pytest.approx((0.80 + 0.10 + 0.82 + 0.84) / 4)
    assert q.oob.quality == 0.83
    assert len(record.data.distinct_fraction) == M
    assert all(0.55 < f < 0.72 for f in record.data.distinct_fraction)  # 512 examples
    text = summary.summary(record)
    assert "out-of-bag top1_accuracy" in text and "not official" in text and "FAILED" not in text
    assert "n/a (no completed epoch" in text
    # No Eq. 6 figure, so no VFLOPS: its why, and no arithmetic with n/a in it.
    assert re.search(r"^VFLOPS +n/a \(", text, re.M) and "× n/a" not in text, text


def test_a_pruned_member_counts_only_while_healthy(setup):
    # Member 1 went non-finite at step 3: its timed steps 1 and 2 were useful work, 3..5 were not.
    record = _build(setup, _progress({1: 3}), _cross(M * 1e9), _quality([True, False, True, True]))
    m, q = record.metrics, record.quality
    useful = 3 * 5 + 2
    assert record.flops.useful_member_steps == useful
    assert m.flops_per_s_steady == pytest.approx(1e9 * useful / WALL)
    assert m.useful_images_per_s == pytest.approx(B * useful / WALL)
    assert m.images_per_s == pytest.approx(B * M * 5 / WALL)  # every member's, all the time
    assert q.member_mean == pytest.approx((0.80 + 0.82 + 0.84) / 3)  # kept members only
    assert q.members == [0.80, 0.10, 0.82, 0.84]  # the pruned one still listed
    assert q.kept_members == [0, 2, 3] and q.ensemble_members == 3
    assert "0.1000 (pruned)" in summary.summary(record)


def test_the_record_says_its_division(setup):
    record = _build(setup, _progress({}), _cross(M * 1e9), _quality([True] * 4))
    submission = record.submission
    assert submission.division == "open" and len(submission.violations) == 4
    assert submission.violations[0] == (
        "no official target for image_classification/resnet_small/fashion_mnist"
    )
    text = summary.summary(record)
    assert re.search(r"^division +open$", text, re.M)
    asked = record.config["mesh"]["members_per_device"]
    assert re.search(rf"^members per device +1 \(asked: {asked}\)$", text, re.M), text
    broken = re.findall(r"^  rule broken +(.+)$", text, re.M)
    assert broken == submission.violations  # each rule printed, not a pointer to the record
    flops = re.search(r"^FLOPS \(Eq. 6, per epoch\) +(\S+ \S+)", text, re.M).group(1)
    assert re.fullmatch(r"[\d.]+ [kMGTPE]?FLOP/s|n/a \(.*", flops), flops
    assert record.mllog is None
    # ResNet-50 on imagenet2012 by the rules (nothing loaded): closed, scored officially; the
    # same run on 1,000 images: open, and its target no longer official.
    closed = C.RunConfig(
        model=C.ModelConfig(model="resnet50"),
        data=C.DataConfig(dataset="imagenet2012"),
        train=C.TrainConfig(batch_size=B, epochs=90),
        results=C.ResultsConfig(mllog="logs/run.mllog"),
    ).validate()
    unloaded = Datasets(setup.datasets.spec, None, None)
    for config, division, official in (
        (closed, "closed", True),
        (
            dataclasses.replace(closed, data=C.DataConfig("imagenet2012", train_examples=1000)),
            "open",
            False,
        ),
    ):
        fake = dataclasses.replace(setup, config=config, datasets=unloaded)
        record = _build(fake, _progress({}), _cross(M * 1e9), _quality([True] * 4))
        assert record.submission.division == division
        assert record.quality.target_is_official is official
        assert re.search(f"^division +{division}\\b", summary.summary(record), re.M)
    assert record.mllog == os.path.abspath("logs/run.mllog")


def test_an_invalid_run_has_no_flops(setup):
    progress = _progress({1: 3})
    progress.epochs = [{"index": 1, "first_step": 0, "steps": 32, "wall_s": 4.0}]
    record = _build(setup, progress, _cross(M * 1e9), None, status="invalid")
    m = record.metrics
    assert m.flops_per_s is None and m.vflops_per_s is None
    assert m.flops_per_s_steady is None and m.flops_per_s_why == "the run is invalid"
    assert record.epochs[0].flops is None and record.epochs[0].wall_s == 4.0


def test_eq6_is_every_completed_epochs_flops_over_their_time(setup):
    """Two epochs of 32 steps, 4 s and 2 s; member 1 non-finite from step 40 (8 steps into epoch
    2). Eq. 6 is Σ FLOPs / Σ T over the epochs, not the mean of their rates."""
    progress = _progress({1: 40})
    progress.step = 64
    progress.epochs = [
        {"index": 1, "first_step": 0, "steps": 32, "wall_s": 4.0},
        {"index": 2, "first_step": 32, "steps": 32, "wall_s": 2.0},
    ]
    record = _build(setup, progress, _cross(M * 1e9), _quality([True, False, True, True]))
    epochs, m = record.epochs, record.metrics
    assert [e.flops for e in epochs] == [1e9 * 4 * 32, 1e9 * (3 * 32 + 8)]
    assert [e.flops_per_s for e in epochs] == pytest.approx([1e9 * 128 / 4, 1e9 * 104 / 2])
    assert m.flops_per_s == pytest.approx(1e9 * (128 + 104) / 6)  # not (32 + 52) / 2 GFLOP/s
    assert m.flops_per_s_why is None
    assert m.vflops_per_s == pytest.approx(m.flops_per_s * (0.86 / 0.9) ** 5)
    assert m.flops_per_s_steady != m.flops_per_s
    assert "38.67 GFLOP/s over 2 epoch(s)" in summary.summary(record)


def _curve(*points: tuple[int, float, float]) -> list[dict]:
    return [
        {"epoch": s / 32, "step": s, "wall_s": t, "ensemble": q, "member_mean": q, "members": []}
        for s, t, q in points
    ]


def test_time_to_target_is_the_first_evaluation_that_reached_it(setup):
    progress = _progress({})
    progress.curve = _curve((32, 10.0, 0.85), (64, 21.0, 0.91), (96, 33.0, 0.93))
    record = _build(setup, progress, _cross(M * 1e9), _quality([True] * 4))
    assert (record.time_to_target_s, record.time_to_target_why) == (21.0, None)
    assert records.to_dict(record.quality.curve) == progress.curve
    assert "time to target" in summary.summary(record)
    # Reached only after a resume: not an uninterrupted run's time.
    progress.resumes = [{"at_step": 40, "utc": "then"}]
    record = _build(setup, progress, _cross(M * 1e9), _quality([True] * 4))
    assert record.time_to_target_s is None
    assert "after a resume at step 40" in record.time_to_target_why
    # Never reached: the best evaluation says by how much.
    progress.resumes, progress.curve = [], _curve((32, 10.0, 0.85))
    record = _build(setup, progress, _cross(M * 1e9), _quality([True] * 4))
    assert record.time_to_target_s is None
    assert record.time_to_target_why == (
        "the ensemble never reached the target 0.9: best 0.8500 in 1 evaluation(s)"
    )
    assert "n/a (the ensemble never reached" in summary.summary(record)
    # Without --mllog no MLLOG is named: the line says what missed the target.
    assert record.mllog is None
    assert re.search(
        r"^status +complete, target 0.9 not reached: ensemble 0.86$", summary.summary(record), re.M
    ), summary.summary(record)
    assert "MLLOG" not in summary.summary(record)
    # With one, the record is complete, its MLLOG's run_stop aborted: the summary says both.
    logged = dataclasses.replace(record, mllog="/abs/run.mllog")
    assert re.search(
        r"^status +complete, target not reached \(MLLOG run_stop: aborted, target 0.9 not "
        r"reached: ensemble 0.86\)$",
        summary.summary(logged),
        re.M,
    ), summary.summary(logged)


def test_the_summary_names_the_form_the_members_ran_as(setup):
    record = _build(setup, _progress({}), _cross(M * 1e9), _quality([True] * 4))
    vmap = dataclasses.replace(record.mesh, member_strategy="vmap", member_mapping="scan")
    text = summary.summary(dataclasses.replace(record, mesh=vmap))
    assert re.search(r"P_model=1 strategy=vmap, run as scan$", text, re.M), text
    unroll = dataclasses.replace(record.mesh, member_strategy="unroll", member_mapping="unroll")
    assert summary.summary(dataclasses.replace(record, mesh=unroll)).count("strategy=unroll\n")


def test_exponent_zero_means_no_penalty(setup):
    config = dataclasses.replace(
        setup.config, results=C.ResultsConfig(target_quality=0.9, quality_exponent=0.0)
    )
    record = _build(
        dataclasses.replace(setup, config=config),
        _progress({}),
        _cross(M * 1e9),
        _quality([True] * 4),
    )
    assert record.metrics.penalty == 1.0
    m = record.metrics
    assert m.vflops_per_s_steady == m.flops_per_s_steady


def test_a_failed_crosscheck_falls_back_to_the_analytic_count(setup):
    """A fake XLA cost 3× the analytic count: auto mode must not trust it, and say so."""
    analytic = crosscheck(setup.config, None).analytic["train_step"]["xla_rules"]
    cross = crosscheck(setup.config, 3 * analytic)
    assert cross.crosscheck_ok is False and cross.xla_over_analytic == pytest.approx(3)
    assert cross.train_step_flops_source == SOURCE_ANALYTIC
    record = _build(setup, _progress({}), cross, _quality([True] * 4))
    f = record.flops
    assert f.crosscheck_ok is False and f.source == SOURCE_ANALYTIC
    assert f.per_step == analytic and "OUTSIDE" in f.source_reason
    assert record.metrics.flops_per_s_steady == pytest.approx(analytic * len(STEP_S) / WALL)
    assert "CROSS-CHECK FAILED" in summary.summary(record)
    # --flops_source=xla uses XLA's figure anyway, still flagged.
    forced = dataclasses.replace(
        setup.config, results=C.ResultsConfig(target_quality=0.9, flops_source="xla")
    )
    cross = crosscheck(forced, 3 * analytic)
    assert (cross.train_step_flops, cross.crosscheck_ok) == (3 * analytic, False)


def test_the_step_on_the_roofline(setup):
    # Per device: 4e9 / 8 FLOPs over 1e8 bytes accessed = 5 FLOP/byte; a 1e8 B/s roof makes
    # 5e8 FLOP/s attainable, under the 1e9 FLOP/s peak: memory-bound.
    cross = _cross(M * 1e9)
    cost = XlaCost(cross.train_step_flops / DEVICES, 1e8, DEVICES)
    peaks = {
        "datasheet_per_device": None,
        "measured_per_device": 1e9,
        "bandwidth_per_device": 1e8,
        "bandwidth_source": "a test",
    }
    record = run_record.train_record(
        _end(setup, _progress({}), cost, cross, peaks, "complete", _quality([True] * 4))
    )
    roof = record.roofline
    assert roof.arithmetic_intensity_flops_per_byte == pytest.approx(5.0)
    assert roof.ridge_point_flops_per_byte == pytest.approx(10.0)
    assert roof.attainable_flops_per_s == pytest.approx(5e8) and roof.bound == "memory"
    achieved = record.metrics.flops_per_s_per_device
    assert roof.achieved_flops_per_s == achieved
    assert roof.fraction_of_attainable == pytest.approx(achieved / 5e8)
    assert _build(setup, _progress({}), cross, _quality([True] * 4)).roofline is None


def test_the_memory_roof_from_a_stream_record(tmp_path):
    record = tmp_path / "bw.json"
    record.write_text(
        json.dumps(
            {"mode": "stream", "kernels": {"triad": {"gb_per_s": 40.0, "gb_per_s_per_device": 5.0}}}
        )
    )
    bandwidth, source = stream_bandwidth(str(record))
    assert bandwidth == 5e9 and str(record) in source
    (tmp_path / "other.json").write_text(json.dumps({"mode": "train"}))
    with pytest.raises(UsageError, match="not a STREAM record with a Triad figure"):
        stream_bandwidth(str(tmp_path / "other.json"))


def test_skipped_examples_join_this_segments_to_those_of_earlier_ones():
    from types import SimpleNamespace

    from hpcai_jax.data.bad_examples import BadExamples

    train, held_out = BadExamples("set", "train", "skip"), BadExamples("set", "test", "skip")
    train.note([(12, "OSError: truncated"), (3, "OSError: truncated"), (12, "again")])
    datasets = SimpleNamespace(
        train=SimpleNamespace(bad_examples=train), eval=SimpleNamespace(bad_examples=held_out)
    )
    before_resume = Progress(run_id="r", skipped_examples={"train": [3, 40], "test": [1]})
    setup = SimpleNamespace(datasets=datasets)
    assert skipped_examples(setup, before_resume) == {"train": [3, 12, 40], "test": [1]}
    assert skipped_examples(setup, Progress(run_id="r")) == {"train": [3, 12]}


def test_the_typed_record_survives_json(setup):
    """What the builders make (numpy figures, tuples and all) → its JSON text → the reader →
    the same typed record."""
    progress = _progress({1: 3})
    progress.epochs = [{"index": 1, "first_step": 0, "steps": 32, "wall_s": 4.0}]
    progress.curve = _curve((32, 10.0, 0.85))
    args = (setup, progress, XlaCost(4e9 / DEVICES, 1e8, DEVICES), _cross(M * 1e9))
    peaks = {"measured_per_device": 1e9, "bandwidth_per_device": 1e8, "bandwidth_source": "x"}
    end = _end(*args, peaks, "complete", _quality([True, False, True, True]))
    typed = run_record.train_record(end)
    assert isinstance(typed, records.TrainRecord) and typed.schema_version == 2
    text = json.dumps(records.to_dict(typed), default=lambda v: v.tolist())
    assert records.read(json.loads(text)) == typed
