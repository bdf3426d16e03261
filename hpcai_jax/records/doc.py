"""docs/record.md, generated from the record definitions' field metadata:

    python -m hpcai_jax.records.doc > docs/record.md

tests/test_records.py checks that the committed page is this module's output."""

from __future__ import annotations

import dataclasses
import sys

from hpcai_jax.records import v1
from hpcai_jax.records.envelope import SCHEMA_VERSION, Record
from hpcai_jax.records.read import KINDS
from hpcai_jax.records.schema import adapter

TITLES = {
    "train": ("Training record", "`--mode=train`, built by `hpcai_jax/run/record.py`"),
    "flops": ("FLOP accounting record", "`--mode=flops`, built by `flops/mode.py`"),
    "stream": ("STREAM record", "`--mode=stream`, built by `hpcai_jax/stream/record.py`"),
    "check": ("Node check record", "`--mode=check`, built by `hpcai_jax/nodecheck/runner.py`"),
}
INTRO = f"""\
# Records: every field

<!-- Generated from the definitions in hpcai_jax/records/ by
`python -m hpcai_jax.records.doc > docs/record.md`: edit those, not this page. -->

Every mode writes one JSON record, `<results_dir>/<run_id>.json` (`results.envelope`, written
atomically: docs/reliability.md). Its layout is defined once, as frozen dataclasses in
`hpcai_jax/records/` whose fields carry the unit and meaning listed here, and read back by one
reader, `hpcai_jax.records.read(path or JSON object)`, which the report, the submission check,
the MLLOG and the sweep use. How the training figures are computed is docs/score.md.

A field is named by its path: `timing` at the top, `timing.step_s` inside it, `epochs[].wall_s`
for a field of every item of a list, `kernels.*.gb_per_s` for a field of every value of a
mapping (a kernel's key there). A unit of B is bytes; GB is 10^9 bytes; a fraction is between 0
and 1. Any field of a record read from an older file may be None (null) where that file lacks
it.

## Versions

`schema_version` is {SCHEMA_VERSION}. A record without it (written before it existed, such as
docs/example_report/records) is version 1 and reads as version {SCHEMA_VERSION} through one
converter (`hpcai_jax/records/v1.py`):

"""


_TYPES = {"integer": "integer", "number": "number", "string": "string", "boolean": "bool"}


def _type(schema: dict) -> str:
    """A field's type in the page's words, from its JSON schema."""
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(kinds) + (" or null" if len(kinds) < len(schema["anyOf"]) else "")
    if "$ref" in schema:
        return "object"
    kind = schema.get("type")
    if kind == "object":
        return "mapping"
    return "list" if kind == "array" else _TYPES.get(kind, "any")


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _inner(schema: dict) -> tuple[str, str] | None:
    """(path suffix, $ref) of the section a field holds, itself or in a list or mapping."""
    for option in schema.get("anyOf", [schema]):
        for suffix, inner in (
            ("", option),
            ("[]", option.get("items", {})),
            (".*", option.get("additionalProperties") or {}),
        ):
            if isinstance(inner, dict) and "$ref" in inner:
                return suffix, inner["$ref"].rsplit("/", 1)[-1]
    return None


def rows(cls, prefix: str = "", skip: tuple[str, ...] = ()) -> list[tuple[str, str, str, str]]:
    """(path, type, unit, meaning) of every field of `cls`, depth first, from its JSON schema."""
    schema = adapter(cls).json_schema()
    return _rows(schema, schema.get("$defs", {}), prefix, skip)


def _rows(schema: dict, defs: dict, prefix: str, skip=()) -> list[tuple[str, str, str, str]]:
    out = []
    for name, field in schema["properties"].items():
        if name in skip:
            continue
        path = f"{prefix}{name}"
        out.append((path, _type(field), field["unit"], field["description"]))
        if inner := _inner(field):
            out += _rows(defs[inner[1]], defs, f"{path}{inner[0]}.")
    return out


def _table(items: list[tuple[str, str, str, str]]) -> str:
    lines = ["| field | type | unit | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{p}` | {t} | {u} | {_escape(m)} |" for p, t, u, m in items]
    return "\n".join(lines)


def render() -> str:
    """The whole page."""
    envelope = {f.name for f in dataclasses.fields(Record)}
    parts = [INTRO + "\n".join(f"- {change}" for change in v1.CHANGES)]
    parts.append(
        "## Envelope: every record\n\nEvery record starts with these fields; each mode's "
        "sections follow.\n\n" + _table(rows(Record))
    )
    for mode, cls in KINDS.items():
        title, where = TITLES[mode]
        parts.append(f"## {title}\n\n{where}.\n\n" + _table(rows(cls, skip=tuple(envelope))))
    return "\n\n".join(parts) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
