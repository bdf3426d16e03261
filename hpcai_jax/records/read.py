"""The one reader of records: `read(path or JSON object)` gives the typed record of its mode,
whatever version of the layout it was written in (docs/record.md)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from hpcai_jax.records import v1
from hpcai_jax.records.envelope import SCHEMA_VERSION
from hpcai_jax.records.flops import FlopsRecord
from hpcai_jax.records.nodecheck import CheckRecord
from hpcai_jax.records.schema import RecordError, build
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.records.train import TrainRecord

AnyRecord = TrainRecord | StreamRecord | FlopsRecord | CheckRecord
KINDS: dict[str, type] = {
    "train": TrainRecord,
    "flops": FlopsRecord,
    "stream": StreamRecord,
    "check": CheckRecord,
}
VERSIONS = (1, SCHEMA_VERSION)
MAX_DEPTH = 64  # JSON nesting a record may have: its deepest sections are a few levels down
MAX_BYTES = 256 << 20  # a record's file: far above any record, far below a machine's memory


def nesting(value, limit: int = MAX_DEPTH) -> int:
    """How deeply `value` nests lists and objects, counted up to `limit` + 1, without recursion
    (a hostile file nests thousands deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > limit:
                return deepest
            stack.extend(
                (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def load(path: str | Path) -> dict:
    """The JSON object in a file; RecordError when it is not a regular file (a FIFO is never
    opened, so never waited on), holds more than MAX_BYTES, cannot be read, is not JSON, or nests
    deeper than MAX_DEPTH."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise RecordError("not a regular file (a FIFO, device or folder)")
        if info.st_size > MAX_BYTES:
            raise RecordError(f"{info.st_size} bytes, over {MAX_BYTES}")
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise RecordError(f"over {MAX_BYTES} bytes")
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH}") from None
    except RecordError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RecordError(f"unreadable or not JSON ({type(e).__name__})") from e
    if nesting(data) > MAX_DEPTH:
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH}")
    return data


def read(source: str | Path | dict | AnyRecord) -> AnyRecord:
    """The record in a file (or an already loaded JSON object), typed by its mode; a typed
    record is handed back as it is, so a caller holding either never converts first.

    Raises:
      RecordError: not JSON, not a record (no or an unknown "mode"), a version this hpcai_jax
        does not know, or a value of the wrong shape; the message says which, in a few words.
    """
    if isinstance(source, tuple(KINDS.values())):
        return source
    if isinstance(source, str | Path):
        data = load(source)  # bounded there
    elif nesting(source) > MAX_DEPTH:
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH}")
    else:
        data = source
    if not isinstance(data, dict) or "mode" not in data:
        raise RecordError('no "mode" field')
    mode = data["mode"]
    if mode not in KINDS:
        raise RecordError(f"mode {mode!r}")
    version = data.get("schema_version", 1)
    if version not in VERSIONS:
        raise RecordError(
            f"schema_version {version!r}: this hpcai_jax reads versions "
            f"{', '.join(map(str, VERSIONS))}"
        )
    if version == 1:
        data = v1.upgrade(data)
    return build(KINDS[mode], data)
