"""Checkpoint and resume, preemption, divergence, records that are never lost or overwritten."""

import asyncio
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from helpers import (
    ROOT,
    assert_one_line_error,
    packs_and_passes_check,
    run_in_process,
    run_main,
    subprocess_env,
)

from hpcai_jax.errors import DiskFull, UsageError
from hpcai_jax.records import read, to_dict
from hpcai_jax.run.checkpoint import Checkpointer

RUN = [
    "--ensemble_size=4",
    "--members_per_device=2",
    "--parallel_degree=4",
    "--batch_size=16",
    "--train_examples=128",  # 8 steps per epoch
    "--eval_examples=200",
    "--eval_batch_size=100",
    "--lr_schedule=warmup_cosine",
    "--model=resnet_small",
    "--log_every=1",
    "--target_quality=0.9",  # Fashion-MNIST has no official target
]
STEPS = 20  # two and a half epochs: a run stopped in the second one resumes across a boundary
# The runs that do not resume on another mesh: a constant schedule, so that their steps compile
# to one program whatever their step count (the suite's compilation cache loads it after the
# first), on resnet_tiny (resnet_small's first two stages): no FLOP count of theirs is compared
# across meshes, where resnet_tiny's cross-device share would tell (test_sigterm_then_...).
SHORT = [*RUN, "--lr_schedule=constant", "--model=resnet_tiny"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run (in process): its checkpoint directory and record."""
    folder = tmp_path_factory.mktemp("whole")
    proc = run_in_process(
        *RUN, f"--steps={STEPS}", f"--checkpoint_dir={folder}/ck", f"--results_dir={folder}/r"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder


def _final_params(checkpoint_dir):
    """The latest checkpoint's parameters on one device, whatever topology wrote them."""
    root = os.path.abspath(checkpoint_dir)
    step = max(int(name) for name in os.listdir(root) if name.isdigit())
    path = os.path.join(root, str(step), "state")
    checkpointer = ocp.StandardCheckpointer()
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
        checkpointer.metadata(path).item_metadata,
    )
    return step, checkpointer.restore(path, target)["params"]


