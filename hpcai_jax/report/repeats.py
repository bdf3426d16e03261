"""Repeats: the runs of one configuration that differ only in their seed (a sweep's --repeats),
and what their figures say together. The statistics and their why: docs/score.md §9, Repeats.

Plain arithmetic, no scipy (not a dependency of the report): the Student-t quantile is a table
for 1 to 30 degrees of freedom and a Cornish-Fisher expansion beyond.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable

from hpcai_jax.report.collect import SEED, Record, configuration_fields, flatten
from hpcai_jax.units import number

# t_{0.975, df} for df = 1..30, to 4 decimals (any statistics table; scipy.stats.t.ppf agrees,
# tests/test_repeats.py).
T_975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
Z_975 = 1.959964  # the standard normal's 0.975 quantile: t's limit as df grows
OLYMPIC_FROM = 5  # MLPerf's olympic mean: the best and the worst run dropped, from 5 runs


def t_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom: the table up to 30, then
    Cornish-Fisher's expansion around the normal quantile (within 1e-4 of the exact value)."""
    if df < 1:
        raise ValueError(f"t quantile: expected df >= 1, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclasses.dataclass(frozen=True)
class Summary:
    """One figure over a configuration's runs: N runs that have it, their mean, sample standard
    deviation (n − 1), range, the mean's 95 % Student-t interval and the olympic mean. What N
    is too small for is None (spread and interval under 2 runs, olympic mean under 5)."""

    n: int
    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    olympic: float | None = None

    @property
    def half_width(self) -> float | None:
        """The interval's half width: t_{0.975, n − 1} × std / √n."""
        return None if self.ci_high is None else self.ci_high - self.mean


def summarise(values: Iterable) -> Summary:
    """The Summary of the figures in `values`; a missing or non-finite one is left out of N."""
    xs = [v for v in map(number, values) if v is not None and math.isfinite(v)]
    n = len(xs)
    if not n:
        return Summary(0)
    mean = statistics.fmean(xs)
    std = half = olympic = None
    if n >= 2:
        std = statistics.stdev(xs)
        half = t_975(n - 1) * std / math.sqrt(n)
    if n >= OLYMPIC_FROM:
        olympic = statistics.fmean(sorted(xs)[1:-1])
    return Summary(
        n=n,
        mean=mean,
        std=std,
        low=min(xs),
        high=max(xs),
        ci_low=None if half is None else mean - half,
        ci_high=None if half is None else mean + half,
        olympic=olympic,
    )


@dataclasses.dataclass(frozen=True)
class Group:
    """The runs of one configuration, and the report's four figures summarised over them."""

    m: int
    p: int
    p_model: int
    sys_scale: int
    run_ids: tuple[str, ...]
    seeds: tuple
    flops: Summary
    vflops: Summary
    quality: Summary
    time_to_target: Summary


def _key(fields: dict, shared: set) -> str:
    return json.dumps({k: fields[k] for k in sorted(shared)}, sort_keys=True, default=str)


def groups(records: list[Record]) -> list[Group]:
    """The training runs by configuration (fields every run has, as the report's majority
    compares them), sorted by Sys_scale, M and P_degree; runs by run id inside a group."""
    if not records:
        return []
    fields = [configuration_fields(r.record) for r in records]
    shared = set.intersection(*(set(f) for f in fields))
    by_key: dict[str, list[Record]] = {}
    for r, f in zip(records, fields, strict=True):
        by_key.setdefault(_key(f, shared), []).append(r)
    out = []
    for runs in by_key.values():
        runs = sorted(runs, key=lambda r: r.run_id)
        mesh = runs[0].record.mesh
        out.append(
            Group(
                m=int(mesh.ensemble_size),
                p=int(mesh.parallel_degree),
                p_model=1 if mesh.model_parallel is None else int(mesh.model_parallel),
                sys_scale=int(mesh.num_devices),
                run_ids=tuple(r.run_id for r in runs),
                seeds=tuple(flatten(r.record.config or {}).get(SEED) for r in runs),
                flops=summarise(r.record.metrics.flops_per_s for r in runs),
                vflops=summarise(r.record.metrics.vflops_per_s for r in runs),
                quality=summarise(r.record.quality.ensemble for r in runs),
                time_to_target=summarise(r.record.time_to_target_s for r in runs),
            )
        )
    return sorted(out, key=lambda g: (g.sys_scale, g.m, g.p, g.run_ids))


def repeated(found: list[Group]) -> list[Group]:
    """The configurations run more than once: the ones a summary has something to say about."""
    return [g for g in found if len(g.run_ids) > 1]
