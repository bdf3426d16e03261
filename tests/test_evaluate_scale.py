"""Evaluation that scales (docs/scale.md): the members' counts stay on their members' devices,
so a device's evaluation memory does not grow with M; each member's quality comes from the one
process that owns it, combined over the processes as M small values."""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax import config as C
from hpcai_jax.axes import BATCH_SPEC, ENSEMBLE
from hpcai_jax.data.pipeline import eval_layout
from hpcai_jax.engine import sharded
from hpcai_jax.engine.setup import build_setup

ROWS_PER_DEVICE = 2  # held-out rows each device of a member sees per batch
MEMBERS_PER_DEVICE = 2  # few members to unroll: a quick compile


def _detector_eval_memory(m: int) -> int:
    """temp + output bytes per device of the small detector's eval step at M = m on the 8 test
    devices, each device holding MEMBERS_PER_DEVICE members and ROWS_PER_DEVICE rows per batch:
    what a device holds is the same at every M, only the number of ensemble rows changes."""
    degree = 8 * MEMBERS_PER_DEVICE // m
    config = C.RunConfig(
        mesh=C.MeshConfig(
            ensemble_size=m, members_per_device=MEMBERS_PER_DEVICE, parallel_degree=degree
        ),
        model=C.ModelConfig(workload="extreme_weather", model="faster_rcnn_small"),
        data=C.DataConfig(
            dataset="synthetic_climate", image_size=32, train_examples=32, eval_examples=16
        ),
        train=C.TrainConfig(batch_size=8, steps=1, eval_batch_size=ROWS_PER_DEVICE * degree),
        optim=C.OptimConfig(lr_schedule="constant", learning_rate=0.1),
        results=C.ResultsConfig(target_quality=0.35),
    ).validate()
    setup = build_setup(config)
    size, split = eval_layout(setup.mesh, ROWS_PER_DEVICE * degree)
    lead = (setup.mesh.shape[ENSEMBLE], size // split)  # as read: data/pipeline.eval_batches
    read = NamedSharding(setup.mesh, BATCH_SPEC)
    batch = {
        name: jax.ShapeDtypeStruct((*lead, *shape), np.dtype(dtype), sharding=read)
        for name, (shape, dtype) in setup.datasets.eval.spec.fields.items()
    }
    valid = jax.ShapeDtypeStruct(lead, bool, sharding=read)
    votes = jax.ShapeDtypeStruct((m, size), np.float32, sharding=read)
    lowered = setup.eval_step.lower(setup.abstract_state, batch, valid, votes, split)
    analysis = lowered.compile().memory_analysis()
    return analysis.temp_size_in_bytes + analysis.output_size_in_bytes


def test_detector_eval_memory_per_device_does_not_grow_with_members():
    """Gathering the members' counts [M, K] (K = 327,684 for the detector) onto every device, as
    the step did, grew with M (41 MiB at M = 8, 191 MiB at M = 64 with 8 members per device);
    a device now holds its own members' counts only."""
    small, large = _detector_eval_memory(2), _detector_eval_memory(16)
    assert large <= 1.5 * small, (small, large)


def test_owners_and_json_gather_give_every_member_its_owners_value():
    mesh = jax.make_mesh((4, 2), (ENSEMBLE, "data"), devices=jax.devices()[:8])
    array = jax.device_put(np.zeros((8, 3), np.float32), NamedSharding(mesh, P(ENSEMBLE)))
    assert sharded.owners(array) == [0] * 8
    values = {0: None, 1: [0.25, {"a": 1, "b": None}], 2: float("nan")}
    got = sharded.gather_owned_json(values, [0, 0, 0], 0)
    assert got[:2] == [None, [0.25, {"a": 1, "b": None}]] and math.isnan(got[2])
    np.testing.assert_array_equal(sharded.gather_owned({0: 0.5, 1: 2.0}, [0, 0], 0), [0.5, 2.0])