def _record(results_dir):
    records = sorted(results_dir.glob("*.json"))
    assert len(records) == 1, records
    return read(records[0])


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """The run stopped by SIGTERM in its second epoch (exit 75): its folder (ck, r, run.mllog),
    partial record, log and the step it stopped at; tests resume copies of it."""
    tmp_path = tmp_path_factory.mktemp("interrupted")
    args = [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *RUN,
        f"--steps={STEPS}",
        "--run_name=interrupted",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
        f"--mllog={tmp_path}/run.mllog",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if f"step 10/{STEPS}" in line:
            proc.send_signal(signal.SIGTERM)
            break
    proc.stderr.read()
    assert proc.wait(timeout=120) == 75
    partial = _record(tmp_path / "r")
    assert partial.status == "partial" and "SIGTERM" in partial.reason
    stopped_at = partial.timing.steps
    # The guard is read every step (--log_every=1): the run stops a step or two after the signal,
    # before the second epoch ends, so the resumed run starts in it and crosses into the third.
    assert 10 <= stopped_at < 2 * 8
    assert partial.data.steps_per_epoch == 8
    # The run is not over: its log ends a segment, and claims no run_stop.
    first_log = _mllog(tmp_path / "run.mllog")
    assert first_log[-1]["key"] == "segment_stop" and "run_stop" not in _keys(first_log)
    assert first_log[-1]["metadata"]["run_id"] == "interrupted"
    assert first_log[-1]["value"] == stopped_at
    return tmp_path, partial, first_log, stopped_at


def _resumable(interrupted, tmp_path):
    """A copy of the interrupted run's folder, to resume."""
    folder, partial, first_log, stopped_at = interrupted
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    return partial, first_log, stopped_at


@pytest.mark.slow
def test_sigterm_then_resume_on_another_mesh_matches_uninterrupted_run(
    whole, interrupted, tmp_path
):
    """SIGTERM to the real command line in the second epoch: exit 75, a partial record, a
    checkpoint; the resumed run (on another mesh) starts in that epoch and crosses into the
    third, and ends with the uninterrupted run's parameters. Stopping after a boundary is what
    lets this tell one bootstrap sample per member for the whole run from a sample drawn afresh
    by each process (or each epoch it starts in): the resumed process never saw epoch 0."""
    partial, first_log, stopped_at = _resumable(interrupted, tmp_path)

    # The resume in a process of its own, as on a cluster: nothing cached in memory by an
    # earlier run (the sampler's epoch orders, say) can stand in for what it must rebuild. And
    # on another machine shape, as a requeued job may get: 4 devices instead of 8, one member
    # per device instead of two, P_degree 1 instead of 4 (so BatchNorm's statistics and the
    # gradient are one device's instead of sums over 4); the same members, the same per-member
    # batch. The state is restored with the new shardings and trains on identically, up to the
    # order of float32 sums.
    resumed = run_main(
        *RUN,
        "--members_per_device=1",
        "--parallel_degree=1",
        f"--steps={STEPS}",
        "--run_name=interrupted",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
        f"--mllog={tmp_path}/run.mllog",
        devices=4,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = _record(tmp_path / "r")
    assert record.status == "complete" and record.run_id == "interrupted"
    assert [r.at_step for r in record.resumes] == [stopped_at]
    # On another mesh: 4 devices, one member each, where the checkpoint was saved on 8 with 2.
    resumed_on = record.resumes[0].mesh
    assert (resumed_on["num_devices"], resumed_on["members_per_device"]) == (4, 1)
    assert resumed_on["parallel_degree"] == 1  # a mapping field
    assert (record.mesh.parallel_degree, record.mesh.members_per_device) == (1, 1)
    # Timed steps: both segments, each without its first (warm-up) step.
    assert record.timing.timed_steps == STEPS - 2
    assert record.metrics.flops_per_s > 0 and record.metrics.flops_per_s_steady > 0
    # Epochs completed before the preemption come back from the checkpoint as they were; the
    # interrupted one is completed by the resumed segment.
    assert len(partial.epochs) == 1
    assert [e.index for e in record.epochs] == [1, 2]
    # (Their FLOPs are counted with the last segment's per-step count: XLA's count on the
    # other mesh differs by < 1%, in the cross-device parts of the step.)
    timed = ("index", "first_step", "steps", "wall_s")
    assert [{k: getattr(e, k) for k in timed} for e in record.epochs[:1]] == [
        {k: getattr(e, k) for k in timed} for e in partial.epochs
    ]
    assert record.epochs[0].flops == pytest.approx(partial.epochs[0].flops, rel=0.01)
    assert all(e.wall_s > 0 for e in record.epochs)
    uninterrupted = _record(whole / "r").quality
    for key in ("ensemble", "members", "oob"):  # the same parameters give the same quality
        assert getattr(record.quality, key) == getattr(uninterrupted, key), key

    # One log for the whole run, the first segment's lines kept as they were: the resumed one
    # appended its start (on its mesh), the rest of epoch 2 (its earlier part carried), epoch 3's
    # lines and the end. Packed and checked as a submission, it passes: the compliance checker
    # and every figure re-derived from the log and the record.
    log = _mllog(tmp_path / "run.mllog")
    assert log[: len(first_log)] == first_log
    keys = _keys(log)
    assert keys.count("run_start") == keys.count("run_stop") == keys.count("segment_start") == 1
    (segment,) = (line for line in log if line["key"] == "segment_start")
    assert segment["metadata"]["first_step"] == stopped_at
    assert segment["metadata"]["number_of_devices"] == 4
    stops = [line["metadata"] for line in log if line["key"] == "epoch_stop"]
    assert [m["epoch_num"] for m in stops] == [1, 2]
    assert stops[1]["earlier_segments_s"] > 0 and "earlier_segments_s" not in stops[0]
    evals = [line["metadata"] for line in log if line["key"] == "eval_accuracy"]
    assert evals and all(e["target"] == 0.9 for e in evals)  # the resumed segment states it too
    assert packs_and_passes_check(next((tmp_path / "r").glob("*.json")), tmp_path)

    step_a, params_a = _final_params(whole / "ck")
    step_b, params_b = _final_params(tmp_path / "ck")
    assert step_a == step_b == STEPS
    leaves_a, leaves_b = list(_leaves(params_a)), list(_leaves(params_b))
    assert len(leaves_a) == len(leaves_b) > 10
    for a, b in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_resume_on_fewer_devices_goes_on_with_the_members_that_fit(whole, interrupted, tmp_path):
    """--resume_members=fit: the 4-member checkpoint resumed on 3 devices (one member each,
    P_degree 1) goes on with members 0-2, which end at the uninterrupted run's parameters;
    member 3 is dropped at the checkpoint's step, its member-steps before it still counted; the
    run packs and passes submission check. Without fit the same resume is one line, exit 2."""
    _, _, stopped_at = _resumable(interrupted, tmp_path)
    args = [
        *RUN,
        "--members_per_device=1",
        "--parallel_degree=1",
        f"--steps={STEPS}",
        "--run_name=interrupted",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
        f"--mllog={tmp_path}/run.mllog",
    ]
    refused = run_main(*args, devices=3)
    assert_one_line_error(refused, "Eq. 5 fails", "--ensemble_size=4")
    resumed = run_main(*args, "--resume_members=fit", devices=3)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = _record(tmp_path / "r")  # the members that fit: 3 of 4
    assert record.status == "complete" and record.mesh.ensemble_size == 3
    assert [r.at_step for r in record.resumes] == [stopped_at]
    assert to_dict(record.members.dropped) == [
        {"member": 3, "step": stopped_at, "why": "--resume_members=fit on 3 devices"}
    ]
    assert len(record.quality.members) == 3
    # Member-steps: the timed steps of the first segment had 4 members, the second's 3.
    first_timed = stopped_at - 1  # each segment's first step is a warm-up
    second_timed = STEPS - stopped_at - 1
    assert record.flops.useful_member_steps == 4 * first_timed + 3 * second_timed
    _, params_whole = _final_params(whole / "ck")
    _, params_fit = _final_params(tmp_path / "ck")
    for a, b in zip(_leaves(params_whole), _leaves(params_fit), strict=True):
        assert 3 * a.size == 4 * b.size  # flattened [M, ...]: members 0-2 first
        np.testing.assert_allclose(a[: b.size], b, rtol=1e-5, atol=1e-6)
    assert packs_and_passes_check(next((tmp_path / "r").glob("*.json")), tmp_path)


def _mllog(path) -> list[dict]:
    return [json.loads(line.removeprefix(":::MLLOG ")) for line in path.read_text().splitlines()]


def _keys(lines: list[dict]) -> list[str]:
    return [line["key"] for line in lines]


def _leaves(tree):
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from _leaves(tree[key])
    else:
        yield np.asarray(tree).ravel()


@pytest.mark.slow
def test_checkpoint_of_another_configuration_is_refused(whole, tmp_path, monkeypatch):
    shutil.copytree(whole / "ck", tmp_path / "ck")
    ck = f"--checkpoint_dir={tmp_path}/ck"
    other = run_in_process(*RUN, f"--steps={STEPS}", "--seed=5", ck, f"--results_dir={tmp_path}/r2")
    assert_one_line_error(other, ck, "another configuration", "train.seed: checkpoint 0, now 5")
    assert not (tmp_path / "r2").exists() or not list((tmp_path / "r2").glob("*.json"))
    # Another machine shape may resume it (test_sigterm_then_resume_on_another_mesh_...), but
    # not other members: M is named.
    other_m = run_in_process(
        *RUN,
        "--ensemble_size=8",
        "--members_per_device=4",
        f"--steps={STEPS}",
        ck,
        f"--results_dir={tmp_path}/r2",
    )
    assert_one_line_error(other_m, ck, "mesh.ensemble_size: checkpoint 4, now 8")

    # A truncated checkpoint: one line, exit 2, and the checkpoint is left as it was, byte for byte.
    files = [p for p in (tmp_path / "ck").rglob("*") if p.is_file() and p.stat().st_size > 100]
    victim = max(files, key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:50])
    before = _contents(tmp_path / "ck")
    broken = run_in_process(*RUN, f"--steps={STEPS}", ck, f"--results_dir={tmp_path}/r3")
    assert_one_line_error(broken, ck, "unreadable")
    assert _contents(tmp_path / "ck") == before
    # The same with each shard read started after a random delay of up to 50 ms: on a loaded
    # machine reads overlap like this, and when one fails the others are still running while
    # orbax closes its event loop under them. (orbax's private read function: if it is renamed,
    # this fails loudly rather than testing nothing.)
    from orbax.checkpoint._src.serialization import serialization

    read = serialization._read_shard

    async def staggered(*args, **kwargs):
        # A delay injected into the reads (their overlap is what is tested), not a wait.
        await asyncio.sleep(random.Random(len(args)).random() / 20)
        return await read(*args, **kwargs)

    monkeypatch.setattr(serialization, "_read_shard", staggered)
    late = run_in_process(*RUN, f"--steps={STEPS}", ck, f"--results_dir={tmp_path}/r4")
    assert_one_line_error(late, ck, "unreadable")
    assert _contents(tmp_path / "ck") == before


def _contents(directory):
    return {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_close_is_safe_to_repeat(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), every=1, keep=1, fingerprint_value={})
    checkpointer.close()
    checkpointer.close()


def test_saving_a_step_already_on_disk_keeps_it(tmp_path):
    """A finished run resumed again ends at its last saved step and saves it once more."""
    import jax.numpy as jnp

    state = {"w": jnp.arange(3.0)}
    first = Checkpointer(str(tmp_path), every=1, keep=2, fingerprint_value={})
    first.save(4, state, {"step": 4})
    first.close()
    again = Checkpointer(str(tmp_path), every=1, keep=2, fingerprint_value={})
    again.save(4, {"w": jnp.zeros(3)}, {"step": 4})
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    restored, meta = again.restore({"w": jax.ShapeDtypeStruct((3,), jnp.float32, sharding=one)})
    again.close()
    assert meta["step"] == 4
    np.testing.assert_array_equal(np.asarray(restored["w"]), [0.0, 1.0, 2.0])


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["stop", "prune"])
def test_diverged_member(tmp_path, policy):
    """The flags are read every 2 steps. (Flags still pending at a preemption:
    test_sigterm_during_a_save_..., which shares this compiled step: the cache loads it.)"""
    proc = run_in_process(
        *SHORT,
        "--steps=6",
        "--inject_nan=1@2",
        "--divergence_check_every=2",
        f"--on_divergence={policy}",
        f"--results_dir={tmp_path}",
    )
    record = _record(tmp_path)
    assert record.divergence.nonfinite_first_step == {"1": 2}
    if policy == "stop":
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert record.status == "invalid"
        assert "member 1 diverged at step 2" in record.reason
        assert record.metrics.flops_per_s is None and record.metrics.vflops_per_s is None
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert record.status == "complete"
        assert record.divergence.pruned_members == [1]
        assert record.quality.ensemble_members == 3
        assert 0 < record.quality.ensemble <= 1
        # FLOPS counts healthy member-steps only: 5 timed steps, member 1 healthy for none of them
        # after step 2 (timed steps are 1..5: member 1 contributes steps 1 only).
        assert record.flops.useful_member_steps == 5 * 3 + 1


