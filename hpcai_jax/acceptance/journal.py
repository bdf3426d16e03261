"""The acceptance's journal: one JSON line per event, appended and flushed as it happens, so a
process that is killed or crashes leaves every finished group's items, and the group it was in.

Lines: {"start": group, "at": seconds since the run began} when a group starts, {"items":
[...], "group": group} when it ends. A restarted process reads the journal and carries on after
the finished groups (`Journal.finished`); the group that was running when the process died is
reported as such (`Journal.interrupted`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hpcai_jax.acceptance.items import Item

NAME = "acceptance.journal.jsonl"


class Journal:
    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / NAME

    def _append(self, event: dict) -> None:
        line = (json.dumps(event) + "\n").encode()
        with open(self.path, "ab+") as f:
            # A process killed mid-write leaves a line without its end: end it first, so this
            # event stays a line of its own.
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = b"\n" + line
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def start(self, group: str, at_s: float) -> None:
        self._append({"start": group, "at": at_s})

    def finish(self, group: str, items: list[Item]) -> None:
        self._append({"group": group, "items": [i.to_dict() for i in items]})

    def note(self, **event) -> None:
        """A fact about the run itself (its sizes, a restart), kept for the summary."""
        self._append({"note": event})

    def events(self) -> list[dict]:
        if not self.path.exists():
            return []
        events = []
        for line in self.path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill mid-write
                continue
        return events

    def items(self) -> list[Item]:
        return [Item.from_dict(d) for e in self.events() if "items" in e for d in e["items"]]

    def finished(self) -> list[str]:
        return [e["group"] for e in self.events() if "items" in e]

    def interrupted(self) -> str | None:
        """The group that started and never finished, if any."""
        done = set(self.finished())
        started = [e["start"] for e in self.events() if "start" in e]
        pending = [g for g in started if g not in done]
        return pending[-1] if pending else None

    def notes(self) -> list[dict]:
        return [e["note"] for e in self.events() if "note" in e]
