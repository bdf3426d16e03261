"""The collective rows: one per (axis, collective), judged on its bandwidth plateau, and failed by
a data check that found a wrong element. docs/node_check.md, Collectives, states the rule.

The plateau, not the largest size: one size's figure is one sample of a noisy link (on a shared
host a dip of 3x at the largest size is common), and small sizes measure latency, not bandwidth.
A slow link cannot make one size faster than the link allows, so the sizes near the best figure
are the link's: the row's figure is the median busbw of the PLATEAU_SIZES largest sizes whose
busbw is at least PLATEAU_WITHIN of the best size's (each size's busbw the better of out of place
and in place).
"""

from __future__ import annotations

import dataclasses
import statistics

import jax

from hpcai_jax.nodecheck import expectations
from hpcai_jax.nodecheck.collectives import OPS, Point, human_size
from hpcai_jax.nodecheck.compute import CPU_PASS, CPU_WARN
from hpcai_jax.nodecheck.rows import FAIL, Row, judge

PLATEAU_SIZES = 4
PLATEAU_WITHIN = 0.5
# Collectives judged against a datasheet link; on a CPU against the machine-class figures.
LINK_PASS, LINK_WARN = 0.5, 0.1


@dataclasses.dataclass(frozen=True)
class Plateau:
    busbw: float  # bytes/s: the median of `sizes`' figures
    sizes: tuple[int, ...]  # bytes, ascending: the sizes it is the median of
    best: float  # bytes/s: the best size's figure
    best_size: int


def plateau(points: list[tuple[int, float]]) -> Plateau:
    """The plateau of (size in bytes, busbw) points: see the module's docstring."""
    best_size, best = max(points, key=lambda p: p[1])
    near = sorted(p for p in points if p[1] >= PLATEAU_WITHIN * best)[-PLATEAU_SIZES:]
    return Plateau(
        statistics.median(b for _, b in near), tuple(s for s, _ in near), best, best_size
    )


def _sizes(sizes: tuple[int, ...]) -> str:
    low, high = human_size(sizes[0]), human_size(sizes[-1])
    return low if low == high else f"{low} to {high}"


def _expected(axis: str, op: str, sizes: tuple[int, ...], kind: str, backend: str):
    """(expected bytes/s or None, its source, thresholds) for one row."""
    if backend == "cpu":
        figures = [expectations.cpu_busbw(axis, op, s, jax.process_count()) for s in sizes]
        if None in figures:
            return None, "no CPU figure for this axis", {}
        thresholds = {"pass_at": CPU_PASS, "warn_at": CPU_WARN}
        return statistics.median(figures), expectations.CPU_SOURCE, thresholds
    if axis == "intra_node":
        link = expectations.link_bandwidth(kind)
        if not link:
            return None, f"no link datasheet for {kind!r}", {}
        return link[0], link[1], {"pass_at": LINK_PASS, "warn_at": LINK_WARN}
    return None, "the network between nodes has no datasheet here", {}


def row(at: list[Point], kind: str, backend: str, cut: str = "") -> Row:
    """One (axis, collective)'s row from its points."""
    first = at[0]
    item = f"{first.op} busbw {first.axis}"
    top = plateau([(p.size_bytes, p.best_busbw) for p in at])
    note = (
        f"plateau: median of {len(top.sizes)} size{'s' if len(top.sizes) > 1 else ''} "
        f"{_sizes(top.sizes)} "
        f"(best {top.best / 1e9:.3g} GB/s at {human_size(top.best_size)}; "
        f"{len(at)} sizes), n = {first.n}" + (f"; {cut}" if cut else "")
    )
    expected, source, thresholds = _expected(first.axis, first.op, top.sizes, kind, backend)
    wrong = {p.size_bytes: p.wrong + p.in_place_wrong for p in at if p.wrong + p.in_place_wrong}
    if wrong:
        where = ", ".join(f"{n} at {human_size(s)}" for s, n in wrong.items())
        return Row(item, FAIL, top.busbw, expected, "B/s", source, f"data check: wrong {where}")
    return judge(item, top.busbw, expected, unit="B/s", source=source, note=note, **thresholds)


def collective_rows(points: list[Point], kind: str, backend: str, cut: dict[str, str]) -> list[Row]:
    """One row per (axis, collective), axes in the order measured."""
    rows = []
    for axis in dict.fromkeys(p.axis for p in points):
        for op in OPS:
            at = [p for p in points if p.axis == axis and p.op == op]
            if at:
                rows.append(row(at, kind, backend, cut.get(axis, "")))
    return rows
