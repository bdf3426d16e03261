"""Communication volume from the compiled step's HLO: members never exchange training data, and
the data-axis traffic is what a hand count of the gradient all-reduce says."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.engine.comm import comm_volume
from hpcai_jax.engine.mesh import MeshLayout, make_mesh
from hpcai_jax.engine.setup import build_setup, compile_train_step

REGRESSION = dict(
    model=C.ModelConfig(workload="regression", model="mlp"),
    data=C.DataConfig(dataset="friedman1", train_examples=512, eval_examples=200),
)


def _member_param_bytes(config) -> int:
    setup = build_setup(config, open_data=False)
    leaves = jax.tree.leaves(setup.abstract_state.params)
    return sum(int(np.prod(x.shape[1:])) * x.dtype.itemsize for x in leaves)


@pytest.mark.parametrize("overrides", [{}, REGRESSION], ids=["resnet_small", "mlp"])
def test_members_never_exchange_training_data(overrides):
    config = tiny_config(mesh=C.MeshConfig(4, 2, 4), **overrides)
    step = compile_train_step(config)
    volume = comm_volume(step.compiled.as_text(), step.mesh)
    assert volume.bytes_per_step["ensemble"] == 0
    # Each device's two members all-reduce their whole gradient over `data`; the per-member
    # [M] figures for the host travel over `ensemble`, counted apart.
    param_bytes = _member_param_bytes(config)
    assert volume.bytes_per_step["data"] >= 2 * param_bytes
    assert volume.metrics_bytes_per_step["data"] == 0
    assert volume.metrics_bytes_per_step["ensemble"] > 0
    if overrides:
        # The MLP has no BatchNorm: per member, its gradient (every parameter, float32) and the
        # pmean'ed loss (one float32; the identical mse metric is the same value, merged by XLA).
        assert volume.bytes_per_step["data"] == 2 * (param_bytes + 4)
        # gather_members: loss/mse [4] float32 and the finite flags [4] int32.
        assert volume.metrics_bytes_per_step["ensemble"] == 16 + 16


def test_both_spellings_of_replica_groups_and_async_collectives():
    mesh = make_mesh(MeshLayout(4, 1, 2, 8))  # ensemble 4 × data 2, ids row-major
    hlo = "\n".join(
        [
            "  %a = f32[10]{0} all-reduce(%x), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%r",
            "  %b = f32[10]{0} all-reduce(%x), replica_groups=[2,4]<=[4,2]T(1,0), to_apply=%r",
            "  %c = (bf16[4]{0}, bf16[16]{0}) all-gather-start(%y), replica_groups=[4,2]<=[8]",
            "  %d = bf16[16]{0} all-gather-done(%c)",
            "  %e = f32[3]{0} collective-permute(%z), source_target_pairs={{0,2},{2,0}}",
            "  %f = f32[5]{0} all-reduce(%x), replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}",
            '  %g = s32[4]{0} all-reduce(%x), replica_groups=[2,4]<=[4,2]T(1,0), metadata={op_name="'
            'jit(local_step)/shard_map/member_metrics/psum"}',
        ]
    )
    volume = comm_volume(hlo, mesh)
    assert volume.bytes_per_step == {"data": 40 + 32, "ensemble": 40 + 12, "model": 0}
    assert volume.metrics_bytes_per_step == {"ensemble": 16, "data": 0, "model": 0}
    # The async all-gather counts its result (bf16[16]), not its operand.
    assert volume.by_collective == {
        "data": {"all-reduce f32": 40, "all-gather bf16": 32},
        "ensemble": {"all-reduce f32": 40, "collective-permute f32": 12},
    }
    assert volume.collectives == 5  # the done and the group-of-one all-reduce are not traffic
