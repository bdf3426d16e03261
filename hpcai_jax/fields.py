"""A configuration setting declared once, on its dataclass field: its help, its flag, and the
values it accepts.

`field` puts all of it on the field's metadata. `flags.py` derives the command-line flag from
it, and `check` (each config's `validate`) refuses a value outside it with a one-line message
naming the flag, so a bound is written once, beside its setting, and a new field is checked and
tested without code of its own (tests/test_config.py). Only rules between several settings stay
hand-written in the configs' `validate`. Pure Python: the configs import it without JAX.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from typing import Any, TypeVar

from hpcai_jax.errors import UsageError

_T = TypeVar("_T")
# Each bound of `Accepts` and the comparison a value must pass against it.
_BOUNDS = (
    ("at_least", operator.ge),
    ("above", operator.gt),
    ("at_most", operator.le),
    ("below", operator.lt),
)


@dataclasses.dataclass(frozen=True)
class Accepts:
    """The values one setting accepts, and the words that say so in its error message.

    A value passes when it is one of `allow`, or when it is in `choices` (if given), inside every
    bound given and `valid(value)` is true (if given). Floats must also be finite (`check`).
    """

    choices: tuple[str, ...] | None = None
    at_least: float | None = None  # value >= at_least
    above: float | None = None  # value > above
    at_most: float | None = None  # value <= at_most
    below: float | None = None  # value < below
    allow: tuple = ()  # accepted outside the rest: 0 for "unset", -1 for "derive"
    valid: Callable[[Any], bool] | None = None  # a format no bound can say
    unit: str = ""  # after the bound: "expected > 0 seconds"
    note: str = ""  # in parentheses after that: "(or 0 to derive)"
    message: str = ""  # replaces "expected ..." where the words must be the setting's own

    @property
    def bounded(self) -> bool:
        """Whether the setting has a numeric range (what the help text and the tests read)."""
        return any(getattr(self, name) is not None for name, _ in _BOUNDS)

    def admits(self, value: Any) -> bool:
        if value in self.allow:
            return True
        if self.choices is not None and value not in self.choices:
            return False
        if self.valid is not None and not self.valid(value):
            return False
        return all(
            getattr(self, name) is None or holds(value, getattr(self, name))
            for name, holds in _BOUNDS
        )

    def range_text(self) -> str:
        """The bounds in a reader's notation: ">= 1", "> 0", "in [0, 1)", "in (0, 1]"."""
        lows = (("[", ">=", self.at_least), ("(", ">", self.above))
        highs = (("]", "<=", self.at_most), (")", "<", self.below))
        low = next((b for b in lows if b[2] is not None), None)
        high = next((b for b in highs if b[2] is not None), None)
        if low and high:
            return f"in {low[0]}{_number(low[2])}, {_number(high[2])}{high[0]}"
        if low or high:
            _, operator, bound = low or high
            return f"{operator} {_number(bound)}"
        return ""

    def expected(self) -> str:
        """What follows `--flag=value: ` when the value is refused."""
        if self.message:
            return self.message
        if self.choices is not None:
            text = f"expected one of {', '.join(self.choices)}"
        else:
            text = " ".join(w for w in ("expected", self.range_text(), self.unit) if w)
        return f"{text} ({self.note})" if self.note else text

    def help_text(self) -> str:
        """The range for a flag's help, e.g. "(>= 1, or 0)"; empty without a numeric range, or
        with a single value (the help says why only that one)."""
        if not self.bounded or (self.at_least is not None and self.at_least == self.at_most):
            return ""
        text = self.range_text()  # the unit is the help's own words
        if self.allow:
            text += ", or " + " or ".join(_number(v) for v in self.allow)
        return f"({text})"


def _number(value: Any) -> str:
    """A bound as users read it: 2^32 rather than 4294967296."""
    if isinstance(value, int) and value >= 1 << 16 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return str(value)


def field(
    default: _T,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    enum: bool = True,
    words: dict[str, Any] | None = None,
    **accepts: Any,
) -> _T:
    """A setting with its one description; `flags.py` makes a --flag of it, `check` checks it.

    Args:
      default: the field's default, also the flag's.
      help: what the setting means; the flag's help text.
      flag: the flag's name where it is not the field's name.
      choices: the allowed strings. An enum flag (absl refuses others when it parses), unless
        `enum` is false: then a string flag, checked only by `validate` (STREAM's settings are
        checked in stream mode only).
      words: words the flag takes for values of the field's type, e.g. {"auto": 0}: the flag
        is then a string, converted once when the flags are read (flags.py).
      **accepts: the rest of `Accepts`: at_least, above, at_most, below, allow, valid, unit,
        note, message.
    """
    metadata: dict = {"help": help}
    if words:
        metadata["words"] = words
    if flag is not None:
        metadata["flag"] = flag
    if choices is not None and enum:
        metadata["choices"] = choices
    if choices is not None or accepts:
        metadata["accepts"] = Accepts(choices=choices, **accepts)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or f.name


def check_finite(config: Any) -> None:
    """Every float of `config` is finite: inf or nan passes some bounds (inf > 0) and fails
    later, deep inside a computation."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"--{flag_name(f)}={value}: expected a finite number")


def check(config: Any) -> None:
    """Raises UsageError naming the first field of `config` (in field order) whose value is
    not finite or not what its declaration accepts."""
    check_finite(config)
    for f in dataclasses.fields(config):
        accepts = f.metadata.get("accepts")
        value = getattr(config, f.name)
        if accepts is not None and not accepts.admits(value):
            shown = repr(value) if accepts.choices is not None else value
            raise UsageError(f"--{flag_name(f)}={shown}: {accepts.expected()}")


class Checked:
    """A config part whose only rules are its fields' declarations; a part with rules between
    fields extends `validate` (super().validate() first, so each field is known good)."""

    def validate(self) -> None:
        check(self)
