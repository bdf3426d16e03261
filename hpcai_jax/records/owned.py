"""Which files a run may replace: its outputs' names hold the project's own files, told by their
content, never by their name (docs/reliability.md, "What --overwrite replaces"). A directory, a
symbolic link or a file the project did not write is refused in one line, with or without
--overwrite: what a user keeps under an output's name is never lost.

Each `foreign_*` gives "" where nothing is there or what is there is the project's own output of
that kind, else what it is ("a directory", "a file that is not JSON", ...).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

MLLOG_PREFIX = ":::MLLOG "  # what mlperf-logging starts every line of an MLLOG with
# Where this project's MLLOG lines say they come from (telemetry/mllog.py trims the repository's
# root from each line's metadata "file"): another benchmark's MLPerf log names its own files.
OUR_SOURCE = "hpcai_jax/"
_RECORD_KEYS = ("run_id", "status")  # the envelope's identity (records/envelope.py), and:
_MODES = ("train", "flops", "stream", "check")  # the modes that write one (config.MODES)
_ORBAX_MARKS = ("_CHECKPOINT_METADATA", "_METADATA", "manifest.ocdbt")  # a folder orbax wrote
_EVENTS = "events.out.tfevents."  # the file names TensorBoard's writer gives


def _kind(path: Path) -> str:
    """ "" (nothing there), "file", "dir", or what else it is, without following a link."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # nothing there, or no way there: the write that follows names it
        return ""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "not a regular file"


def foreign_record(path: str | Path) -> str:
    """ "" for nothing there or a record of this project (a JSON object with the envelope's
    run_id and status, a mode of this project's, an integer schema_version where it has one),
    else what is there."""
    kind = _kind(Path(path))
    if kind in ("", "file"):
        return "" if not kind else _not_a_record(Path(path))
    return "a directory" if kind == "dir" else kind


def _not_a_record(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return "a file that is not JSON"
    if (
        isinstance(data, dict)
        and all(isinstance(data.get(k), str) for k in _RECORD_KEYS)
        and data.get("mode") in _MODES
        and type(data.get("schema_version", 1)) is int
    ):
        return ""
    return "JSON without a record's run_id, mode and status"


def foreign_log(path: str | Path) -> str:
    """ "" for nothing there, an empty file, or an MLLOG this project wrote (every line
    `:::MLLOG {...}`, the first one's JSON naming a file of this package in its metadata; the
    last may be cut short, as a killed run leaves it), else what is there."""
    kind = _kind(Path(path))
    if kind == "dir":
        return "a directory"
    if kind != "file":
        return kind
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return "a file that is not text"
    if not lines:
        return ""
    try:
        first = json.loads(lines[0].removeprefix(MLLOG_PREFIX))
    except ValueError:
        first = None
    if not all(line.startswith(MLLOG_PREFIX) for line in lines) or not isinstance(first, dict):
        return "a file of other lines than :::MLLOG ones"
    meta = first.get("metadata")
    source = meta.get("file") if isinstance(meta, dict) else None
    if isinstance(source, str) and source.startswith(OUR_SOURCE):
        return ""
    return "an MLLOG another program wrote (its lines name no file of hpcai_jax)"


def foreign_weights(path: str | Path) -> str:
    """ "" for nothing there or a folder orbax wrote (kept weights), else what is there."""
    kind = _kind(Path(path))
    if kind in ("", "dir"):
        if not kind or any((Path(path) / mark).exists() for mark in _ORBAX_MARKS):
            return ""
        return "a directory without an orbax checkpoint in it"
    return "a file" if kind == "file" else kind


def foreign_events(path: str | Path) -> str:
    """ "" for nothing there or a folder of TensorBoard event files only, else what is there."""
    kind = _kind(Path(path))
    if kind == "file":
        return "a file"
    if kind != "dir":
        return kind
    for entry in Path(path).rglob("*"):
        if entry.is_symlink() or (not entry.is_dir() and not entry.name.startswith(_EVENTS)):
            return f"a directory holding other files than TensorBoard events ({entry.name})"
    return ""
