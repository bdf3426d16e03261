"""Ensemble evaluation: each member's top-1 accuracy and the bagged ensemble's, whose prediction
is the argmax of the members' mean softmax probabilities (the quality used for VFLOPS)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import NamedSharding

from hpcai_jax.data.pipeline import eval_batches
from hpcai_jax.mesh import MEMBER_SPEC


@dataclasses.dataclass(frozen=True)
class EnsembleQuality:
    members: list[float]
    ensemble: float
    examples: int

    @property
    def member_mean(self) -> float:
        return float(np.mean(self.members))


def evaluate(setup, state, pruned: frozenset[int] = frozenset()) -> EnsembleQuality | None:
    """None for synthetic data, which has no held-out set worth a quality figure. Pruned members
    still get their own accuracy but take no part in the ensemble's prediction."""
    source = setup.datasets.eval if setup.datasets else None
    if source is None:
        return None
    m = setup.layout.ensemble_size
    host_weights = np.asarray([0.0 if i in pruned else 1.0 for i in range(m)], np.float32)
    weights = jax.make_array_from_callback((m,), NamedSharding(setup.mesh, MEMBER_SPEC),
                                           lambda index: host_weights[index])
    member_correct = np.zeros(m, np.int64)
    ensemble_correct = 0
    for batch in eval_batches(source, setup.mesh, setup.config.train.eval_batch_size):
        members, ens = setup.eval_step(state, batch.images, batch.labels, weights)
        member_correct += np.asarray(members, np.int64)
        ensemble_correct += int(ens)
    n = len(source)
    return EnsembleQuality(members=(member_correct / n).tolist(), ensemble=ensemble_correct / n,
                           examples=n)
