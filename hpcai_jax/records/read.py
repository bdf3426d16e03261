"""The one reader of records: `read(path or JSON object)` gives the typed record of its mode,
whatever version of the layout it was written in (docs/record.md)."""

from __future__ import annotations

import json
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


def load(path: str | Path) -> dict:
    """The JSON object in a file; RecordError when it cannot be read or is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RecordError(f"unreadable or not JSON ({type(e).__name__})") from e


def read(source: str | Path | dict | AnyRecord) -> AnyRecord:
    """The record in a file (or an already loaded JSON object), typed by its mode; a typed
    record is handed back as it is, so a caller holding either never converts first.

    Raises:
      RecordError: not JSON, not a record (no or an unknown "mode"), a version this hpcai_jax
        does not know, or a value of the wrong shape; the message says which, in a few words.
    """
    if isinstance(source, tuple(KINDS.values())):
        return source
    data = load(source) if isinstance(source, str | Path) else source
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
