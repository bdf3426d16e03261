"""`--expect`: the least bandwidth an acceptance asks of each device, per kernel
(docs/stream.md, Acceptance). Parsed before anything is measured, so that a malformed one is a
usage error (exit 2), not a failed run."""

from __future__ import annotations

import dataclasses
import re

from hpcai_jax.errors import UsageError

# Bytes per second of each unit an expectation may be written in.
UNITS = {"MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12, "MiB/s": 2.0**20, "GiB/s": 2.0**30}
KERNEL_KEYS = ("copy", "mul", "add", "triad", "dot", "nstream")
_ONE = re.compile(
    r"^\s*([a-z]+)\s*:\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]+)\s*$"
)


@dataclasses.dataclass(frozen=True)
class Expectation:
    kernel: str  # a key of KERNEL_KEYS
    given: str  # as the user wrote it
    unit: str  # a key of UNITS
    bytes_per_s: float

    def in_unit(self, bytes_per_s: float) -> float:
        """`bytes_per_s` in this expectation's unit."""
        return bytes_per_s / UNITS[self.unit]


def parse(text: str, flag: str = "--expect") -> tuple[Expectation, ...]:
    """A comma list of KERNEL:VALUEUNIT, e.g. `triad:3885301MB/s,copy:3.5TB/s`; empty: none.

    Raises:
      UsageError: an item that is not of that form, an unknown kernel or unit, a value that is
        not positive, or a kernel given twice.
    """
    out: list[Expectation] = []
    for item in (part for part in text.split(",") if part.strip()):
        match = _ONE.match(item)
        problem = _problem(match, out)
        if problem:
            raise UsageError(
                f"{flag}={text}: {item.strip()!r} {problem}; expected KERNEL:VALUEUNIT, e.g. "
                f"triad:3885301MB/s, KERNEL one of {', '.join(KERNEL_KEYS)}, UNIT one of "
                f"{', '.join(UNITS)}"
            )
        kernel, value, unit = match.groups()
        out.append(Expectation(kernel, item.strip(), unit, float(value) * UNITS[unit]))
    return tuple(out)


def _problem(match: re.Match | None, earlier: list[Expectation]) -> str:
    """What is wrong with one item, or ""."""
    if match is None:
        return "is not of that form"
    kernel, value, unit = match.groups()
    if kernel not in KERNEL_KEYS:
        return f"names no kernel ({kernel})"
    if unit not in UNITS:
        return f"has no known unit ({unit})"
    if float(value) <= 0:
        return "is not positive"
    if any(e.kernel == kernel for e in earlier):
        return f"gives {kernel} twice"
    return ""
