"""The list's columns (docs/ranking.md, "Columns"), as text for ranking.md and index.html and as
values for ranking.csv and ranking.json; and the sentence that cites a result."""

from __future__ import annotations

from typing import NamedTuple

from hpcai_jax.ranking import BENCHMARK
from hpcai_jax.ranking.entries import Entry
from hpcai_jax.ranking.order import Row
from hpcai_jax.units import formatted, si


class Meta(NamedTuple):
    """What the list says of itself: its date (none unless given) and whether its entries are
    CPU examples, not systems."""

    date: str | None = None
    cpu_examples: bool = False


CPU_EXAMPLES = (
    "CPU examples, not systems: these entries are tiny runs on forced CPU devices of one host, "
    "made to show the list; their figures rank nothing."
)


def accelerators(e: Entry) -> str:
    return f"{e.devices} × {e.device_kind}"


def target(e: Entry) -> str:
    return f"{e.target:g} ({'official' if e.target_official else 'not official'})"


def repeats(row: Row) -> str:
    spread = row.spread
    if spread is None:
        return "1"
    return f"{len(row.repeats)}: {si(spread[0], 'FLOP/s')} to {si(spread[1], 'FLOP/s')}"


def triad(e: Entry) -> str:
    return formatted(e.triad_gb_s_per_device, "{:.2f}")


HEAD = (
    "rank",
    "result ID",
    "system",
    "organisation",
    "accelerators",
    "Sys_scale",
    "M",
    "P_degree",
    "FLOPS (Eq. 6)",
    "VFLOPS",
    "quality",
    "target",
    "penalty",
    "time to target [s]",
    "STREAM Triad per device [GB/s]",
    "software",
    "date",
    "level",
    "repeats (VFLOPS spread)",
)


def cells(row: Row) -> list[str]:
    """One row's cells as text, in HEAD's order."""
    e = row.entry
    return [
        str(row.rank),
        e.result_id,
        e.system,
        e.organisation,
        accelerators(e),
        str(e.devices),
        str(e.ensemble_size),
        str(e.parallel_degree),
        si(e.flops, "FLOP/s"),
        si(e.vflops, "FLOP/s"),
        f"{formatted(e.quality, '{:.4f}')} {e.metric}",
        target(e),
        formatted(e.penalty),
        formatted(e.time_to_target_s, "{:.1f}"),
        triad(e),
        e.software,
        e.date,
        e.level,
        repeats(row),
    ]


def cite(e: Entry, meta: Meta) -> str:
    """The sentence a reader cites a result with: version, division, category, ID (as MLPerf's
    rule asks), and where it was listed."""
    when = f" of {meta.date}" if meta.date else ""
    return (
        f"{BENCHMARK} {e.workload}, {e.division} division, {e.category} category, result "
        f"{e.result_id}: {si(e.vflops, 'FLOP/s')} VFLOPS on {accelerators(e)} ({e.system}, "
        f"{e.organisation}), verification level {e.level}; hpcai_jax.ranking list{when}."
    )
