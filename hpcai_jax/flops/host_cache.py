"""The start-up measurements of a training run kept per host for the runs after it: the
matmul peaks, STREAM's Triad and the FLOP cross-check's analytic counts (docs/score.md,
"Start-up measurements kept per host").

Together they cost a small CPU run about half its start-up on a loaded 2-core host, and they
depend only on the devices, the software and, for the counts, the program: a sweep or a test
suite that starts many runs on the same devices takes them once. Only where
`$HPCAI_JAX_STARTUP_CACHE` names a folder: a run without it measures its own figures, as a
benchmark's record should by default. An entry is keyed on what was measured and on the host as
JAX sees it (local device ids and kinds, backend, process count, `$XLA_FLAGS`, JAX's version;
the counts also on the program and this package's counting code), and holds the id of the run
that measured it, which a later record's source names. A folder that cannot be read or written
only costs the next run the measurement. In front of it, this process keeps what it measured
for its later runs (an in-process sweep, the test suite). The stores here are the ones
run/probes.py consults: no measurement reads them itself."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import jax

from hpcai_jax import distributed
from hpcai_jax.flops.counted_cache import write_json

ENV = "HPCAI_JAX_STARTUP_CACHE"


def folder() -> Path | None:
    """The cache's folder, None where the variable is unset or empty (every run measures)."""
    return Path(os.environ[ENV]) if os.environ.get(ENV) else None


def host() -> str:
    """What a measurement depends on besides what it measures: the devices as JAX sees them."""
    devices = jax.local_devices()
    return json.dumps(
        {
            "devices": [[d.id, d.device_kind] for d in devices],
            "backend": jax.default_backend(),
            "processes": jax.process_count(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "jax": jax.__version__,
        },
        sort_keys=True,
    )


def _path(what: tuple[str, ...]) -> Path | None:
    base = folder()
    if base is None:
        return None
    digest = hashlib.sha256(json.dumps([host(), *what]).encode()).hexdigest()
    return base / f"{what[0]}-{digest}.json"


def _read(path: Path) -> dict | None:
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and {"value", "run", "at"} <= set(entry)
    return entry if ok else None


def read(what: tuple[str, ...]) -> dict | None:
    """The entry kept for `what` on this host ({"value", "run", "at"}), None if none."""
    path = _path(what)
    return _read(path) if path is not None else None


def keep(what: tuple[str, ...], value: object, run_id: str) -> None:
    """Keeps `value` for `what` on this host, measured by run `run_id` now (no-op unset)."""
    path = _path(what)
    if path is not None:
        at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_json(path, {"value": value, "run": run_id or f"(pid {os.getpid()})", "at": at})


def source(entry: dict) -> str:
    """What a record says of a figure read from `entry`."""
    return f"read from {ENV}={folder()}: measured by run {entry['run']} at {entry['at']}"


def kept(what: tuple[str, ...], measure: Callable[[], object], run_id: str) -> tuple[object, str]:
    """(the figure, "" where `measure()` took it now, else where it came from): the entry for
    `what` on this host if one is kept, else `measure()`, kept for the next run under `run_id`.
    The figure must survive JSON (tuples come back as lists)."""
    entry = read(what)
    if entry is not None:
        return entry["value"], source(entry)
    value = measure()
    keep(what, value, run_id)
    return value, ""


_MEASURED: dict[tuple, object] = {}  # (what, local device ids) -> what a run measured at start
REUSED = "measured by this process's first run"


def kept_in_process(what: tuple, measure: Callable[[], object], run_id: str) -> tuple[object, str]:
    """`kept`, behind what this process measured before on its local devices: that figure again,
    "measured by this process's first run", for every later run in it."""
    return _once(what, lambda: kept(what, measure, run_id))


def kept_by_every_process(
    what: tuple, measure: Callable[[], object], run_id: str
) -> tuple[object, str]:
    """`kept_in_process` for a measurement that spans every process (STREAM): every one must
    measure it or none, so process 0's kept figure, if it has one, serves all (a collective every
    process enters, whatever its own cache holds), else all measure it and process 0 keeps it."""
    if jax.process_count() == 1:
        return kept_in_process(what, measure, run_id)
    return _once(what, lambda: _of_process_zero(what, measure, run_id))


def _once(what: tuple, get: Callable[[], tuple[object, str]]) -> tuple[object, str]:
    key = (*what, tuple(d.id for d in jax.local_devices()))
    if key in _MEASURED:
        return _MEASURED[key], REUSED
    value, source = get()
    _MEASURED[key] = value
    return value, source


def _of_process_zero(what: tuple, measure, run_id: str) -> tuple[object, str]:
    entry = read(what) if jax.process_index() == 0 else None
    text = json.dumps(entry) if entry else ""
    shared = distributed.from_process_zero(text if len(text.encode()) <= 4096 else "", 4096)
    if shared:
        entry = json.loads(shared)
        return entry["value"], source(entry)
    value = measure()
    if jax.process_index() == 0:
        keep(what, value, run_id)
    return value, ""


def code_digest(*modules) -> str:
    """sha256 of the source files of `modules`: a kept count is the code's that counted it."""
    text = b"".join(Path(m.__file__).read_bytes() for m in modules)
    return hashlib.sha256(text).hexdigest()
