"""Communication from the compiled step's HLO: members never exchange training data, the data-axis
traffic is what a hand count of the gradient all-reduce says, and HLO snippets of every
reduction mode give the payload, wire and link bytes counted by hand (the literal numbers in
each test; the comments show the arithmetic)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.engine.mesh import MeshLayout, make_mesh
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.flops.mode import compile_train_step
from hpcai_jax.telemetry.comm import comm_volume

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
    assert volume.payload_bytes["ensemble"] == 0
    # Each device's two members all-reduce their whole gradient over `data`; nothing travels
    # over `ensemble`, not even the per-member figures for the host (run/member_figures.py reads them).
    param_bytes = _member_param_bytes(config)
    assert volume.payload_bytes["data"] >= 2 * param_bytes
    assert volume.metrics_payload_bytes["ensemble"] == volume.metrics_wire_bytes["ensemble"] == 0
    if not overrides:  # integer images and labels: no input flag to agree on over `data`
        assert volume.metrics_payload_bytes["data"] == 0
    else:
        # Float features: the two local members' input flags (int32) agreed on over `data`.
        assert volume.metrics_payload_bytes["data"] == 2 * 4
        # The MLP has no BatchNorm: per member, its gradient (every parameter, float32) and the
        # pmean'ed loss (one float32; the identical mse metric is the same value, merged by XLA).
        assert volume.payload_bytes["data"] == 2 * (param_bytes + 4)


def test_both_spellings_of_replica_groups_and_async_collectives():
    mesh = make_mesh(MeshLayout(4, 1, 2, 8))  # ensemble 4 × data 2, ids row-major
    hlo = "\n".join(
        [
            "  %a = f32[10]{0} all-reduce(%x), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%r",
            "  %b = f32[10]{0} all-reduce(%x), replica_groups=[2,4]<=[4,2]T(1,0), to_apply=%r",
            "  %c = (bf16[4]{0}, bf16[16]{0}) all-gather-start(%y), replica_groups=[4,2]<=[8]",
            "  %d = bf16[16]{0} all-gather-done(%c)",
            "  %e = (f32[3]{0}, f32[3]{0}, u32[], u32[]) collective-permute-start(%z), "
            "source_target_pairs={{0,2},{2,0}}",
            "  %f = f32[5]{0} all-reduce(%x), replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}",
            '  %g = s32[4]{0} all-reduce(%x), replica_groups=[2,4]<=[4,2]T(1,0), metadata={op_name="'
            'jit(local_step)/shard_map/member_metrics/psum"}',
        ]
    )
    volume = comm_volume(hlo, mesh, {i: i // 4 for i in range(8)})  # nodes: devices 0-3, 4-7
    # Payload: a 40, c's result 32 (data); b 40, e's result 12 (ensemble).
    assert volume.payload_bytes == {"data": 72, "ensemble": 52, "model": 0}
    assert volume.metrics_payload_bytes == {"ensemble": 16, "data": 0, "model": 0}
    # Wire: a, groups of 2: 40 × 2/2 = 40; c: 32 × 1/2 = 16; b, groups of 4: 40 × 6/4 = 60;
    # e: 2 of 8 devices send 12 → 3 per device; g: 16 × 6/4 = 24.
    assert volume.wire_bytes == {"data": 56, "ensemble": 63, "model": 0}
    assert volume.metrics_wire_bytes == {"ensemble": 24, "data": 0, "model": 0}
    # b's groups {0,2,4,6} and {1,3,5,7} each span both nodes: 2 of a group's 4 ring hops cross,
    # 2 × 60 per group, 240 over 8 devices = 30; a, c and e stay inside a node (0↔2 both node 0).
    assert volume.link_bytes == {"intra_node": 89, "inter_node": 30}
    assert volume.nodes == 2
    # The async all-gather counts its result (bf16[16]), not its operand.
    assert volume.by_collective == {
        "data": {"all-reduce f32": 40, "all-gather bf16": 32},
        "ensemble": {"all-reduce f32": 40, "collective-permute f32": 12},
    }
    assert volume.collectives == 5  # the done and the group-of-one all-reduce are not traffic


# Gradient reductions of 4,960 float32 (19,840 bytes) per device, as the compiled step spells
# them (engine/collectives.py), on 2 nodes × 4 devices.
_NODES = {i: i // 4 for i in range(8)}
_FLAT_P8 = (
    "%all-reduce = (f32[1,64]{1,0}, f32[1,10,64]{2,1,0}, /*index=2*/f32[1,4255]{1,0}, f32[]) "
    "all-reduce(%a, %b, %c, %d), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, "
    "use_global_device_ids=true, to_apply=%region_0"
)
_GROUPED = (  # reduce-scatter in the inner groups, all-reduce across, all-gather back
    "%reduce_scatter.7 = f32[{shard}]{{0}} reduce-scatter(%pad), channel_id=1, "
    "replica_groups={inner}, use_global_device_ids=true, dimensions={{0}}, to_apply=%r\n"
    "%psum.14 = f32[{shard}]{{0}} all-reduce(%reduce_scatter.7), channel_id=1, "
    "replica_groups={outer}, use_global_device_ids=true, to_apply=%r\n"
    "%all_gather.3 = f32[4960]{{0}} all-gather(%psum.14), channel_id=1, replica_groups={inner}, "
    "dimensions={{0}}, use_global_device_ids=true"
)


def test_flat_ring_all_reduce_over_two_nodes():
    volume = comm_volume(_FLAT_P8, make_mesh(MeshLayout(1, 1, 8, 8)), _NODES)
    assert volume.payload_bytes["data"] == 19840  # 256 + 2,560 + 17,020 + 4
    assert volume.wire_bytes["data"] == 34720  # 19,840 × 2 × 7 / 8
    # One ring of 8 ordered node by node: 2 of its 8 hops cross, 34,720 × 2 / 8 = 8,680.
    assert volume.link_bytes == {"intra_node": 26040, "inter_node": 8680}
    assert volume.by_collective == {"data": {"all-reduce f32": 19840}}


def test_members_on_their_own_node_send_nothing_across():
    """M = 2, P_degree = 4 on 2 nodes × 4 devices: each member's ring stays inside its node."""
    hlo = _FLAT_P8.replace("{{0,1,2,3,4,5,6,7}}", "{{0,1,2,3},{4,5,6,7}}")
    volume = comm_volume(hlo, make_mesh(MeshLayout(2, 1, 4, 8)), _NODES)
    assert volume.payload_bytes == {"ensemble": 0, "data": 19840, "model": 0}
    assert volume.wire_bytes["data"] == 29760  # 19,840 × 2 × 3 / 4
    assert volume.link_bytes == {"intra_node": 29760, "inter_node": 0}
    # Without a node map every device is on one node.
    assert comm_volume(_FLAT_P8, make_mesh(MeshLayout(1, 1, 8, 8))).link_bytes == {
        "intra_node": 34720,
        "inter_node": 0,
    }


