"""The collective rows: one per (axis, collective), judged only on its bandwidth plateau, and
failed by a data check that found a wrong element. docs/node_check.md, Collectives, states the
rule.

A figure at sizes that measure latency proves nothing about a link, so a row is judged only where
the curve has flattened: each size's busbw is the better of out of place and in place; the
plateau is the sizes whose busbw is within PLATEAU_WITHIN of the best size's; the row is judged
when the largest size measured is at least `min_plateau_bytes`, at least PLATEAU_MIN_POINTS sizes
are on the plateau, and the plateau reaches one of the two largest sizes measured (a peak among
small sizes is noise). Its figure is then the median busbw of the PLATEAU_SIZES largest plateau
sizes (a dip at the largest size, common on a shared host, does not move it). Otherwise the row
is WARN, `not judged: <why>`: never PASS, never FAIL (a wrong element still FAILs it).
"""

from __future__ import annotations

import dataclasses
import statistics

import jax

from hpcai_jax.nodecheck import collectives, expectations
from hpcai_jax.nodecheck.collectives import MIN_BYTES, OPS, Point, human_size
from hpcai_jax.nodecheck.compute import CPU_PASS, CPU_WARN
from hpcai_jax.nodecheck.rows import FAIL, WARN, Row, judge

PLATEAU_SIZES = 4
PLATEAU_WITHIN = 0.25  # a size is on the plateau when its busbw is at least 75 % of the best
PLATEAU_MIN_POINTS = 2
# The largest size a run must reach for its plateau to mean anything: past the last-level cache
# on a CPU host, past the latency-bound sizes of NVLink and ICI on an accelerator.
MIN_PLATEAU_BYTES = {"cpu": 1 << 20}
MIN_PLATEAU_BYTES_ACCELERATOR = 64 << 20
# Collectives judged against a datasheet link; on a CPU against the reference-machine figures.
LINK_PASS, LINK_WARN = 0.5, 0.1


def min_plateau_bytes(backend: str) -> int:
    return MIN_PLATEAU_BYTES.get(backend, MIN_PLATEAU_BYTES_ACCELERATOR)


@dataclasses.dataclass(frozen=True)
class Plateau:
    busbw: float | None  # bytes/s: the median of `sizes`' figures; None when not judged
    sizes: tuple[int, ...]  # bytes, ascending: the sizes it is the median of
    best: float  # bytes/s: the best size's figure
    best_size: int
    why_not: str = ""  # why the curve is not judged ("" when it is)


def _why_not(points: list[tuple[int, float]], near: list[tuple[int, float]], min_bytes: int):
    """Why the curve `points` with plateau `near` cannot be judged, or ""."""
    sizes = sorted(s for s, _ in points)
    largest, (best_size, best) = sizes[-1], max(points, key=lambda p: p[1])
    within = f"{PLATEAU_WITHIN:.0%} of the best ({best / 1e9:.3g} GB/s at {human_size(best_size)})"
    reasons = []
    if len(sizes) == 1:
        reasons.append(f"one size measured ({human_size(largest)}): no curve")
    elif len(near) < PLATEAU_MIN_POINTS and best_size == largest:
        reasons.append(f"curve still rising at the largest size measured ({human_size(largest)})")
    elif len(near) < PLATEAU_MIN_POINTS:
        reasons.append(f"no plateau: {len(near)} size within {within}")
    elif near[-1][0] not in sizes[-2:]:
        reasons.append(
            f"no plateau at the large sizes: the sizes within {within} end at "
            f"{human_size(near[-1][0])}"
        )
    if largest < min_bytes:
        reasons.append(
            f"largest size measured {human_size(largest)}, below the {human_size(min_bytes)} "
            "a plateau needs"
        )
    return "; ".join(reasons)


