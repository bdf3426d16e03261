"""Field metadata for the record definitions: each field declares its unit and meaning, which
docs/record.md is generated from (`records/doc.py`), like `config._field` for the flags."""

from __future__ import annotations

import dataclasses

UNIT, MEANING = "unit", "meaning"
# A section written as this value (e.g. `{}`) where it holds nothing, and read back as None.
NONE_AS = "none_as"
# Left out of the JSON where None (a key today's layout only has in some records).
OMIT_NONE = "omit_none"


def field(meaning: str, unit: str = "", *, none_as=dataclasses.MISSING, omit_none: bool = False):
    """A dataclass field with its meaning and unit ("" where the value has none: a name, a
    flag, a count of things named in the meaning)."""
    metadata = {MEANING: meaning, UNIT: unit}
    if none_as is not dataclasses.MISSING:
        metadata[NONE_AS] = none_as
    if omit_none:
        metadata[OMIT_NONE] = True
        return dataclasses.field(default=None, metadata=metadata)
    return dataclasses.field(metadata=metadata)
