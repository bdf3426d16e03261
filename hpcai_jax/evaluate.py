"""Ensemble evaluation: each member's top-1 accuracy and the bagged ensemble's, whose prediction
is the argmax of the members' mean softmax probabilities (the quality used for VFLOPS)."""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcai_jax.data.pipeline import eval_batches


@dataclasses.dataclass(frozen=True)
class EnsembleQuality:
    members: list[float]
    ensemble: float
    examples: int

    @property
    def member_mean(self) -> float:
        return float(np.mean(self.members))


def evaluate(setup, state) -> EnsembleQuality | None:
    """None for synthetic data, which has no held-out set worth a quality figure."""
    source = setup.datasets.eval if setup.datasets else None
    if source is None:
        return None
    member_correct = np.zeros(setup.layout.ensemble_size, np.int64)
    ensemble_correct = 0
    for batch in eval_batches(source, setup.mesh, setup.config.train.eval_batch_size):
        members, ens = setup.eval_step(state, batch.images, batch.labels)
        member_correct += np.asarray(members, np.int64)
        ensemble_correct += int(ens)
    n = len(source)
    return EnsembleQuality(members=(member_correct / n).tolist(), ensemble=ensemble_correct / n,
                           examples=n)
