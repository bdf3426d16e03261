"""Sub-ensembles of one run (docs/score.md §2, `quality.sub_ensembles`): for every k = 1…M, the ensemble
of the first k members and of random k-subsets, evaluated in the same pass as the ensemble so
that one M-member run gives quality against k without training M runs.

The plan is fixed by (M, draws, seed) alone, so that every process of a job and every
evaluation of a run score the same subsets. Where C(M, k) ≤ draws the plan holds every
k-subset exactly once (the mean and spread are then exact); otherwise `draws` subsets drawn
uniformly with replacement from the k-subsets, seeded by (seed, k).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

DRAWS = 32  # random k-subsets per k where C(M, k) is larger
# Above this M no sub-ensembles are scored: the plan holds up to M × (DRAWS + 1) subsets, and
# each is one more ensemble prediction and reduction over `ensemble` per eval batch.
MAX_MEMBERS = 32


@dataclasses.dataclass(frozen=True)
class SubsetPlan:
    """The distinct subsets scored (`masks` [S, M], 0/1) and, per k, which of them are the
    first k members and which are the k-subsets averaged."""

    masks: np.ndarray
    first: list[int]  # k - 1 → row of masks
    drawn: list[list[int]]  # k - 1 → rows of masks (repeats where drawn twice)
    exhaustive: list[bool]  # k - 1 → every k-subset, each once
    draws: int
    seed: int

    @property
    def members(self) -> int:
        return self.masks.shape[1]


def plan(m: int, seed: int, draws: int = DRAWS) -> SubsetPlan | None:
    """The subsets scored for an M-member ensemble; None above MAX_MEMBERS."""
    if m > MAX_MEMBERS or m < 1:
        return None
    rows: dict[tuple[int, ...], int] = {}

    def row(subset) -> int:
        return rows.setdefault(tuple(sorted(int(i) for i in subset)), len(rows))

    first, drawn, exhaustive = [], [], []
    for k in range(1, m + 1):
        first.append(row(range(k)))
        every = math.comb(m, k) <= draws
        if every:
            subsets = list(itertools.combinations(range(m), k))
        else:
            rng = np.random.default_rng([seed % 2**32, k])
            subsets = [rng.choice(m, size=k, replace=False) for _ in range(draws)]
        drawn.append([row(s) for s in subsets])
        exhaustive.append(every)
    masks = np.zeros((len(rows), m), np.float32)
    for subset, r in rows.items():
        masks[r, list(subset)] = 1.0
    return SubsetPlan(masks, first, drawn, exhaustive, draws, seed)


def summarize(p: SubsetPlan, qualities: list[float | None]) -> list[dict]:
    """One entry per k from the quality of every row of the plan: the first k members', and the
    mean and spread over the k-subsets (sample SD, ddof 1, over random draws; the population's
    SD over an exhaustive set; 0 for a single subset). A subset without a quality (nothing
    scored: its members all pruned) is left out of the mean."""
    out = []
    for k in range(1, p.members + 1):
        values = [qualities[r] for r in p.drawn[k - 1] if qualities[r] is not None]
        exhaustive = p.exhaustive[k - 1]
        ddof = 0 if exhaustive else 1
        out.append(
            {
                "k": k,
                "first": qualities[p.first[k - 1]],
                "random_mean": float(np.mean(values)) if values else None,
                "random_sd": float(np.std(values, ddof=ddof)) if len(values) > ddof else 0.0,
                "subsets": len(values),
                "exhaustive": exhaustive,
            }
        )
    return out