def test_hierarchical_moves_what_a_ring_moves_and_less_across_nodes():
    hlo = _GROUPED.format(shard=1240, inner="{{0,1,2,3},{4,5,6,7}}", outer="[4,2]<=[2,4]T(1,0)")
    volume = comm_volume(hlo, make_mesh(MeshLayout(1, 1, 8, 8)), _NODES)
    # Payload: shard 4,960 + shard 4,960 + gathered 19,840: twice the flat figure.
    assert volume.payload_bytes["data"] == 29760
    # Wire: reduce-scatter 4,960 × 3 = 14,880; all-reduce in pairs 4,960 × 2 × 1 / 2 = 4,960;
    # all-gather 19,840 × 3 / 4 = 14,880: 34,720, as the flat ring.
    assert volume.wire_bytes["data"] == 34720
    assert volume.wire_by_collective == {
        "data": {"reduce-scatter f32": 14880, "all-reduce f32": 4960, "all-gather f32": 14880}
    }
    # Only the cross-node pairs {0,4}, {1,5}, ... cross: 4,960 against the flat ring's 8,680.
    assert volume.link_bytes == {"intra_node": 29760, "inter_node": 4960}


def test_2d_torus_stages_each_by_their_own_group_size():
    # P_degree 8 as 2 × 4: inner side {0,1}, ..., outer rings {0,2,4,6} and {1,3,5,7}.
    hlo = _GROUPED.format(shard=2480, inner="[4,2]<=[8]", outer="{{0,2,4,6},{1,3,5,7}}")
    volume = comm_volume(hlo, make_mesh(MeshLayout(1, 1, 8, 8)), _NODES)
    assert volume.payload_bytes["data"] == 39680  # 9,920 + 9,920 + 19,840
    # reduce-scatter 9,920 × 1; all-reduce in rings of 4: 9,920 × 2 × 3 / 4 = 14,880;
    # all-gather 19,840 × 1 / 2 = 9,920.
    assert volume.wire_by_collective == {
        "data": {"reduce-scatter f32": 9920, "all-reduce f32": 14880, "all-gather f32": 9920}
    }
    assert volume.wire_bytes["data"] == 34720
    # Each outer ring spans both nodes: 2 of its 4 hops cross, 14,880 × 2 / 4 = 7,440.
    assert volume.link_bytes == {"intra_node": 27280, "inter_node": 7440}


