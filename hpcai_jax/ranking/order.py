"""The list's order (docs/ranking.md, "Rules"): one table per workload × division × category,
ranked by VFLOPS, ties broken by FLOPS, then time to target (none: last), then result ID; by
default the best entry per system (IO500's rule), each with the spread of its configuration's
repeats on that system; with `--all` every entry."""

from __future__ import annotations

import math
from typing import NamedTuple

from hpcai_jax.ranking.entries import Entry

DIVISIONS = ("closed", "open")
CATEGORIES = ("available", "preview", "research")
TIE_BREAKS = "VFLOPS, then FLOPS, then the shorter time to target (none last), then result ID"


def key(e: Entry) -> tuple:
    ttt = e.time_to_target_s if e.time_to_target_s is not None else math.inf
    return (-e.vflops, -e.flops, ttt, e.result_id)


def _index(value: str, known: tuple[str, ...]) -> tuple[int, str]:
    return (known.index(value) if value in known else len(known), value)


class Row(NamedTuple):
    rank: int
    entry: Entry
    repeats: tuple[Entry, ...]  # the entries of its configuration on its system, itself among them

    @property
    def spread(self) -> tuple[float, float] | None:
        """(lowest, highest) VFLOPS of the repeats, where there are several."""
        if len(self.repeats) < 2:
            return None
        values = [r.vflops for r in self.repeats]
        return (min(values), max(values))


class Table(NamedTuple):
    workload: str
    division: str
    category: str
    rows: tuple[Row, ...]

    @property
    def title(self) -> str:
        return f"{self.workload}, {self.division} division, {self.category}"


class NotListed(NamedTuple):
    package: str
    why: str


class Ranking(NamedTuple):
    tables: tuple[Table, ...]
    not_listed: tuple[NotListed, ...]
    entries: tuple[Entry, ...]  # every entry of every listed package, by result ID
    all_runs: bool


def _system(e: Entry) -> tuple[str, str]:
    return (e.organisation, e.system)


def rows(entries: list[Entry], all_runs: bool) -> tuple[Row, ...]:
    """One table's rows, ranked: each entry with its repeats (same system, same configuration);
    without `all_runs`, only each system's best."""
    ranked = sorted(entries, key=key)
    shown, best_of = [], set()
    for e in ranked:
        if all_runs or _system(e) not in best_of:
            shown.append(e)
            best_of.add(_system(e))
    out = []
    for rank, e in enumerate(shown, 1):
        same = [
            r for r in ranked if _system(r) == _system(e) and r.configuration == e.configuration
        ]
        out.append(Row(rank, e, tuple(same)))
    return tuple(out)


def build(entries: list[Entry], not_listed: list[NotListed], all_runs: bool) -> Ranking:
    """The list from every entry of the listed packages."""
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.table, []).append(e)
    order = sorted(
        groups,
        key=lambda t: (t[0], _index(t[1], DIVISIONS), _index(t[2], CATEGORIES)),
    )
    tables = tuple(Table(*t, rows(groups[t], all_runs)) for t in order)
    return Ranking(
        tables,
        tuple(sorted(not_listed)),
        tuple(sorted(entries, key=lambda e: e.result_id)),
        all_runs,
    )
