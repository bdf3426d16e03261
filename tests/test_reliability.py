"""Checkpoint and resume, preemption, divergence, records that are never lost or overwritten."""

import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from helpers import ROOT, run_main
from test_main import _assert_one_line_error

from hpcai_jax.engine.checkpoint import Checkpointer

RUN = [
    "--ensemble_size=4",
    "--members_per_device=2",
    "--parallel_degree=4",
    "--batch_size=16",
    "--train_examples=512",
    "--eval_examples=200",
    "--eval_batch_size=100",
    "--lr_schedule=warmup_cosine",
    "--model=resnet_small",
    "--log_every=1",
    "--target_quality=0.9",  # Fashion-MNIST has no official target
]


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
    return json.loads(records[0].read_text())


def test_sigterm_then_resume_matches_uninterrupted_run(tmp_path):
    steps = ["--steps=24", "--train_examples=128"]  # 3 epochs of 8 steps
    whole = run_main(
        *RUN, *steps, f"--checkpoint_dir={tmp_path}/ck_whole", f"--results_dir={tmp_path}/r_whole"
    )
    assert whole.returncode == 0, whole.stderr[-2000:]

    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    args = [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *RUN,
        *steps,
        "--run_name=interrupted",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "step 10/24" in line:
            proc.send_signal(signal.SIGTERM)
            break
    proc.stderr.read()
    assert proc.wait(timeout=120) == 75
    partial = _record(tmp_path / "r")
    assert partial["status"] == "partial" and "SIGTERM" in partial["reason"]
    stopped_at = partial["timing"]["steps"]
    assert 10 <= stopped_at < 24

    resumed = run_main(
        *RUN,
        *steps,
        "--run_name=interrupted",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = _record(tmp_path / "r")
    assert record["status"] == "complete" and record["run_id"] == "interrupted"
    assert [r["at_step"] for r in record["resumes"]] == [stopped_at]
    # Timed steps: both segments, each without its first (warm-up) step.
    assert record["timing"]["timed_steps"] == 24 - 2
    assert record["metrics"]["flops_per_s"] > 0 and record["metrics"]["flops_per_s_steady"] > 0
    # Epochs completed before the preemption come back from the checkpoint as they were; the
    # interrupted one is completed by the resumed segment.
    done_before = stopped_at // 8
    assert len(partial["epochs"]) == done_before >= 1
    assert [e["index"] for e in record["epochs"]] == [1, 2, 3]
    assert record["epochs"][:done_before] == partial["epochs"]
    assert all(e["wall_s"] > 0 for e in record["epochs"])

    step_a, params_a = _final_params(tmp_path / "ck_whole")
    step_b, params_b = _final_params(tmp_path / "ck")
    assert step_a == step_b == 24
    leaves_a, leaves_b = list(_leaves(params_a)), list(_leaves(params_b))
    assert len(leaves_a) == len(leaves_b) > 10
    for a, b in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _leaves(tree):
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from _leaves(tree[key])
    else:
        yield np.asarray(tree).ravel()


def test_checkpoint_of_another_configuration_is_refused(tmp_path):
    first = run_main(
        *RUN, "--steps=2", f"--checkpoint_dir={tmp_path}/ck", f"--results_dir={tmp_path}/r1"
    )
    assert first.returncode == 0, first.stderr[-2000:]
    other = run_main(
        *RUN,
        "--steps=2",
        "--seed=5",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r2",
    )
    _assert_one_line_error(
        other,
        f"--checkpoint_dir={tmp_path}/ck",
        "another configuration",
        "train.seed: checkpoint 0, now 5",
    )
    assert not (tmp_path / "r2").exists() or not list((tmp_path / "r2").glob("*.json"))

    # A truncated checkpoint: one line, exit 2, and the checkpoint is left as it was, byte for byte.
    files = [p for p in (tmp_path / "ck").rglob("*") if p.is_file() and p.stat().st_size > 100]
    victim = max(files, key=lambda p: p.stat().st_size)
    victim.write_bytes(victim.read_bytes()[:50])
    before = _contents(tmp_path / "ck")
    broken = run_main(
        *RUN, "--steps=2", f"--checkpoint_dir={tmp_path}/ck", f"--results_dir={tmp_path}/r3"
    )
    _assert_one_line_error(broken, f"--checkpoint_dir={tmp_path}/ck", "unreadable")
    assert _contents(tmp_path / "ck") == before
    # The same with other reads still in flight when the first one fails, as on a loaded machine.
    staggered = _run_main_with_staggered_reads(
        *RUN, "--steps=2", f"--checkpoint_dir={tmp_path}/ck", f"--results_dir={tmp_path}/r4"
    )
    _assert_one_line_error(staggered, f"--checkpoint_dir={tmp_path}/ck", "unreadable")
    assert _contents(tmp_path / "ck") == before


def _contents(directory):
    return {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}


# The CLI with each shard read of a restore started after a random delay of up to 50 ms. On a
# loaded machine reads overlap like this: when one fails, the others are still running, and orbax
# has closed its event loop under them. (orbax's private read function: if it is renamed, this
# fails loudly rather than testing nothing.)
_STAGGERED_READS = """
import asyncio, random, runpy, sys
from orbax.checkpoint._src.serialization import serialization
read = serialization._read_shard
async def staggered(*args, **kwargs):
    await asyncio.sleep(random.random() / 20)
    return await read(*args, **kwargs)
serialization._read_shard = staggered
sys.argv[0] = "hpcai_jax.main"
runpy.run_module("hpcai_jax.main", run_name="__main__")
"""


def _run_main_with_staggered_reads(*args):
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu"
    )
    return subprocess.run(
        [sys.executable, "-c", _STAGGERED_READS, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


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


@pytest.mark.parametrize("policy", ["stop", "prune"])
def test_diverged_member(tmp_path, policy):
    proc = run_main(
        *RUN,
        "--steps=6",
        "--inject_nan=1@2",
        "--divergence_check_every=2",
        f"--on_divergence={policy}",
        f"--results_dir={tmp_path}",
    )
    record = _record(tmp_path)
    assert record["divergence"]["nonfinite_first_step"] == {"1": 2}
    if policy == "stop":
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert record["status"] == "invalid"
        assert "member 1 diverged at step 2" in record["reason"]
        assert (
            record["metrics"]["flops_per_s"] is None and record["metrics"]["vflops_per_s"] is None
        )
        assert "member 1 diverged" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert record["status"] == "complete"
        assert record["divergence"]["pruned_members"] == [1]
        assert record["quality"]["ensemble_members"] == 3
        assert 0 < record["quality"]["ensemble"] <= 1
        # FLOPS counts healthy member-steps only: 5 timed steps, member 1 healthy for none of them
        # after step 2 (timed steps are 1..5: member 1 contributes steps 1 only).
        assert record["flops"]["useful_member_steps"] == 5 * 3 + 1


def test_existing_record_is_not_overwritten(tmp_path):
    # Another run's finished record (its fields beyond these do not matter to the check).
    original = json.dumps({"run_id": "same", "mode": "train", "status": "complete"})
    (tmp_path / "same.json").write_text(original)
    again = run_main(*RUN, "--steps=2", "--run_name=same", f"--results_dir={tmp_path}")
    _assert_one_line_error(again, "already holds a record of run id same", "--overwrite")
    assert (tmp_path / "same.json").read_text() == original
    forced = run_main(
        *RUN, "--steps=2", "--run_name=same", "--overwrite", f"--results_dir={tmp_path}"
    )
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert (tmp_path / "same.json").read_text() != original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.json"]  # no temp files left
