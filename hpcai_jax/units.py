"""Numbers as people read them: SI prefixes (60.43 GFLOP/s), a figure or n/a, never a guess.

A table column shares one prefix, chosen from its largest figure and named in the header
("FLOPS [GFLOP/s]"), so its cells line up and a test can read them back exactly.
"""

from __future__ import annotations

PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
DIGITS = 4  # significant digits in every table


def number(value) -> float | None:
    """A record's figure as a float, or None where the record has none (null, or not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def prefix(values) -> tuple[float, str]:
    """The scale and SI prefix for the largest magnitude among `values` (None ignored)."""
    magnitudes = [abs(v) for v in map(number, values) if v is not None]
    top = max(magnitudes, default=0.0)
    return next(((s, p) for s, p in PREFIXES if top >= s), (1.0, ""))


def seconds(values) -> tuple[float, str]:
    """(scale, unit) for durations: ms when every one is under a second, else s."""
    known = [v for v in map(number, values) if v is not None]
    return (1e-3, "ms") if known and max(known) < 1 else (1.0, "s")


def cell(value, scale: float = 1.0) -> str:
    """`value / scale` to DIGITS significant digits, or n/a."""
    value = number(value)
    return "n/a" if value is None else f"{value / scale:.{DIGITS}g}"


def si(value, unit: str) -> str:
    """60434829978.9, "FLOP/s" -> "60.43 GFLOP/s"; n/a for no figure."""
    value = number(value)
    if value is None:
        return "n/a"
    scale, p = prefix([value])
    return f"{cell(value, scale)} {p}{unit}".rstrip()


def duration(value) -> str:
    """Seconds as "36.36 ms" under one second, "3.164 s" above; n/a for no figure."""
    value = number(value)
    if value is None:
        return "n/a"
    scale, unit = seconds([value])
    return f"{cell(value, scale)} {unit}"


def percent(value) -> str:
    """A fraction as a percentage (0.152 -> "15.2 %"), or n/a."""
    value = number(value)
    return "n/a" if value is None else f"{cell(value * 100)} %"


def ratio(a, b) -> str:
    """b / a to 4 significant digits, or n/a when either is missing or a is 0."""
    a, b = number(a), number(b)
    return "n/a" if a is None or b is None or a == 0 else f"{b / a:.{DIGITS}g}"


def formatted(value, fmt: str = "{:.4g}") -> str:
    """A figure for a summary line: formatted, or n/a when the record has none."""
    return "n/a" if value is None else fmt.format(value)