def plateau(points: list[tuple[int, float]], min_bytes: int = MIN_BYTES) -> Plateau:
    """The plateau of (size in bytes, busbw) points: see the module's docstring. `min_bytes`:
    the largest size a judged curve must reach."""
    best_size, best = max(points, key=lambda p: p[1])
    near = sorted(p for p in points if p[1] >= (1 - PLATEAU_WITHIN) * best)
    why_not = _why_not(points, near, min_bytes)
    if why_not:
        return Plateau(None, (), best, best_size, why_not)
    near = near[-PLATEAU_SIZES:]
    return Plateau(
        statistics.median(b for _, b in near), tuple(s for s, _ in near), best, best_size
    )


def _sizes(sizes: tuple[int, ...]) -> str:
    return ", ".join(human_size(s) for s in sizes)


def _expected(axis: str, op: str, sizes: tuple[int, ...], kind: str, backend: str):
    """(expected bytes/s or None, its source, thresholds) for one row."""
    if backend == "cpu":
        figures = [expectations.cpu_busbw(axis, op, s, jax.process_count()) for s in sizes]
        if None in figures:
            return None, f"no reference-machine figure for {op} on {axis}", {}
        thresholds = {"pass_at": CPU_PASS, "warn_at": CPU_WARN}
        return statistics.median(figures), expectations.CPU_SOURCE, thresholds
    if axis == "intra_node":
        link = expectations.link_bandwidth(kind)
        if not link:
            return None, f"no link datasheet for {kind!r}", {}
        return link[0], link[1], {"pass_at": LINK_PASS, "warn_at": LINK_WARN}
    return None, "the network between nodes has no datasheet here", {}


def _note(top: Plateau, at: list[Point], cut: str, backend: str) -> str:
    """The row's note: the sizes the figure is the median of (or why it is not judged), the best
    size, the sizes measured, n, what the budget cut; broadcast's root, and how it ran."""
    first, largest = at[0], max(p.size_bytes for p in at)
    best = f"best {top.best / 1e9:.3g} GB/s at {human_size(top.best_size)}"
    measured = f"{len(at)} size{'s' if len(at) > 1 else ''} to {human_size(largest)}"
    if top.why_not:
        head = f"not judged: {top.why_not} ({best}; {measured})"
    else:
        many = len(top.sizes) > 1
        head = (
            f"plateau: median of {len(top.sizes)} size{'s' if many else ''} "
            f"{_sizes(top.sizes)} (within {PLATEAU_WITHIN:.0%} of the {best}; {measured})"
        )
    extra = [f"n = {first.n}"]
    if first.op == "broadcast":
        extra.append(f"root {collectives.ROOT}")
        if backend != "gpu":
            extra.append(f"run as a sum of the root's buffer and zeros (no broadcast on {backend})")
    return "; ".join([head, *extra, *([cut] if cut else [])])


def row(at: list[Point], kind: str, backend: str, cut: str = "") -> Row:
    """One (axis, collective)'s row from its points: FAIL on a wrong element, WARN (not judged)
    without a plateau, else judged on the plateau's figure."""
    first = at[0]
    item = f"{first.op} busbw {first.axis}"
    top = plateau([(p.size_bytes, p.best_busbw) for p in at], min_plateau_bytes(backend))
    note = _note(top, at, cut, backend)
    sizes = top.sizes or (max(p.size_bytes for p in at),)
    expected, source, thresholds = _expected(first.axis, first.op, sizes, kind, backend)
    wrong = {p.size_bytes: p.wrong + p.in_place_wrong for p in at if p.wrong + p.in_place_wrong}
    if wrong:
        where = ", ".join(f"{n} at {human_size(s)}" for s, n in wrong.items())
        measured = top.busbw if top.busbw is not None else top.best
        return Row(item, FAIL, measured, expected, "B/s", source, f"data check: wrong {where}")
    if top.busbw is None:  # the best figure, shown; no expected one, so no ratio
        return Row(item, WARN, top.best, None, "B/s", "", note)
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
