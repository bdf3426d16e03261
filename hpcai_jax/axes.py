"""The mesh's axis names and the partition specs of everything sharded over it: the one place
they are written. Models and data code take them from here; sharding is data."""

from __future__ import annotations

from jax.sharding import PartitionSpec as P

ENSEMBLE = "ensemble"
DATA = "data"
MODEL = "model"  # tensor parallelism inside one member (--model_parallel; size 1 by default)

MEMBER_SPEC = P(ENSEMBLE)  # stacked member state: leading axis over the ensemble axis
BATCH_SPEC = P(ENSEMBLE, DATA)  # [M, B, ...]: members over ensemble, each batch over data
EVAL_SPEC = P(DATA)  # held-out examples: split over data, every member sees them all


def member_spec(leaf, model_parallel: int) -> P:
    """The spec of one stacked state leaf [M, ...]. Under tensor parallelism (models/
    resnet.py) every per-layer array's last axis is its output features (a kernel's
    output channels, BatchNorm's channels, a bias) and is split over `model`; per-member
    scalars [M] (step, optimizer counts, loss scale) are not."""
    if model_parallel == 1 or leaf.ndim < 2:
        return MEMBER_SPEC
    return P(ENSEMBLE, *([None] * (leaf.ndim - 2)), MODEL)