@pytest.mark.slow
def test_a_resume_under_another_run_name_is_refused(whole, tmp_path):
    before = sorted(p.name for p in (whole / "ck").iterdir())
    again = run_in_process(
        *RUN,
        f"--steps={STEPS}",
        f"--checkpoint_dir={whole}/ck",
        "--run_name=another",
        f"--results_dir={tmp_path}",
    )
    assert_one_line_error(again, "--run_name=another", "resume it with --run_name=")
    assert sorted(p.name for p in (whole / "ck").iterdir()) == before
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.slow
def test_existing_record_is_not_overwritten(tmp_path):
    # Another run's finished record (its fields beyond these do not matter to the check).
    original = json.dumps({"run_id": "same", "mode": "train", "status": "complete"})
    (tmp_path / "same.json").write_text(original)
    again = run_in_process(*SHORT, "--steps=2", "--run_name=same", f"--results_dir={tmp_path}")
    assert_one_line_error(again, "already holds a record of run id same", "--overwrite")
    assert (tmp_path / "same.json").read_text() == original
    # With --overwrite, the earlier run's record, MLLOG and kept weights (the project's own,
    # told by content: tests/test_overwrite.py) are replaced by this run's.
    log = tmp_path / "same.mllog"
    log.write_text(
        ':::MLLOG {"key": "run_stop", "metadata": {"file": "hpcai_jax/run/outputs.py", '
        '"run_id": "same"}}\n'
    )
    (tmp_path / "same.weights").mkdir()
    (tmp_path / "same.weights" / "_CHECKPOINT_METADATA").write_text("{}")
    forced = run_in_process(
        *SHORT,
        "--steps=2",
        "--run_name=same",
        "--overwrite",
        f"--results_dir={tmp_path}",
        f"--mllog={log}",
    )
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert (tmp_path / "same.json").read_text() != original
    assert log.read_text().startswith(":::MLLOG") and "submission_benchmark" in log.read_text()
    assert (tmp_path / "same.weights" / "_CHECKPOINT_METADATA").read_text() != "{}"
    # 2 steps of an epoch of 8: no Eq. 6 figure, hence no VFLOPS; the record says why. One
    # evaluation, at the end, below the target 0.9: no time to target, and why.
    record = read(tmp_path / "same.json")
    assert record.epochs == [] and record.metrics.flops_per_s is None
    assert record.metrics.vflops_per_s is None and record.metrics.flops_per_s_steady
    why = record.metrics.flops_per_s_why
    assert why.startswith("no completed epoch (2 steps of 8 per epoch): Eq. 6 is per epoch"), why
    assert f"n/a ({why}" in forced.stdout  # the summary gives the record's reason
    (point,) = record.quality.curve
    assert (point.step, point.ensemble) == (2, record.quality.ensemble)
    assert record.time_to_target_s is None
    assert record.time_to_target_why.startswith("the ensemble never reached the target 0.9")
    assert record.timing.eval_s > 0 and record.quality.stopped_at_target is False
    # The record, the members' kept weights (--keep_weights) and the TensorBoard events
    # (docs/observe.md); no temp files left.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "same.json",
        "same.mllog",
        "same.weights",
        "tensorboard",
    ]


