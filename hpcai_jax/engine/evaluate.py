"""Ensemble evaluation: each member's quality and the bagged ensemble's on the held-out set (the
quality used for VFLOPS), and the out-of-bag estimate on the training set, for any workload.

The ensemble's prediction is the mean of its members' predictions (for classification, softmax
probabilities, whose argmax is the class). Out of bag
(Breiman 1996): every member leaves out ≈ 36.8% of the training set, so each training example
can be predicted by the members that never trained on it; the accuracy of those predictions
estimates the ensemble's generalisation without touching the held-out set.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import NamedSharding

from hpcai_jax.axes import BATCH_SPEC
from hpcai_jax.data.pipeline import eval_batches


@dataclasses.dataclass(frozen=True)
class OutOfBag:
    quality: float | None  # the workload's metric; None when no example had a voter
    scored: int  # examples at least one kept member never trained on
    subset: int  # training examples looked at: the first `subset` of the training set
    mean_voters: float  # kept members voting on a scored example, on average
    why_none: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EnsembleQuality:
    members: list[float | None]  # every member's held-out quality, pruned ones included
    kept: list[bool]  # members that take part in the ensemble's prediction
    ensemble: float
    examples: int
    oob: OutOfBag | None
    # The workload's further figures (e.g. a detector's mAP@[.5:.95] and per-class AP), for the
    # ensemble and every member; None when the workload has none (`quality_details`).
    details: dict | None = None

    @property
    def member_mean(self) -> float | None:
        """Mean over the kept members: a pruned member is not part of what the ensemble is."""
        kept = [a for a, k in zip(self.members, self.kept, strict=True) if k and a is not None]
        return float(np.mean(kept)) if kept else None


def _score(setup, state, source, indices: np.ndarray | None, votes_of) -> dict:
    """Runs the eval step over `indices` of `source` (None: all of it); votes_of(members, rows) →
    float32 votes [len(members), len(rows)] for a member range and example indices (-1: padding),
    called for the blocks this process's devices hold. Returns the counts summed over batches."""
    m = setup.layout.ensemble_size
    sharding = NamedSharding(setup.mesh, BATCH_SPEC)
    total = None
    for item in eval_batches(source, setup.mesh, setup.config.train.eval_batch_size, indices):

        def block(index, rows=item.rows):
            (m0, m1, _), (r0, r1, _) = index[0].indices(m), index[1].indices(len(rows))
            return votes_of(range(m0, m1), rows[r0:r1])

        votes = jax.make_array_from_callback((m, len(item.rows)), sharding, block, dtype=np.float32)
        counts = jax.tree.map(np.asarray, setup.eval_step(state, item.batch, item.valid, votes))
        total = counts if total is None else jax.tree.map(np.add, total, counts)
    return total


def evaluate(
    setup, state, pruned: frozenset[int] = frozenset(), oob: bool = True
) -> EnsembleQuality | None:
    """None for synthetic data, which has no held-out set worth a quality figure. Pruned members
    still get their own quality but take no part in the ensemble's prediction. Without `oob`
    (evaluations during training) the out-of-bag estimate is skipped."""
    source = setup.datasets.eval if setup.datasets else None
    if source is None:
        return None
    m, workload = setup.layout.ensemble_size, setup.workload
    kept = np.asarray([i not in pruned for i in range(m)])

    def held_out_votes(members: range, rows: np.ndarray) -> np.ndarray:
        return (kept[list(members), None] & (rows >= 0)[None]).astype(np.float32)

    counts = _score(setup, state, source, None, held_out_votes)
    ensemble_details = workload.quality_details(counts.ensemble)
    details = (
        {
            "ensemble": ensemble_details,
            "members": [workload.quality_details(c) for c in counts.members],
        }
        if ensemble_details is not None
        else None
    )
    return EnsembleQuality(
        members=[workload.quality(c) for c in counts.members],
        kept=kept.tolist(),
        ensemble=workload.quality(counts.ensemble),
        examples=len(source),
        oob=out_of_bag(setup, state, kept) if oob else None,
        details=details,
    )


def out_of_bag(setup, state, kept: np.ndarray) -> OutOfBag | None:
    """The out-of-bag quality on the first --oob_examples training examples (0: skipped)."""
    train, sampler = setup.datasets.train, setup.sampler
    subset = min(setup.config.data.oob_examples, len(train))
    if subset == 0:
        return None

    def oob_votes(members: range, rows: np.ndarray) -> np.ndarray:
        valid = rows >= 0
        safe = np.where(valid, rows, 0)
        return np.stack([kept[i] & valid & sampler.out_of_bag(i, safe) for i in members]).astype(
            np.float32
        )

    counts = _score(setup, state, train, np.arange(subset), oob_votes)
    scored = int(counts.scored)
    if scored == 0:
        return OutOfBag(
            None,
            0,
            subset,
            0.0,
            f"every kept member trained on every one of the {subset} examples "
            f"(--bootstrap={sampler.method})",
        )
    return OutOfBag(
        setup.workload.quality(counts.ensemble), scored, subset, float(counts.votes) / scored
    )
