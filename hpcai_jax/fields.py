"""A configuration setting declared once, on its dataclass field: its help, its flag, and the
values it accepts, as pydantic constraints (ge, gt, le, lt, Literal choices).

`setting` puts all of it on the field's metadata (a record's fields have their own,
`records/fields.field`: a meaning and a unit, no flag). `flags.py` derives the command-line flag from
it, and `check` (each config's `validate`) validates the values with a pydantic model made from
the declarations, and turns its first error into a one-line message naming the flag, so a bound
is written once, beside its setting, and a new field is checked and tested without code of its
own (tests/test_config.py). Only rules between several settings stay hand-written in the
configs' `validate`. "Derive it" is spelled once: None in Python, `auto` on the command line
(`auto=`). Pure Python: the configs import it without JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import pydantic

from hpcai_jax.errors import UsageError

_T = TypeVar("_T")
_BOUNDS = ("ge", "gt", "le", "lt")


@dataclasses.dataclass(frozen=True)
class Accepts:
    """The values one setting accepts, as pydantic constraints, and the words that say so in its
    error message. `allow`: values accepted outside the rest; `auto`: None (derive it) is too."""

    choices: tuple[str, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    allow: tuple = ()
    auto: bool = False
    valid: Callable[[Any], bool] | None = None  # a format no bound can say
    unit: str = ""  # after the bound: "expected > 0 seconds"
    note: str = ""  # in parentheses after that: "(or auto)"
    message: str = ""  # replaces "expected ..." where the words must be the setting's own

    @property
    def bounded(self) -> bool:
        """Whether the setting has a numeric range (what the help text and the tests read)."""
        return any(getattr(self, name) is not None for name in _BOUNDS)

    def annotation(self, kind: type) -> Any:
        """The pydantic type of the setting: `kind` (None stripped) under its constraints."""
        if self.choices is not None:
            kind = Literal[self.choices]
        bounds = {name: getattr(self, name) for name in _BOUNDS if getattr(self, name) is not None}
        if bounds:
            kind = Annotated[kind, pydantic.Field(**bounds)]
        if self.valid is not None:
            kind = Annotated[kind, pydantic.AfterValidator(self._formatted)]
        if self.allow:
            kind = Literal[self.allow] | kind
        return kind | None if self.auto else kind

    def _formatted(self, value: Any) -> Any:
        if not self.valid(value):
            raise ValueError("format")
        return value

    def range_text(self) -> str:
        """The bounds in a reader's notation: ">= 1", "> 0", "in [0, 1)", "in (0, 1]"."""
        lows = (("[", ">=", self.ge), ("(", ">", self.gt))
        highs = (("]", "<=", self.le), (")", "<", self.lt))
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
        """The range for a flag's help, e.g. "(>= 1, or auto)"; empty without a numeric range,
        or with a single value (the help says why only that one)."""
        if not self.bounded or (self.ge is not None and self.ge == self.le):
            return ""
        text = self.range_text()  # the unit is the help's own words
        others = [_number(v) for v in self.allow] + (["auto"] if self.auto else [])
        return f"({text}, or {' or '.join(others)})" if others else f"({text})"


def _number(value: Any) -> str:
    """A bound as users read it: 2^32 rather than 4294967296."""
    if isinstance(value, int) and value >= 1 << 16 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return str(value)


def setting(
    default: _T,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    enum: bool = True,
    auto: Any = dataclasses.MISSING,
    mode_defaults: dict[str, str] | None = None,
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
      auto: the setting may be None, "derive it", spelled `auto` on the command line; `auto`
        is the number that said so before (0 or -1): the flag still takes it (deprecated), and
        the record's configuration writes None as it, as it always did.
      mode_defaults: mode -> the flag's text that mode takes when the command line leaves it
        unset (flags.MODE_DEFAULTS).
      **accepts: the rest of `Accepts`: ge, gt, le, lt, allow, valid, unit, note, message.
    """
    metadata: dict = {"help": help}
    if auto is not dataclasses.MISSING:
        metadata["auto"] = auto
        accepts["auto"] = True
    if flag is not None:
        metadata["flag"] = flag
    if mode_defaults:
        metadata["mode_defaults"] = mode_defaults
    if choices is not None and enum:
        metadata["choices"] = choices
    if choices is not None or accepts:
        metadata["accepts"] = Accepts(choices=choices, **accepts)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or f.name


def kind(owner: type, f: dataclasses.Field) -> type:
    """The setting's type without None: int for `int | None`."""
    tp = typing.get_type_hints(owner)[f.name]
    return next((a for a in typing.get_args(tp) if a is not type(None)), tp)


def check_finite(config: Any) -> None:
    """Every float of `config` is finite: inf or nan passes some bounds (inf > 0) and fails
    later, deep inside a computation."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"--{flag_name(f)}={value}: expected a finite number")


@functools.cache
def _model(cls: type) -> type[pydantic.BaseModel]:
    """The pydantic model of `cls`'s declared settings."""
    declared = {
        f.name: (f.metadata["accepts"].annotation(kind(cls, f)), ...)
        for f in dataclasses.fields(cls)
        if "accepts" in f.metadata
    }
    return pydantic.create_model(f"{cls.__name__}Check", **declared)


def check(config: Any) -> None:
    """Raises UsageError naming the first field of `config` (in field order) whose value is
    not finite or not what its declaration accepts."""
    check_finite(config)
    by_name = {f.name: f for f in dataclasses.fields(config)}
    declared = [name for name in _model(type(config)).model_fields]
    try:
        _model(type(config)).model_validate({n: getattr(config, n) for n in declared})
    except pydantic.ValidationError as e:
        f = by_name[e.errors()[0]["loc"][0]]
        accepts, value = f.metadata["accepts"], getattr(config, f.name)
        shown = repr(value) if accepts.choices is not None else value
        raise UsageError(f"--{flag_name(f)}={shown}: {accepts.expected()}") from None


def as_dict(config: Any) -> dict:
    """`config` as nested dicts, a derived setting's None written as its former number (the
    records' layout)."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            value = as_dict(value)
        elif value is None and "auto" in f.metadata:
            value = f.metadata["auto"]
        out[f.name] = value
    return out


class Checked:
    """A config part whose only rules are its fields' declarations; a part with rules between
    fields extends `validate` (super().validate() first, so each field is known good)."""

    def validate(self) -> None:
        check(self)
