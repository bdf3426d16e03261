"""The mesh's axis names and the partition specs of everything sharded over it: the one place
they are written. Models and data code take them from here; sharding is data."""

from __future__ import annotations

from jax.sharding import PartitionSpec as P

ENSEMBLE = "ensemble"
DATA = "data"

MEMBER_SPEC = P(ENSEMBLE)  # stacked member state: leading axis over the ensemble axis
BATCH_SPEC = P(ENSEMBLE, DATA)  # [M, B, ...]: members over ensemble, each batch over data
EVAL_SPEC = P(DATA)  # held-out examples: split over data, every member sees them all
