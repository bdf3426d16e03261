"""Evaluation that scales (docs/scale.md): the members' counts stay on their members' devices,
so a device's evaluation memory does not grow with M; each member's quality comes from the one
process that owns it, combined over the processes as M small values."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import ENSEMBLE
from hpcai_jax.engine import sharded
from hpcai_jax.telemetry.memory import eval_step_memory, small_detector_setup

ROWS_PER_DEVICE = 2  # held-out rows each device of a member sees per batch
MEMBERS_PER_DEVICE = 2  # few members to unroll: a quick compile


def _detector_eval_memory(m: int) -> int:
    """temp + output bytes per device of the small detector's eval step at M = m on the 8 test
    devices, each holding MEMBERS_PER_DEVICE members and ROWS_PER_DEVICE rows per batch."""
    setup, _ = small_detector_setup(m, MEMBERS_PER_DEVICE, ROWS_PER_DEVICE, devices=8)
    return eval_step_memory(setup).step_bytes


@pytest.mark.slow
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
