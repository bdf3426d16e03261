"""Paired tests over held-out examples (hpcai_jax/report/paired.py) against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcai_jax.bits import pack_bits
from hpcai_jax.records import train
from hpcai_jax.report import paired


def pairs(only_a: int, only_b: int, both: int = 0, neither: int = 0):
    """Verdict vectors with the given counts of each kind of example."""
    a = [1] * only_a + [0] * only_b + [1] * both + [0] * neither
    b = [0] * only_a + [1] * only_b + [1] * both + [0] * neither
    return np.array(a, bool), np.array(b, bool)


@pytest.mark.parametrize(
    "only_a, only_b, p",
    [
        (5, 0, 2 / 32),  # n = 5, P(X ≤ 0) = 1/32, doubled
        (9, 1, 22 / 1024),  # n = 10, P(X ≤ 1) = (1 + 10) / 1024
        (1, 9, 22 / 1024),  # symmetric
        (3, 3, 1.0),  # 2 × 42/64 > 1: capped
        (0, 0, 1.0),  # no discordant example
        (0, 1, 1.0),  # n = 1: 2 × 1/2
    ],
)
def test_mcnemar_exact_against_hand_computed_tails(only_a, only_b, p):
    a, b = pairs(only_a, only_b, both=7, neither=4)  # concordant examples change nothing
    b01, b10, got = paired.mcnemar(a, b)
    assert (b01, b10) == (only_b, only_a)
    assert got == pytest.approx(p, rel=1e-12)


def test_mcnemar_mid_p_and_a_large_case():
    a, b = pairs(9, 1)
    assert paired.mcnemar(a, b, mid_p=True)[2] == pytest.approx(12 / 1024)  # 2 × (11 − 10/2)/1024
    # 60 against 40 of 100 discordant: against the tail summed with lgamma in floats.
    a, b = pairs(60, 40, both=9000)
    tail = sum(
        math.exp(math.lgamma(101) - math.lgamma(i + 1) - math.lgamma(101 - i) - 100 * math.log(2))
        for i in range(41)
    )
    assert paired.mcnemar(a, b)[2] == pytest.approx(2 * tail, rel=1e-9)
    assert 0.05 < 2 * tail < 0.06  # the textbook p ≈ 0.057


def test_mcnemar_refuses_unpaired_vectors():
    with pytest.raises(ValueError, match="equal"):
        paired.mcnemar(np.ones(3, bool), np.ones(4, bool))


def test_paired_bootstrap_interval():
    same = np.array([1, 0, 1, 1], bool)
    assert paired.paired_bootstrap(same, same, 200, seed=0) == (0.0, 0.0, 0.0)
    assert paired.paired_bootstrap(np.ones(50, bool), np.zeros(50, bool), 200, 0) == (1, 1, 1)
    a, b = pairs(300, 200, both=7000, neither=2500)  # n = 10,000, difference 0.01
    mean, lo, hi = paired.paired_bootstrap(a, b, 4000, seed=1)
    assert mean == pytest.approx(0.01)
    d = a.astype(float) - b.astype(float)
    half = 1.96 * d.std() / math.sqrt(len(d))  # the normal approximation's half-width
    assert lo < mean < hi
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)
    assert paired.paired_bootstrap(a, b, 4000, seed=1) == (mean, lo, hi)  # seeded


def test_verdicts_from_a_record_section():
    ensemble, members = np.arange(13) % 3 == 0, [np.arange(13) % 2 == 0]
    correct = train.Correct(
        examples=13,
        order_sha256="ab",
        ensemble=pack_bits(ensemble),
        members=[pack_bits(m) for m in members],
    )
    got, got_members = paired.verdicts(correct)
    np.testing.assert_array_equal(got, ensemble)
    np.testing.assert_array_equal(got_members[0], members[0])
    other = train.Correct(examples=13, order_sha256="cd", ensemble="", members=[])
    assert paired.comparable(correct, correct) and not paired.comparable(correct, other)
