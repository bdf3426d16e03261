"""What names the system an entry is listed under (docs/ranking.md, "System and organisation"):
`system.json`'s `system` and `organisation` keys, the submitter's, where given, must be what
every run's record states (`--submission_platform`, the system's name, and
`--submission_org`); `check` compares system.json's devices, software and runs with the records,
not these keys."""

from __future__ import annotations

import json
from pathlib import Path

from hpcai_jax import records
from hpcai_jax.submission import RECORD, SYSTEM

# system.json key → the record's config.results field that states the same thing.
NAMED = {"system": "submission_platform", "organisation": "submission_org"}


def system_json(root: Path) -> dict:
    """The package's system.json (check has read it: a JSON object)."""
    return json.loads((root / SYSTEM).read_text(encoding="utf-8"))


def stated(record: records.TrainRecord, field: str) -> str:
    """What the run's configuration states (`--submission_platform`, `--submission_org`)."""
    return str(((record.config or {}).get("results") or {}).get(field) or "")


def trained(root: Path) -> list[records.TrainRecord]:
    found = (records.read(p) for p in sorted(root.glob(f"*{RECORD}")) if p.name != SYSTEM)
    return [r for r in found if isinstance(r, records.TrainRecord)]


def check(root: Path) -> list[str]:
    """One line per run whose record names another system or organisation than system.json."""
    given = system_json(root)
    out = []
    for record in trained(root):
        for key, field in NAMED.items():
            mine, theirs = given.get(key), stated(record, field)
            if mine is not None and theirs and str(mine) != theirs:
                out.append(
                    f"package: {SYSTEM} {key} {mine!r} != {theirs!r}, the {field} of run "
                    f"{record.run_id} ({record.run_id}{RECORD} config.results.{field}): "
                    "the package names another system than its records"
                )
    return out