def _json_meta_writer():
    """orbax's writer of a checkpoint's JSON part (our `meta`), run in its background commit
    thread: where the injections below act. (A private name: if orbax renames it, the tests
    fail loudly rather than testing nothing.)"""
    from orbax.checkpoint._src.handlers import json_checkpoint_handler

    return json_checkpoint_handler.JsonCheckpointHandler


@pytest.mark.slow
def test_sigterm_during_a_save_and_a_removed_results_directory(tmp_path, monkeypatch):
    """SIGTERM arrives while each checkpoint is being written (the periodic one of step 2, and
    the final one: a second SIGTERM, as a scheduler may send). The first stops the run at the
    next step, after the save; the second is noted and the final save completes (without the
    guard it would kill the process mid-write). The results directory is removed during the
    run: the partial record is written into it anew. And member 1 goes NaN at step 2 with the
    flags read every 4 steps: those of steps 2 and 3 are still pending at the stop, and are read
    before the partial record and the checkpoint, so member 1 is dated and pruned there. The
    MLLOG, in the removed directory, is written again whole at the segment's end; the resumed
    run appends to it, and the run packs and passes submission check."""
    handler = _json_meta_writer()
    write = handler._save_fn
    results_dir = tmp_path / "r"

    async def signalled(self, item, directory):
        os.kill(os.getpid(), signal.SIGTERM)
        shutil.rmtree(results_dir, ignore_errors=True)
        return await write(self, item, directory)

    monkeypatch.setattr(handler, "_save_fn", signalled)
    args = [
        *SHORT,
        "--steps=9",  # past the first epoch (8 steps): an Eq. 6 figure to pack
        "--checkpoint_every=2",
        "--keep_checkpoints=3",
        "--inject_nan=1@2",
        "--divergence_check_every=4",
        "--on_divergence=prune",
        "--run_name=lost-log",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={results_dir}",
        f"--mllog={results_dir}/run.mllog",
    ]
    proc = run_in_process(*args)
    assert proc.returncode == 75, proc.stderr[-2000:]
    assert "the whole log was written again to" in proc.stderr
    first = _mllog(results_dir / "run.mllog")
    assert first[0]["key"] == "cache_clear" and first[-1]["key"] == "segment_stop"
    record = _record(results_dir)
    assert record.status == "partial" and record.reason == "preempted by SIGTERM at step 3"
    assert record.divergence.nonfinite_first_step == {"1": 2}
    assert record.divergence.pruned_members == [1]
    assert sorted(os.listdir(tmp_path / "ck")) == ["2", "3"]  # both complete, no temp left
    step, _ = _final_params(tmp_path / "ck")
    assert step == 3
    meta = json.loads((tmp_path / "ck" / "3" / "meta" / "metadata").read_text())
    assert meta["diverged"] == {"1": 2}
    monkeypatch.undo()  # the resume saves undisturbed
    resumed = run_in_process(*args)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = _mllog(results_dir / "run.mllog")
    assert log[: len(first)] == first and log[-1]["key"] == "run_stop"
    assert packs_and_passes_check(results_dir / "lost-log.json", tmp_path)


