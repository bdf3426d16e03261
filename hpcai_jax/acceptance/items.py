"""An acceptance item: one figure, the reference it is judged against, and the verdict.

Items come from two places: the node check's rows (`from_row`, which keeps the row's verdict
and says where its expected figure comes from), and facts this package reads itself (versions,
drivers), whose verdict is set directly.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.nodecheck.rows import FAIL, PASS, STATUSES, WARN, Row
from hpcai_jax.units import si

__all__ = [
    "FAIL",
    "PASS",
    "WARN",
    "Item",
    "failure_item",
    "from_row",
    "interrupted_item",
    "verdict_of",
]


@dataclasses.dataclass(frozen=True)
class Item:
    group: str  # the part of the plan that measured it (plan.GROUPS)
    name: str
    value: float | str | None
    unit: str
    reference: str  # what the value is judged against, with its source; "" when not judged
    verdict: str
    note: str = ""
    reference_value: float | None = None

    def __post_init__(self):
        if self.verdict not in STATUSES:
            raise ValueError(f"{self.name}: verdict {self.verdict!r}, expected one of {STATUSES}")

    @property
    def ratio(self) -> float | None:
        if isinstance(self.value, int | float) and self.reference_value:
            return float(self.value) / self.reference_value
        return None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "ratio": self.ratio}

    @classmethod
    def from_dict(cls, d: dict) -> Item:
        return cls(**{f.name: d.get(f.name) for f in dataclasses.fields(cls)})

    def shown_value(self) -> str:
        if isinstance(self.value, int | float):
            return si(self.value, self.unit)
        return "n/a" if self.value is None else str(self.value)


def from_row(group: str, row: Row) -> Item:
    """A node-check row as an item: its expected figure and source become the reference."""
    reference = ""
    if row.expected:
        reference = si(row.expected, row.unit)
        if row.source:
            reference += f" ({row.source})"
    elif row.source:
        reference = row.source
    return Item(
        group,
        row.item,
        row.measured,
        row.unit,
        reference,
        row.status,
        row.note,
        row.expected or None,
    )


# The plan's groups in order (plan.GROUPS holds their functions; a test keeps the two alike):
# here, without JAX, so that the files written after a killed process list every group.
GROUP_NAMES = (
    "environment",
    "stream",
    "babelstream",
    "matmul",
    "node",
    "train",
    "input",
    "detector",
    "members",
    "dtypes",
    "settings",
)


def not_reached_item(group: str) -> Item:
    """A group the command's time ran out before: a WARN, so the report still lists it."""
    return Item(
        group, f"{group} group", None, "", "", WARN, "not reached: the command's time ran out"
    )


def verdict_of(items: list[Item]) -> str:
    """FAIL if any item FAILs, else WARN if any WARNs, else PASS."""
    verdicts = {i.verdict for i in items}
    return FAIL if FAIL in verdicts else WARN if WARN in verdicts else PASS


# Exceptions that mean "this backend or this install cannot do it", not "it is broken".
CANNOT_RUN = ("UNIMPLEMENTED", "not supported", "Unsupported", "No module named")


def failure_item(group: str, error: BaseException) -> Item:
    """A group that raised, as one item naming the error (the traceback goes to stderr)."""
    text = str(error).strip().splitlines()
    first = f"{type(error).__name__}: {text[0] if text else ''}"[:400]
    cannot = isinstance(error, ImportError) or any(k in first for k in CANNOT_RUN)
    return Item(group, f"{group} (did not run)", None, "", "", WARN if cannot else FAIL, first)


def interrupted_item(group: str, exit_code: int) -> Item:
    """The group a dead process was in: cut at the time limit (WARN; the script reports that as
    124, `timeout`'s code), or crashed (FAIL)."""
    if exit_code == 124:
        return Item(group, f"{group} (cut)", None, "", "", WARN, "cut at the command's time limit")
    signal = f", signal {exit_code - 128}" if exit_code > 128 else ""
    return Item(
        group,
        f"{group} (crashed)",
        None,
        "",
        "",
        FAIL,
        f"the process died in this group (exit {exit_code}{signal}); see the log",
    )
