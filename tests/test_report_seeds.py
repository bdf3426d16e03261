"""The tests across seeds (hpcai_jax/report/seeds.py) on made-up numbers, against scipy where
it is installed and against hand arithmetic where it is not."""

from __future__ import annotations

import math

import pytest

from hpcai_jax.report import seeds

A = [0.8544, 0.8563, 0.8544, 0.8551, 0.8570]
B = [0.8517, 0.8540, 0.8490, 0.8530, 0.8561]


def test_t_distribution_against_hand_values():
    """t with 1 degree of freedom is Cauchy: P(T ≤ 1) = 3/4; with 2, P(T ≤ t) = 1/2 + t /
    (2 √(2 + t²)); the 0.975 quantiles of the repeats table (report/repeats.T_975)."""
    assert seeds.t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)
    assert seeds.t_cdf(0.0, 7) == pytest.approx(0.5, abs=1e-12)
    for t in (-3.0, 0.5, 2.0):
        assert seeds.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert seeds.t_ppf(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert seeds.t_ppf(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert seeds.t_ppf(0.80, 4) == pytest.approx(0.9410, abs=1e-4)  # any t table


def test_welch_and_paired_against_hand_arithmetic():
    """Two runs a side, spreads chosen for whole numbers: a = (1, 3), b = (0, 0): difference 2,
    se = √(2 / 2) = 1, df = 1 (Welch–Satterthwaite: 1² / (1² / 1)), t = 2, p = 2 × (1/2 −
    atan(2) / π); paired: differences (1, 3), the same t on 1 degree of freedom."""
    w = seeds.welch([1.0, 3.0], [0.0, 0.0])
    assert (w.diff, w.t, w.df) == pytest.approx((2.0, 2.0, 1.0))
    assert w.p == pytest.approx(1 - 2 * math.atan(2) / math.pi, abs=1e-9)
    assert (w.low, w.high) == pytest.approx((2 - 12.7062, 2 + 12.7062), abs=1e-3)
    p = seeds.paired_t([1.0, 3.0], [0.0, 0.0])
    assert (p.diff, p.t, p.df) == pytest.approx((2.0, 2.0, 1.0))
    assert p.detectable == pytest.approx(12.7062 + 1.3764, abs=1e-3)  # (t_.975 + t_.8) × 1
    assert seeds.welch([1.0], [0.0, 1.0]).p is None and seeds.paired_t([1.0], [0.0]).t is None


def test_welch_and_paired_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    w = seeds.welch(A, B)
    ref = stats.ttest_ind(A, B, equal_var=False)
    assert (w.t, w.p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-9)
    p = seeds.paired_t(A, B)
    ref = stats.ttest_rel(A, B)
    assert (p.t, p.p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-9)
    d = [x - y for x, y in zip(A, B, strict=True)]
    half = stats.t.ppf(0.975, 4) * stats.sem(d)
    assert (p.low, p.high) == pytest.approx((p.diff - half, p.diff + half), rel=1e-9)
    shift = (stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * stats.sem(d)
    assert p.detectable == pytest.approx(shift, rel=1e-9)
    for df in (1, 2.5, 4, 30, 200):
        for q in (0.6, 0.8, 0.975):
            assert seeds.t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), abs=1e-9)


def test_reading_says_the_difference_or_the_bound():
    shown = seeds.paired_t(A, B)  # differences 0.27 to 0.54 points, p < 0.05
    assert shown.p < 0.05
    assert seeds.reading(shown).startswith(f"a difference of +{shown.diff * 100:.2f} points (")
    noisy = seeds.paired_t([0.85, 0.86, 0.84], [0.851, 0.853, 0.849])
    assert noisy.p > 0.05
    text = seeds.reading(noisy)
    bound = max(-noisy.low, noisy.high) * 100
    assert text.startswith(f"no difference larger than {bound:.2f} points: {noisy.diff * 100:+.2f}")
    assert text.endswith(f"; 80 % power at {noisy.detectable * 100:.2f}")
    assert seeds.reading(seeds.welch([0.8], [0.8])) == "too few runs for a test"
