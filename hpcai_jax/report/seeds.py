"""Tests across seeds: what training noise says about a difference between two points of the
paper's plan, where each seed is one draw of a whole training run (docs/paper.md, Controls).

Welch's t test compares two points' runs unpaired (their seeds independent); the paired t test
compares the runs of two points seed index by seed index (the bagging pairs share every seed);
the smallest difference a paired design detects at 80 % power is stated beside its result, so
that "no difference shown" reads as "no difference larger than X".

Plain arithmetic, no scipy (not a dependency of the report): Student's t distribution through
the regularised incomplete beta function (Lentz's continued fraction), its quantiles by
bisection; tests/test_report_seeds.py checks both against scipy.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

ALPHA = 0.05
POWER = 0.80
_EPS = 1e-15
_ITERATIONS = 300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, _ITERATIONS):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function, for 0 ≤ x ≤ 1."""
    if x <= 0.0 or x >= 1.0:
        return max(0.0, min(1.0, x))
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )  # fmt: skip
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` (> 0, not necessarily whole) degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The q quantile of Student's t (0 < q < 1), by bisection on `t_cdf`."""
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < q else (low, mid)
    return (low + high) / 2


@dataclasses.dataclass(frozen=True)
class Test:
    """A difference a − b across seeds: its estimate, the 95 % interval, t, the degrees of
    freedom and the two-sided p; `detectable`, for a paired test, the smallest true difference
    it detects with 80 % power at α = 0.05. None where the runs are too few."""

    n_a: int
    n_b: int
    diff: float | None = None
    low: float | None = None
    high: float | None = None
    t: float | None = None
    df: float | None = None
    p: float | None = None
    detectable: float | None = None


def _two_sided(t: float, df: float) -> float:
    return min(1.0, 2 * t_cdf(-abs(t), df))


def welch(a: list[float], b: list[float]) -> Test:
    """Welch's unequal-variance t test of mean(a) − mean(b), the Welch–Satterthwaite degrees of
    freedom; needs two runs on each side."""
    if len(a) < 2 or len(b) < 2:
        return Test(len(a), len(b))
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Test(len(a), len(b), diff)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_ppf(1 - ALPHA / 2, df) * se
    t = diff / se
    return Test(len(a), len(b), diff, diff - half, diff + half, t, df, _two_sided(t, df))


def paired_t(a: list[float], b: list[float]) -> Test:
    """The paired t test of a − b over pairs (a[i], b[i]), with the smallest difference the
    design detects at 80 % power: (t_{1−α/2, n−1} + t_{power, n−1}) × sd / √n (the usual
    approximation, the noncentral t's shift); needs two pairs."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    n = len(d)
    if n < 2:
        return Test(n, n, d[0] if d else None)
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    df = n - 1
    crit = t_ppf(1 - ALPHA / 2, df)
    se = sd / math.sqrt(n)
    detectable = (crit + t_ppf(POWER, df)) * se
    if se == 0:
        return Test(n, n, mean, mean, mean, None, df, None, detectable)
    t = mean / se
    return Test(
        n, n, mean, mean - crit * se, mean + crit * se, t, df, _two_sided(t, df), detectable
    )


def reading(test: Test, points: float = 100.0) -> str:
    """The result in words, in points of accuracy (× `points`): "a difference of Y (interval)"
    where p < α; else "no difference larger than X points", X the interval's farther end (what
    the runs rule out), with the difference the design detects at 80 % power beside it."""
    if test.diff is None or test.low is None:
        return "too few runs for a test"
    shown = (
        f"{test.diff * points:+.2f} points ({test.low * points:+.2f} to {test.high * points:+.2f})"
    )
    if test.p is not None and test.p < ALPHA:
        return f"a difference of {shown}"
    bound = max(-test.low, test.high) * points
    power = "" if test.detectable is None else f"; 80 % power at {test.detectable * points:.2f}"
    return f"no difference larger than {bound:.2f} points: {shown}{power}"