def test_a_full_disk_while_saving_keeps_the_earlier_checkpoints(tmp_path, monkeypatch):
    """The injection: writing step 2's checkpoint fails with ENOSPC, in orbax's background
    commit as a full disk does; the failure surfaces at the next save. That save raises the
    one-line error (the loop lets it end the run: exit 74, requeued, no record) naming the
    directory, the bytes a step needs and what is kept; step 1 is whole and is what the next run
    resumes from; the unfinished step's temporary folder is removed."""
    import jax.numpy as jnp

    handler = _json_meta_writer()
    write = handler._save_fn

    async def full(self, item, directory):
        if item.get("step") == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
        return await write(self, item, directory)

    monkeypatch.setattr(handler, "_save_fn", full)
    first = Checkpointer(str(tmp_path), every=1, keep=2, fingerprint_value={})
    for step in (1, 2):
        first.save(step, {"w": jnp.full(3, float(step))}, {"step": step})
    with pytest.raises(DiskFull) as error:
        first.save(3, {"w": jnp.full(3, 3.0)}, {"step": 3})
    assert str(error.value) == (
        f"--checkpoint_dir={tmp_path}: no space left on device to write a checkpoint in "
        f"{tmp_path} (12 bytes needed); the complete checkpoints are kept (steps [1]): free "
        "space and run again to resume"
    )
    assert error.value.exit_code == 74  # requeued: the job resumes from step 1
    assert not list(tmp_path.glob("*orbax-checkpoint-tmp*"))  # the unfinished step removed
    first.close()  # the error path closes it again
    monkeypatch.undo()

    again = Checkpointer(str(tmp_path), every=1, keep=2, fingerprint_value={})
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    restored, meta = again.restore({"w": jax.ShapeDtypeStruct((3,), jnp.float32, sharding=one)})
    assert meta["step"] == 1 and np.asarray(restored["w"]).tolist() == [1.0, 1.0, 1.0]
    again.close()


