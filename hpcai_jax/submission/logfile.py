"""An MLLOG file's lines, read as `check` needs them."""

from __future__ import annotations

import json
from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.submission import safe

PREFIX = ":::MLLOG "


def metadata(line: dict | None, key: str):
    """`key` of an MLLOG line's metadata, or None (no line, no metadata, no such key)."""
    return ((line or {}).get("metadata") or {}).get(key)


class Log:
    """The lines of one MLLOG file, in file order."""

    def __init__(self, path: Path):
        self.path, self.lines = path, []
        text = safe.read_text(path)  # a regular file, bounded: never a FIFO
        for number, line in enumerate(text.splitlines(), 1):
            if not line.startswith(PREFIX):
                continue
            try:
                value = json.loads(line[len(PREFIX) :])
            except (ValueError, RecursionError):
                raise UsageError(f"{path}:{number}: not an MLLOG line (bad JSON)") from None
            if not isinstance(value, dict) or safe.nesting(value) > safe.MAX_DEPTH:
                raise UsageError(f"{path}:{number}: not an MLLOG line (a JSON object)")
            self.lines.append(value)

    def all(self, key: str) -> list[dict]:
        return [line for line in self.lines if line.get("key") == key]

    def one(self, key: str) -> dict | None:
        """The first line of `key`, or None."""
        found = self.all(key)
        return found[0] if found else None

    def value(self, key: str):
        """The value of `key`'s first line, or, where a resumed segment restated it (the mesh,
        flops_per_step: hpcai_jax/telemetry/mllog.py), the last segment_start's."""
        line = self.one(key)
        value = None if line is None else line.get("value")
        for segment in self.all("segment_start"):
            value = (segment.get("metadata") or {}).get(key, value)
        return value

    def epochs(self) -> dict[int, tuple[dict, dict]]:
        """epoch_num → (its epoch_start line, its epoch_stop line), for epochs with both."""
        starts, out = {}, {}
        for line in self.lines:
            num = (line.get("metadata") or {}).get("epoch_num")
            if line.get("key") == "epoch_start":
                starts[num] = line
            elif line.get("key") == "epoch_stop" and num in starts:
                out[num] = (starts[num], line)
        return out

    def evaluations(self) -> list[tuple[dict, dict]]:
        """(eval_stop line, the eval_accuracy line after it) per evaluation, in order."""
        out, stop = [], None
        for line in self.lines:
            if line.get("key") == "eval_stop":
                stop = line
            elif line.get("key") == "eval_accuracy" and stop is not None:
                out.append((stop, line))
                stop = None
        return out
