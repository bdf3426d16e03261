"""Bagging's members never wait for each other: no collective of the compiled training step
spans two members (its HLO's replica groups), the per-member figures stay sharded over
`ensemble`, and the host combines them only where the processes meet anyway (run/member_figures.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax import config as C
from hpcai_jax.flops.mode import compile_train_step
from hpcai_jax.run import member_figures
from hpcai_jax.telemetry.comm import comm_volume, cross_member


# Two stages (an identity block, a strided projection block): resnet_small's every block kind
# in fewer ops to compile; the members' independence does not depend on the depth.
def _config(mesh: C.MeshConfig, model: str = "resnet_tiny", dtype: str = "float32"):
    return C.RunConfig(
        mode="train",
        mesh=mesh,
        model=C.ModelConfig(model=model, dtype=dtype),
        data=C.DataConfig(dataset="synthetic", image_size=16, num_classes=10),
        train=C.TrainConfig(batch_size=4, steps=1),
    ).validate()


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh, dtype",
    [
        (C.MeshConfig(ensemble_size=4, parallel_degree=2), "float32"),  # 4 members x 2 devices
        (C.MeshConfig(ensemble_size=8, members_per_device=2, parallel_degree=2), "float32"),
        (C.MeshConfig(ensemble_size=2, parallel_degree=2, model_parallel=2), "float32"),
        (C.MeshConfig(ensemble_size=4, parallel_degree=2), "float16"),  # loss-scale state too
    ],
    ids=["4x2", "8-on-4x2", "2x2x2-model", "4x2-float16"],
)
def test_no_collective_of_the_training_step_spans_two_members(mesh, dtype):
    step = compile_train_step(_config(mesh, dtype=dtype), devices=jax.devices()[:8])
    text = step.compiled.as_text()
    assert "jit_train_step" in text.splitlines()[0]  # the module XLA's dumps name
    assert "all-reduce" in text  # the members' own gradient reductions over `data` are there
    assert cross_member(text, step.mesh) == []
    volume = comm_volume(text, step.mesh)
    assert volume.payload_bytes["ensemble"] == volume.wire_bytes["ensemble"] == 0
    assert volume.metrics_payload_bytes["ensemble"] == volume.metrics_wire_bytes["ensemble"] == 0
    assert volume.payload_bytes["data"] > 0


def test_the_check_finds_a_collective_across_members():
    # The step as it was: per-member metrics psummed over `ensemble` inside the step.
    mesh = jax.make_mesh((4, 2), ("ensemble", "data"), devices=jax.devices()[:8])

    def gathered(x):
        return jax.lax.psum(x, "ensemble")

    fn = jax.jit(
        jax.shard_map(gathered, mesh=mesh, in_specs=P("ensemble"), out_specs=P(), check_vma=False)
    )
    x = jax.device_put(np.zeros((4,), np.float32), NamedSharding(mesh, P("ensemble")))
    text = fn.lower(x).compile().as_text()
    assert len(cross_member(text, mesh)) == 1


def test_each_process_reads_its_own_members_and_gather_combines_them():
    mesh = jax.make_mesh((4, 2), ("ensemble", "data"), devices=jax.devices()[:8])
    values = np.arange(8, dtype=np.float32) * 1.5  # 8 members, 2 per ensemble shard
    array = jax.device_put(values, NamedSharding(mesh, P("ensemble")))
    mine = member_figures.local(array)
    assert sorted(mine) == list(range(8)) and mine[5] == 7.5
    assert member_figures.local_mean(array) == pytest.approx(values.mean())
    flags = jax.device_put(values > 3, NamedSharding(mesh, P("ensemble")))
    table = member_figures.gather([array, array * 2])
    np.testing.assert_array_equal(table, [values, values * 2])
    assert member_figures.gather([flags])[0].tolist() == (values > 3).tolist()


@pytest.mark.slow
def test_a_member_on_one_device_runs_a_step_without_any_collective():
    # XLA keeps an all-reduce of one-device groups, and a multi-process run waits in it for the
    # other processes' steps; with P_degree = 1 the step must hold none at all.
    config = _config(C.MeshConfig(ensemble_size=4, parallel_degree=1))
    step = compile_train_step(config, devices=jax.devices()[:4])
    text = step.compiled.as_text()
    for op in ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all"):
        assert f" {op}(" not in text and f" {op}-start(" not in text, op


def test_members_by_process_and_the_slowest_epochs():
    from hpcai_jax.records import train
    from hpcai_jax.run.clock import members_by_process, take_slowest_epochs
    from hpcai_jax.run.progress import Progress

    devices = np.array(jax.devices()[:8]).reshape(4, 2, 1)
    mesh = jax.sharding.Mesh(devices, ("ensemble", "data", "model"))
    assert members_by_process(mesh, 2) == {0: list(range(8))}  # one process drives them all
    progress = Progress(run_id="r", epochs=[{"wall_s": 1.0}, {"wall_s": 2.0}])

    def timing(p, walls):
        steps = train.ProcessStepTimes(median_s=0.1, max_s=0.2)
        return train.ProcessTiming(
            process_index=p,
            members=[p],
            step_s=steps,
            agree_s=0.0,
            startup_s=1.0,
            epoch_wall_s=walls,
        )

    take_slowest_epochs(progress, [timing(0, [1.0, 2.0]), timing(1, [4.5, 1.5])])
    assert [e["wall_s"] for e in progress.epochs] == [4.5, 2.0]


def test_the_submission_check_reads_process_zeros_log_and_the_slowest_epoch():
    from types import SimpleNamespace as NS

    from hpcai_jax.submission.derive import _process_walls

    def record(*walls):
        per = [NS(epoch_wall_s=list(w)) for w in walls]
        return NS(timing=NS(per_process=per))

    # Process 0 logged 1.0 s; process 1 took 1.5 s, which the record's epoch holds.
    assert _process_walls(record([1.0], [1.5]), 0, 1.5) == (1.0, 1.5)
    assert _process_walls(record([1.0]), 0, 1.0) == (1.0, None)  # one process: one figure
    assert _process_walls(NS(timing=NS(per_process=None)), 0, 2.0) == (2.0, None)  # older


def test_each_member_is_reported_by_its_first_process_as_one_scalar():
    from hpcai_jax.run.clock import owners

    devices = np.array(jax.devices()[:8]).reshape(4, 2, 1)
    mesh = jax.sharding.Mesh(devices, ("ensemble", "data", "model"))
    assert owners(mesh, 2) == [0] * 8
    table = member_figures.gather_owned({0: 0.5, 1: 0.25, 2: 1.0}, [0, 0, 0], 0)
    np.testing.assert_array_equal(table, [0.5, 0.25, 1.0])
