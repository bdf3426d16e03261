"""A check's verdicts: one `Row` per item, measured against an expected figure with its source.

A row is PASS, WARN or FAIL, or n/a: a figure reported but not judged on this backend (host
cores per device on a CPU, whose devices share the cores by design), which neither passes nor
warns. The invariant the whole mode rests on: a row without a measured value is never PASS (a
check that could not measure has not shown the node right). Most rows are judged by `judge`: the
ratio measured / expected against two thresholds; rows whose verdict is a fact rather than a
ratio (a dtype's step stayed finite, the devices are all known) set their status directly, and
the same invariant applies to them. docs/node_check.md lists the rows.
"""

from __future__ import annotations

import dataclasses

PASS, WARN, FAIL, NA = "PASS", "WARN", "FAIL", "n/a"
STATUSES = (PASS, WARN, FAIL, NA)
# The unit a row's figure is shown in, whatever the backend: one unit per quantity, so that
# rows read alike on a laptop and on an H200 (the record keeps the row's own unit).
SHOWN = {"B/s": ("GB/s", 1e9), "FLOP/s": ("TFLOP/s", 1e12), "B": ("GB", 1e9)}
ITEM_WIDTH = 32  # the item column: fixed, so that rows printed as items finish line up


@dataclasses.dataclass(frozen=True)
class Row:
    item: str  # what was checked, e.g. "stream triad per device"
    status: str
    measured: float | None = None
    expected: float | None = None
    unit: str = ""
    source: str = ""  # where `expected` comes from: a datasheet, a figure measured on this class
    note: str = ""  # why the status is what it is, or what was cut down to fit the budget

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r}: expected one of {STATUSES}")
        if self.status == PASS and self.measured is None:
            raise ValueError(f"{self.item}: a row without a measured value cannot PASS")

    @property
    def ratio(self) -> float | None:
        if self.measured is None or not self.expected:
            return None
        return self.measured / self.expected

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "ratio": self.ratio}


def judge(
    item: str,
    measured: float | None,
    expected: float | None,
    *,
    unit: str = "",
    source: str = "",
    pass_at: float = 0.5,
    warn_at: float = 0.1,
    higher_is_better: bool = True,
    note: str = "",
) -> Row:
    """A row judged by ratio = measured / expected.

    higher_is_better: PASS when ratio >= pass_at, WARN when >= warn_at, FAIL below. Otherwise
    (a figure that must stay under its expectation, like memory used over memory available):
    PASS when ratio <= pass_at, WARN when <= warn_at, FAIL above. No measured value: WARN (the
    note says why); no expected value: WARN, the figure stands unjudged.
    """
    if measured is None:
        return Row(item, WARN, None, expected, unit, source, note or "not measured")
    if not expected:
        return Row(item, WARN, measured, None, unit, source, note or "no expected figure")
    ratio = measured / expected
    if higher_is_better:
        status = PASS if ratio >= pass_at else WARN if ratio >= warn_at else FAIL
    else:
        status = PASS if ratio <= pass_at else WARN if ratio <= warn_at else FAIL
    return Row(item, status, measured, expected, unit, source, note)


def skipped(item: str, why: str) -> Row:
    """An item the budget (or the backend) left out: WARN, never PASS."""
    return Row(item, WARN, note=f"skipped: {why}")


def not_judged(item: str, measured: float | None, unit: str, note: str) -> Row:
    """A figure this backend does not judge (n/a): reported, never PASS or WARN."""
    return Row(item, NA, measured, None, unit, "", note)


def exit_code(rows: list[Row]) -> int:
    """0 when no row FAILs, else 1."""
    return 1 if any(r.status == FAIL for r in rows) else 0


def figure(value: float | None, scale: float = 1.0) -> str:
    """A figure in at most 10 characters, without an exponent from 1e-3 up."""
    if value is None:
        return "-"
    value /= scale
    if abs(value) >= 1e4:
        return f"{value:.0f}"
    return f"{value:.4g}"


def shown(row: Row) -> tuple[str, str, str]:
    """(measured, expected, unit) as the table shows them (`SHOWN`)."""
    unit, scale = SHOWN.get(row.unit, (row.unit, 1.0))
    return figure(row.measured, scale), figure(row.expected, scale), unit


def table(rows: list[Row], header: bool = True) -> str:
    """The rows as the command prints them: item, measured, expected, unit, ratio, status, then
    the source and note on the same line. Columns are fixed, so that tables printed item by item
    line up."""
    width = max([len(r.item) for r in rows] + [ITEM_WIDTH])
    lines = []
    if header:
        lines.append(
            f"{'item':{width}}  {'measured':>10}  {'expected':>10}  {'unit':8}  {'ratio':>6}  "
            "status  source / note"
        )
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        tail = "; ".join(t for t in (r.source, r.note) if t)
        measured, expected, unit = shown(r)
        lines.append(
            f"{r.item:{width}}  {measured:>10}  {expected:>10}  {unit:8}  {ratio:>6}  "
            f"{r.status:6}  {tail}"
        )
    return "\n".join(lines)
