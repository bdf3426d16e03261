"""Paired tests over the held-out examples (docs/score.md §2, `quality.correct`): two models
scored on the same examples are compared example by example, which is far more sensitive than
comparing their two accuracies as if independent: only the examples where they disagree carry
information.

Plain arithmetic, no scipy (not a dependency of the report): McNemar's exact test is the
binomial tail computed with whole numbers, the bootstrap a multinomial over the three kinds of
example (a right only, both or neither, b right only).
"""

from __future__ import annotations

import math

import numpy as np

from hpcai_jax.bits import unpack_bits


def _binomial_tail(k: int, n: int) -> float:
    """P(X ≤ k) for X ~ Binomial(n, 1/2), exactly: whole numbers until one division."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def mcnemar(a_correct, b_correct, mid_p: bool = False) -> tuple[int, int, float]:
    """(b01, b10, p): b01 examples only b gets right, b10 only a; p of McNemar's exact test,
    two-sided (twice the smaller binomial tail at 1/2 among the b01 + b10 discordant examples,
    at most 1). `mid_p`: the mid-p variant, which counts half the observed outcome's own
    probability (less conservative; Fagerland et al. 2013)."""
    a, b = _verdicts(a_correct, b_correct)
    b01, b10 = int(np.sum(~a & b)), int(np.sum(a & ~b))
    n, k = b01 + b10, min(b01, b10)
    if n == 0:
        return b01, b10, 1.0
    tail = _binomial_tail(k, n)
    if mid_p:
        tail -= math.comb(n, k) / 2**n / 2
    return b01, b10, min(1.0, 2 * tail)


def paired_bootstrap(a_correct, b_correct, draws: int, seed: int) -> tuple[float, float, float]:
    """(accuracy of a − accuracy of b, and its 95 % percentile interval) over `draws` resamples
    of the examples with replacement, each example keeping both its verdicts. A resample's
    difference depends only on how many drawn examples are of each kind, so it is drawn as one
    multinomial over the three kinds: the same distribution as resampling indices, in O(draws)."""
    a, b = _verdicts(a_correct, b_correct)
    n = len(a)
    d = a.astype(np.int64) - b.astype(np.int64)
    kinds = np.array([np.sum(d == -1), np.sum(d == 0), np.sum(d == 1)]) / n
    counts = np.random.default_rng(seed).multinomial(n, kinds, size=draws)
    diffs = (counts[:, 2] - counts[:, 0]) / n
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def _verdicts(a, b) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(
            f"paired verdicts need two equal, non-empty 1-D vectors: {a.shape} {b.shape}"
        )
    return a, b


def verdicts(correct) -> tuple[np.ndarray, list[np.ndarray]]:
    """(ensemble [n], members [M × n]) from a record's `quality.correct`."""
    n = correct.examples
    return unpack_bits(correct.ensemble, n), [unpack_bits(m, n) for m in correct.members]


def comparable(a, b) -> bool:
    """Two records' `quality.correct` pair up: the same examples in the same order."""
    return a.examples == b.examples and a.order_sha256 == b.order_sha256
