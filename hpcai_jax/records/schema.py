"""Records as frozen dataclasses and back: `to_dict` writes one as the JSON layout, `build` reads
a JSON object into one by the fields' type annotations. docs/record.md says what each field is.

Reading is lenient the way the readers always were: a field the data lacks (an older record,
a section a run did not reach) reads as None, a missing section as one whose figures are all
None, a missing list or mapping as empty. Keys the definitions do not know are ignored. A value
of the wrong shape (a number where a section belongs) is a RecordError naming its path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing

from hpcai_jax.records.fields import NONE_AS, OMIT_NONE

_ABSENT = object()


class RecordError(ValueError):
    """A file or value that is not a record hpcai_jax can read; the message says why in a few
    words, and the caller names the file."""


def section(cls):
    """The decorator every part of a record carries: frozen (a record is a fact), keyword-only
    (builders name every figure they give)."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


def to_dict(obj):
    """The JSON layout of a record or section (lists for tuples; other leaves as they are)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        omitted = obj.omitted() if hasattr(obj, "omitted") else ()
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name in omitted or (value is None and f.metadata.get(OMIT_NONE)):
                continue
            if value is None and NONE_AS in f.metadata:
                value = copy.deepcopy(f.metadata[NONE_AS])
            out[f.name] = to_dict(value)
        return out
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


@functools.cache
def hints(cls) -> dict[str, object]:
    """A dataclass's fields' types, resolved (the modules use postponed annotations)."""
    return typing.get_type_hints(cls)


def unwrap(tp) -> tuple[bool, object]:
    """(whether None is allowed, the type without None): `Mesh | None` -> (True, Mesh)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        return optional, args[0] if len(args) == 1 else typing.Union[tuple(args)]  # noqa: UP007
    return False, tp


def build(cls, data: dict, where: str = ""):
    """`cls` from a JSON object (see the module docstring for what a missing field becomes)."""
    types_ = hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        raw = data.get(f.name, _ABSENT)
        if NONE_AS in f.metadata and raw == f.metadata[NONE_AS]:
            raw = None
        values[f.name] = _value(types_[f.name], raw, f"{where}.{f.name}" if where else f.name)
    return cls(**values)


def _value(tp, raw, where: str):
    optional, tp = unwrap(tp)
    if raw is _ABSENT or raw is None:
        return None if optional else _empty(tp)
    origin = typing.get_origin(tp) or tp
    if dataclasses.is_dataclass(tp):
        return build(tp, _expect(raw, dict, where), where)
    if origin is list:
        (item,) = typing.get_args(tp) or (object,)
        return [_value(item, x, f"{where}[]") for x in _expect(raw, list, where)]
    if origin is dict:
        item = (typing.get_args(tp) or (str, object))[1]
        return {k: _value(item, v, f"{where}.{k}") for k, v in _expect(raw, dict, where).items()}
    return raw


def _expect(raw, kind: type, where: str):
    if not isinstance(raw, kind):
        wanted = "an object" if kind is dict else "a list"
        raise RecordError(f"{where}: expected {wanted}, found {type(raw).__name__}")
    return raw


def _empty(tp):
    """What a missing field of type `tp` reads as: a section of Nones, an empty list or
    mapping, else None."""
    if dataclasses.is_dataclass(tp):
        return build(tp, {})
    origin = typing.get_origin(tp) or tp
    if origin is list:
        return []
    if origin is dict:
        return {}
    return None
