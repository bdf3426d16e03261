"""The workload protocol: everything the engine needs to train, evaluate and count one member of
a bagged ensemble, and nothing about how the engine shards, stacks or times it.

The engine calls only these methods. A batch is a dict of named arrays (the data spec's fields);
the engine adds the leading [M, B] (training) or [E] (evaluation) axes and never looks inside.
Evaluation is additive: a workload turns a member's (or the ensemble's averaged) predictions on
a batch into a small vector of counts, the engine sums the counts over batches and devices, and
the workload turns the sums into a quality figure on the host.
"""

from __future__ import annotations

from typing import Protocol

import flax.linen as nn
import jax

from hpcai_jax.data.source import DataSpec

Batch = dict[str, jax.Array]


class Workload(Protocol):
    name: str  # the --workload value
    metric: str  # the quality metric's name in the record, e.g. "top1_accuracy"
    spec: DataSpec  # the fields of one example

    def model(self, axis_name: str | None) -> nn.Module:
        """One member's model, called as model(x, train=bool). Statistics it keeps across a
        batch (BatchNorm) are reduced over the mesh axis `axis_name` (None: a batch that lives
        on one device). Collections other than "params" are the member's model state."""

    def inputs(self, batch: Batch) -> jax.Array:
        """The model's input for a batch, computed on the device (e.g. uint8 → normalised float)."""

    def loss(self, outputs: jax.Array, batch: Batch) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(scalar loss, per-member training metrics) on one device's rows of a member's batch.
        Both are averaged over the data axis by the engine."""

    def predict(self, outputs: jax.Array) -> jax.Array:
        """A member's prediction from its outputs; the ensemble's prediction is their mean."""

    def counts(self, prediction: jax.Array, batch: Batch, weight: jax.Array) -> jax.Array:
        """float32 [K]: additive evaluation counts of `prediction` on the rows whose weight is 1
        (padding and unscored rows weigh 0)."""

    def quality(self, counts) -> float | None:
        """The quality metric from summed counts (host side); None when nothing was scored."""

    def synthetic(self, key: jax.Array, lead: tuple[int, ...]) -> Batch:
        """A random batch with leading axes `lead`, generated on the device (throughput runs)."""


# Optional methods, looked up with getattr by the engine:
#
#   eval_predictions(x, apply_members, average) -> (member predictions [m_local, ...], ensemble
#       prediction): for an ensemble that is not the mean of finished predictions (a detector
#       averages its members' proposal scores, then their box heads on shared proposals).
#       apply_members(fn, *stacked) runs fn(apply, *member_slices) for every local member, where
#       apply(*args, **kwargs) is model.apply with that member's variables; average(tree) is the
#       voting members' mean over the whole ensemble axis. Default: the mean of `predict`.
#   quality_details(counts) -> dict: further figures for the record (e.g. mAP@[.5:.95]).
#   split_model(axis_name, parts) -> nn.Module: this device's share of a member whose layers are
#       split `parts` ways over the `model` axis (--model_parallel; models/tensor_parallel.py),
#       with the same parameter tree as model(), every leaf's last axis split. A workload
#       without it runs with --model_parallel=1 only.
