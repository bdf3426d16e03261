"""The workload protocol: everything the engine needs to train, evaluate and count one member of
a bagged ensemble, and nothing about how the engine shards, stacks or times it.

The engine calls only these methods. A batch is a dict of named arrays (the data spec's fields);
the engine adds the leading [M, B] (training) or [E] (evaluation) axes and never looks inside.
Evaluation is additive: a workload turns a member's (or the ensemble's averaged) predictions on
a batch into a small vector of counts, the engine sums the counts over batches and devices, and
the workload turns the sums into a quality figure on the host.

`Workload` is the base class of every workload: the abstract methods are the protocol, and the
optional parts have defaults here that say what the engine does without them, so the engine
calls them all directly and a new workload overrides only what it changes.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
from jax import lax

from hpcai_jax.data.source import DataSpec

Batch = dict[str, jax.Array]


class Workload(abc.ABC):
    """One workload; implementations are frozen dataclasses that subclass it."""

    name: str  # the --workload value
    metric: str  # the quality metric's name in the record, e.g. "top1_accuracy"
    spec: DataSpec  # the fields of one example
    dtype: str = "float32"  # --dtype: the compute type; "float16" adds dynamic loss scaling
    model_name: str  # the --model value; without such a field, `name` (__getattr__)

    @abc.abstractmethod
    def model(self, axis_name: str | None, conv: Callable = lax.conv_general_dilated) -> nn.Module:
        """One member's model, called as model(x, train=bool). Statistics it keeps across a
        batch (BatchNorm) are reduced over the mesh axis `axis_name` (None: a batch that lives
        on one device). Collections other than "params" are the member's model state. `conv`:
        its convolutions' `conv_general_dilated`, the step plan's members' form
        (engine/plan.py); lax's is one member alone."""

    @abc.abstractmethod
    def inputs(self, batch: Batch) -> jax.Array:
        """The model's input for a batch, computed on the device (e.g. uint8 → normalised float)."""

    @abc.abstractmethod
    def loss(self, outputs: jax.Array, batch: Batch) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(scalar loss, per-member training metrics) on one device's rows of a member's batch.
        Both are averaged over the data axis by the engine."""

    @abc.abstractmethod
    def predict(self, outputs: jax.Array) -> jax.Array:
        """A member's prediction from its outputs; the ensemble's prediction is their mean."""

    @abc.abstractmethod
    def counts(self, prediction: jax.Array, batch: Batch, weight: jax.Array) -> jax.Array:
        """float32 [K]: additive evaluation counts of `prediction` on the rows whose weight is 1
        (padding and unscored rows weigh 0)."""

    @abc.abstractmethod
    def quality(self, counts) -> float | None:
        """The quality metric from summed counts (host side); None when nothing was scored."""

    @abc.abstractmethod
    def synthetic(self, key: jax.Array, lead: tuple[int, ...]) -> Batch:
        """A random batch with leading axes `lead`, generated on the device (throughput runs)."""

    # Optional: the defaults below are what the engine does for a workload that does not
    # override them.

    def eval_predictions(
        self, x: Any, apply_members: Callable, average: Callable[[Any], Any]
    ) -> tuple[Any, Any]:
        """(member predictions [m_local, ...], ensemble prediction) on the model input `x`.

        apply_members(fn, *stacked) runs fn(apply, *member_slices) for every local member, where
        apply(*args, **kwargs) is model.apply with that member's variables; average(tree) is the
        voting members' mean over the whole ensemble axis. Default: every member predicts alone
        and the ensemble predicts their mean; a workload overrides it for an ensemble that is not
        the mean of finished predictions (a detector averages its members' proposal scores, then
        their box heads on shared proposals).
        """
        predictions = apply_members(lambda apply: self.predict(apply(x, train=False)))
        return predictions, average(predictions)

    def example_hits(self, prediction: Any, batch: Batch) -> jax.Array | None:
        """bool [E]: whether each example's prediction is right, for paired tests over the
        held-out examples (report/paired.py); None (the default): no per-example verdict."""
        return None

    def example_keys(self, batch: Batch) -> jax.Array | None:
        """int32 [E]: what identifies each held-out example's place (a label), hashed into the
        digest that says two records' per-example verdicts are over the same examples in the
        same order; None where `example_hits` is."""
        return None

    def quality_details(self, counts) -> dict | None:
        """Further figures for the record from summed counts (e.g. mAP@[.5:.95]); None: none."""
        return None

    def split_model(self, axis_name: str | None, parts: int) -> nn.Module | None:
        """This device's share of a member whose layers are split `parts` ways over the `model`
        axis (--model_parallel; models/resnet.py), with the same parameter tree as
        model(), every leaf's last axis split. None (the default): this workload's members
        cannot be split, so it runs with --model_parallel=1 only."""
        return None

    def __getattr__(self, attribute: str) -> Any:
        # Reached only for what the instance and its class lack. `model_name` (the --model value,
        # what the FLOP counter names): a workload that trains a model of its own and has no
        # such field (regression's MLP) is named by its workload.
        if attribute == "model_name":
            return self.name
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attribute!r}")