def test_two_runs_given_the_same_checkpoint_directory(tmp_path):
    """The second would write the same steps: refused in one line naming the holder."""
    first = Checkpointer(str(tmp_path), every=1, keep=1, fingerprint_value={})
    try:
        with pytest.raises(UsageError, match=r"in use by another run \(pid \d+ on .*\); give"):
            Checkpointer(str(tmp_path), every=1, keep=1, fingerprint_value={})
    finally:
        first.close()
    Checkpointer(str(tmp_path), every=1, keep=1, fingerprint_value={}).close()
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_nan_in_the_input_is_bad_input_not_divergence(tmp_path, monkeypatch):
    """A NaN that comes with the data is caught by the step's on-device input flag and named as
    bad input (data set, split, the examples of that batch holding it), not dated as a member's
    divergence. Friedman #1: float inputs (JPEG pixels are integers and cannot hold a NaN)."""
    from hpcai_jax.data import friedman
    from hpcai_jax.data.source import ArraySource

    poisoned = set(range(3, 256, 7))
    real_load = friedman.load

    def load():
        train, held_out = real_load()
        x = train.arrays["x"].copy()
        x[sorted(poisoned), 4] = np.nan
        return ArraySource(train.spec, {**train.arrays, "x": x}), held_out

    monkeypatch.setattr(friedman, "load", load)
    proc = run_in_process(
        "--workload=regression",
        "--model=mlp",
        "--dataset=friedman1",
        "--target_quality=0.9",
        "--ensemble_size=4",
        "--parallel_degree=2",
        "--batch_size=16",
        "--train_examples=256",
        "--eval_examples=64",
        "--steps=4",
        "--divergence_check_every=2",
        f"--results_dir={tmp_path}",
    )
    assert_one_line_error(
        proc,
        "training batch at step 0 holds non-finite input values",
        "--dataset=friedman1",
        code=65,  # bad data: never requeued (docs/reliability.md, Exit codes)
    )
    line = next(x for x in proc.stderr.splitlines() if x.startswith("hpcai_jax: error: "))
    assert "bad input data, not divergence" in line
    named = json.loads(line.split("split 'train', examples ")[1].split("]")[0] + "]")
    assert named and set(named) <= poisoned
    assert "diverged" not in proc.stderr
