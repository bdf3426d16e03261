"""Bagging's members never wait for each other: no collective of the compiled training step
spans two members (its HLO's replica groups), the per-member figures stay sharded over
`ensemble`, and the host combines them only where the processes meet anyway (run/members.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax import config as C
from hpcai_jax.engine.setup import compile_train_step
from hpcai_jax.run import members
from hpcai_jax.telemetry.comm import comm_volume, cross_member


def _config(mesh: C.MeshConfig, model: str = "resnet_small", dtype: str = "float32"):
    return C.RunConfig(
        mode="train",
        mesh=mesh,
        model=C.ModelConfig(model=model, dtype=dtype),
        data=C.DataConfig(dataset="synthetic", image_size=16, num_classes=10),
        train=C.TrainConfig(batch_size=4, steps=1),
    ).validate()


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
    mine = members.local(array)
    assert sorted(mine) == list(range(8)) and mine[5] == 7.5
    assert members.local_mean(array) == pytest.approx(values.mean())
    flags = jax.device_put(values > 3, NamedSharding(mesh, P("ensemble")))
    table = members.gather([array, array * 2])
    np.testing.assert_array_equal(table, [values, values * 2])
    assert members.gather([flags])[0].tolist() == (values > 3).tolist()
