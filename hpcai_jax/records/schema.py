"""Records as frozen dataclasses, written (`to_dict`) and read (`build`) by pydantic from the
fields' type annotations. docs/record.md says what each field is.

Reading is lenient the way the readers always were: a field the data lacks (an older record,
a section a run did not reach) reads as None, a missing section as one whose figures are all
None, a missing list or mapping as empty. Keys the definitions do not know are ignored. A value
of the wrong shape (a number where a section belongs) is a RecordError naming its path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing

import pydantic

from hpcai_jax.records.fields import NONE_AS, extra


class RecordError(ValueError):
    """A file or value that is not a record hpcai_jax can read; the message says why in a few
    words, and the caller names the file."""


def section(cls):
    """The decorator every part of a record carries: frozen (a record is a fact), keyword-only
    (builders name every figure they give), and read and written by pydantic with the record's
    two leniencies (`_present`, `_absent`) and its written-as values (`_written`)."""
    cls._present = pydantic.model_validator(mode="before")(_present)
    cls._absent = pydantic.field_validator("*", mode="wrap")(_absent)
    cls._written = pydantic.model_serializer(mode="wrap")(_written)
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


@functools.cache
def adapter(cls) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(cls)


def to_dict(obj):
    """The JSON layout of a record or section."""
    return adapter(type(obj)).dump_python(obj, warnings=False)


def build(cls, data: dict):
    """`cls` from a JSON object (see the module docstring for what a missing field becomes)."""
    try:
        return adapter(cls).validate_python(data)
    except pydantic.ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        wanted = {"list_type": "a list"}.get(first["type"], "an object")
        if not first["type"].endswith(("dataclass_type", "dict_type", "list_type")):
            wanted = first["msg"].lower().removeprefix("input should be ")
        found = type(first["input"]).__name__
        raise RecordError(f"{where.lstrip('.')}: expected {wanted}, found {found}") from None


@classmethod
def _present(cls, data):
    """Every field's key, None where the data lacks it or holds its written-as-None value."""
    if not isinstance(data, dict):
        return data
    out = {}
    for f in dataclasses.fields(cls):
        value = data.get(f.name)
        out[f.name] = None if NONE_AS in extra(f) and value == extra(f)[NONE_AS] else value
    return out


@classmethod
def _absent(cls, value, handler, info):
    """None for a field is None where its type allows it or it is a figure; a section of Nones,
    an empty list or mapping otherwise. An integer where a number is declared stays as written."""
    if value is None:
        empty = _empties(cls)[info.field_name]
        return None if empty is None else handler(empty)
    out = handler(value)
    return value if type(value) is int and type(out) is float else out


@functools.cache
def _empties(cls) -> dict[str, object]:
    """Field → what a missing value is validated as: {} (a section, a mapping), [] or None."""
    out = {}
    for name, tp in typing.get_type_hints(cls).items():
        origin = typing.get_origin(tp) or tp
        if type(None) in typing.get_args(tp):
            out[name] = None
        elif dataclasses.is_dataclass(tp) or origin is dict:
            out[name] = {}
        else:
            out[name] = [] if origin is list else None
    return out


def _written(self, handler):
    """The layout's own exceptions: fields a section's `omitted()` leaves out, and None
    written as a field's `none_as` value."""
    out = handler(self)
    if not dataclasses.is_dataclass(self):  # a plain mapping given where a section belongs
        return out
    for name in self.omitted() if hasattr(self, "omitted") else ():
        out.pop(name, None)
    for f in dataclasses.fields(self):
        if NONE_AS in extra(f) and out.get(f.name, 0) is None:
            out[f.name] = copy.deepcopy(extra(f)[NONE_AS])
    return out
