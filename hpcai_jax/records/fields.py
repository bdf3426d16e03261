"""Field metadata for the record definitions, in pydantic's words: each field's meaning is its
`description` and its unit is in its JSON schema, which docs/record.md is generated from
(`records/doc.py`); pydantic reads a dataclass field's metadata as its `Field(...)`."""

from __future__ import annotations

import dataclasses

# A section written as this value (e.g. `{}`) where it holds nothing, and read back as None.
NONE_AS = "none_as"


def _is_none(value) -> bool:
    return value is None


def field(meaning: str, unit: str = "", *, none_as=dataclasses.MISSING, omit_none: bool = False):
    """A dataclass field with its meaning and unit ("" where the value has none: a name, a
    flag, a count of things named in the meaning). `omit_none`: left out of the JSON where None
    (a key today's layout only has in some records)."""
    extra = {"unit": unit}
    if none_as is not dataclasses.MISSING:
        extra[NONE_AS] = none_as
    metadata = {"description": meaning, "json_schema_extra": extra}
    if omit_none:
        return dataclasses.field(default=None, metadata={**metadata, "exclude_if": _is_none})
    return dataclasses.field(metadata=metadata)


def meaning(f: dataclasses.Field) -> str:
    return f.metadata["description"]


def extra(f: dataclasses.Field) -> dict:
    return f.metadata["json_schema_extra"]