def test_int8_counts_the_int8_values_and_the_scales_it_gathers():
    """M = 2, P_degree = 4: a 64 × 64 kernel's int8 values and its member's float32 scale."""
    hlo = "\n".join(
        [
            "%all_gather.85 = s8[4,1,64,64]{3,2,1,0} all-gather(%convert_bitcast_fusion.2), "
            "channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, "
            "use_global_device_ids=true",
            "%all_gather.87 = f32[4,1,1,1]{3,2,1,0} all-gather(%select_bitcast_fusion.2), "
            "channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, "
            "use_global_device_ids=true",
        ]
    )
    volume = comm_volume(hlo, make_mesh(MeshLayout(2, 1, 4, 8)), _NODES)
    assert volume.by_collective == {"data": {"all-gather s8": 16384, "all-gather f32": 16}}
    # 16,384 × 3 / 4 + 16 × 3 / 4; the float32 ring all-reduce of the kernel sends 16,384 × 1.5.
    assert volume.wire_bytes["data"] == 12300
    assert volume.link_bytes == {"intra_node": 12300, "inter_node": 0}


def test_model_parallel_async_all_gathers_of_multidimensional_and_tuple_results():
    """What XLA:GPU writes: async all-gathers whose shape is (operands, results), a result of
    4 dimensions, and a combined all-gather of two 2-D arrays (a tuple of tuples)."""
    hlo = "\n".join(
        [
            "%ag.1 = (f32[8,28,28,8]{2,1,0,3:T(8,128)}, f32[8,28,28,16]{2,1,0,3:T(8,128)}) "
            "all-gather-start("
            "%fusion.9), channel_id=2, replica_groups=[4,2]<=[8], dimensions={3}, "
            "use_global_device_ids=true",
            "%agd.1 = f32[8,28,28,16]{2,1,0,3} all-gather-done(%ag.1)",
            "%ag.2 = ((f32[8,5]{1,0:T(8,128)}, bf16[4,3]{1,0}), (f32[8,10]{1,0:T(8,128)}, "
            "bf16[4,6]{1,0})) all-gather-start(%a, %b), channel_id=3, "
            "replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={1}, use_global_device_ids=true",
            "%agd.2 = (f32[8,10]{1,0}, bf16[4,6]{1,0}) all-gather-done(%ag.2)",
        ]
    )
    volume = comm_volume(hlo, make_mesh(MeshLayout(2, 1, 2, 8, 2)), _NODES)
    # 8 × 28 × 28 × 16 × 4 = 401,408; then 8 × 10 × 4 = 320 and 4 × 6 × 2 = 48.
    assert volume.by_collective == {"model": {"all-gather f32": 401728, "all-gather bf16": 48}}
    assert volume.payload_bytes == {"ensemble": 0, "data": 0, "model": 401776}
    assert volume.wire_bytes["model"] == 200888  # half of it: pairs
    assert volume.link_bytes == {"intra_node": 200888, "inter_node": 0}
    assert volume.collectives == 2
