"""Ensemble evaluation: each member's top-1 accuracy and the bagged ensemble's on the held-out
set (the quality used for VFLOPS), and the out-of-bag estimate on the training set.

The ensemble's prediction is the argmax of its members' mean softmax probabilities. Out of bag
(Breiman 1996): every member leaves out ≈ 36.8% of the training set, so each training example
can be predicted by the members that never trained on it; the accuracy of those predictions
estimates the ensemble's generalisation without touching the held-out set.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import NamedSharding

from hpcai_jax.data.pipeline import eval_batches
from hpcai_jax.mesh import BATCH_SPEC


@dataclasses.dataclass(frozen=True)
class OutOfBag:
    accuracy: float | None  # None when no example had a voter
    scored: int  # examples at least one kept member never trained on
    subset: int  # training examples looked at: the first `subset` of the training set
    mean_voters: float  # kept members voting on a scored example, on average
    why_none: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EnsembleQuality:
    members: list[float]  # every member's held-out accuracy, pruned ones included
    kept: list[bool]  # members that take part in the ensemble's prediction
    ensemble: float
    examples: int
    oob: OutOfBag | None

    @property
    def member_mean(self) -> float:
        """Mean over the kept members: a pruned member is not part of what the ensemble is."""
        return float(np.mean([a for a, k in zip(self.members, self.kept, strict=True) if k]))


def _score(setup, state, source, indices: np.ndarray | None,
           votes_of) -> tuple[np.ndarray, int, int, float]:
    """Runs the eval step over `indices` of `source` (None: all of it); votes_of(members, rows) →
    float32 votes [len(members), len(rows)] for a member range and example indices (-1: padding),
    called for the blocks this process's devices hold. Returns (correct per member, ensemble
    correct, examples scored, votes cast on them)."""
    m = setup.layout.ensemble_size
    sharding = NamedSharding(setup.mesh, BATCH_SPEC)
    member_correct, ensemble_correct, scored, votes = np.zeros(m, np.int64), 0, 0, 0.0
    for rows, batch in eval_batches(source, setup.mesh, setup.config.train.eval_batch_size, indices):

        def block(index, rows=rows):
            (m0, m1, _), (r0, r1, _) = index[0].indices(m), index[1].indices(len(rows))
            return votes_of(range(m0, m1), rows[r0:r1])

        array = jax.make_array_from_callback((m, len(rows)), sharding, block, dtype=np.float32)
        counts = setup.eval_step(state, batch.images, batch.labels, array)
        member_correct += np.asarray(counts.member_correct, np.int64)
        ensemble_correct += int(counts.ensemble_correct)
        scored += int(counts.scored)
        votes += float(counts.votes)
    return member_correct, ensemble_correct, scored, votes


def evaluate(setup, state, pruned: frozenset[int] = frozenset()) -> EnsembleQuality | None:
    """None for synthetic data, which has no held-out set worth a quality figure. Pruned members
    still get their own accuracy but take no part in the ensemble's prediction."""
    source = setup.datasets.eval if setup.datasets else None
    if source is None:
        return None
    m = setup.layout.ensemble_size
    kept = np.asarray([i not in pruned for i in range(m)])

    def held_out_votes(members: range, rows: np.ndarray) -> np.ndarray:
        return (kept[list(members), None] & (rows >= 0)[None]).astype(np.float32)

    member_correct, ensemble_correct, _, _ = _score(setup, state, source, None, held_out_votes)
    n = len(source)
    return EnsembleQuality(members=(member_correct / n).tolist(), kept=kept.tolist(),
                           ensemble=ensemble_correct / n, examples=n,
                           oob=out_of_bag(setup, state, kept))


def out_of_bag(setup, state, kept: np.ndarray) -> OutOfBag | None:
    """The out-of-bag accuracy on the first --oob_examples training examples (0: skipped)."""
    train, sampler = setup.datasets.train, setup.sampler
    subset = min(setup.config.data.oob_examples, len(train))
    if subset == 0:
        return None

    def oob_votes(members: range, rows: np.ndarray) -> np.ndarray:
        valid = rows >= 0
        safe = np.where(valid, rows, 0)
        return np.stack([kept[i] & valid & sampler.out_of_bag(i, safe)
                         for i in members]).astype(np.float32)

    _, correct, scored, votes = _score(setup, state, train, np.arange(subset), oob_votes)
    if scored == 0:
        return OutOfBag(None, 0, subset, 0.0,
                        f"every kept member trained on every one of the {subset} examples "
                        f"(--bootstrap={sampler.method})")
    return OutOfBag(correct / scored, scored, subset, votes / scored)
