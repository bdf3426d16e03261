"""Writing a record: its file's name and claim, and the atomic write that leaves the old record
or the new one, never half of one. The writer of every mode (results.py adds the machine's
provenance and writes on process 0 only); docs/reliability.md, Interrupts.
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import json
import os
import tempfile
from pathlib import Path

from hpcai_jax.errors import UsageError, disk_full, is_full
from hpcai_jax.file_modes import as_created
from hpcai_jax.locks import Busy, PathLock
from hpcai_jax.records import owned
from hpcai_jax.records.envelope import Record, Status
from hpcai_jax.records.schema import to_dict


def new_run_id(mode: str) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{mode}-{stamp}-{os.getpid()}"


def run_id(config, mode: str) -> str:
    """--run_name, the same in every mode: the record's exact id; else a fresh one."""
    return config.results.run_name or new_run_id(mode)


class Claim:
    """A run's hold on its record's name until the record is written (process 0; a no-op
    elsewhere): `release` after `write_record`; an error path releases it when it is collected,
    and a dead process's hold ends with it (locks.py)."""

    def __init__(self, lock: PathLock | None = None):
        self._lock = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()


def claim(results_dir: str, run_id: str, overwrite: bool, resuming: bool = False) -> Claim:
    """Refuses, before any compute, to overwrite another run's record, or to run while another
    live run writes the same record (two runs given the same results directory and run id). A
    resumed run may replace its own partial record; --overwrite replaces any finished record,
    never a running one's, and nothing that is not a record of this project (`refuse_foreign`).
    The writing process's (results.claim)."""
    path = check_writable(results_dir) / f"{run_id}.json"
    refuse_foreign(results_dir, path)
    try:
        lock = PathLock(str(path.parent / f".{run_id}.lock"))
    except Busy as e:
        raise UsageError(
            f"--results_dir={results_dir}: run id {run_id} is in use by another run ({e}): "
            f"choose another --run_name"
        ) from None
    except OSError as e:
        raise UsageError(
            f"--results_dir={results_dir}: cannot create a file there ({e.strerror})"
        ) from None
    if not path.exists() or overwrite:
        return Claim(lock)
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError):
        existing = {}
    if resuming and existing.get("run_id") == run_id and existing.get("status") == Status.PARTIAL:
        return Claim(lock)
    lock.release()
    raise UsageError(
        f"--results_dir={results_dir} already holds a record of run id {run_id}: "
        f"choose another --run_name, or pass --overwrite to replace it"
    )


def refuse_foreign(results_dir: str, path: Path) -> None:
    """A record's name (or its partial name) that holds a directory, a link or a file that is
    not a record of this project: one line, whatever --overwrite says (records/owned.py)."""
    for name in (path, staged(path)):
        if what := owned.foreign_record(name):
            raise UsageError(
                f"--results_dir={results_dir}: {name} is {what}, not a record this run may "
                "replace: move it away or choose another --run_name"
            )


def check_writable(results_dir: str) -> Path:
    """Fails early (before any compute) when the results directory cannot be written."""
    path = Path(results_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"--results_dir={results_dir}: cannot create directory ({e.strerror})"
        ) from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"--results_dir={results_dir}: directory is not writable")
    return path


PARTIAL = ".partial"  # a run's output under this suffix until its run commits it (run/outputs.py)


def staged(path: str | Path) -> Path:
    """Where a run writes `path` until it commits its outputs together: `PATH.partial`."""
    path = Path(path)
    return path.with_name(path.name + PARTIAL)


def fresh_stage(path: str | Path) -> Path:
    """Where a new run stages `path`: its partial name, unless an earlier run's output is there
    (one interrupted or failed before its commit, which its resume continues): then
    `PATH.<pid>.partial`, so that nothing of an earlier run is replaced before this run commits
    its outputs (run/outputs.py finds it by `stage_of`)."""
    name = staged(path)
    try:
        taken = name.is_symlink() or (name.is_dir() and any(name.iterdir()))
        taken = taken or (name.is_file() and name.stat().st_size > 0)
    except OSError:
        taken = True
    return name.with_name(f"{Path(path).name}.{os.getpid()}{PARTIAL}") if taken else name


def pid_stages(path: str | Path) -> list[Path]:
    """Every `PATH.<pid>.partial` beside `path`: the names `fresh_stage` gave, any process's."""
    path = Path(path)
    prefix = f"{path.name}."
    found = path.parent.glob(f"{glob.escape(prefix)}*{PARTIAL}")
    return sorted(p for p in found if p.name[len(prefix) : -len(PARTIAL)].isdigit())


def stage_of(path: str | Path) -> Path:
    """Where this process staged `path`: its `fresh_stage` name where it wrote one, else its
    partial name."""
    own = Path(path).with_name(f"{Path(path).name}.{os.getpid()}{PARTIAL}")
    return own if own.exists() else staged(path)


# The temporary files of the writes under way, which a hard exit removes (`remove_in_flight`).
_IN_FLIGHT: set[str] = set()


def remove_in_flight() -> None:
    """Removes the temporary files of the writes under way: a hard exit's clean-up
    (run/interrupt.py, a second signal), as the process ends before their rename."""
    for tmp in list(_IN_FLIGHT):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_text_atomically(path: Path, text: str) -> None:
    """`text` at `path`, its directory made, through a temporary file renamed over it: a reader
    sees the old file or the new one, never half of one. Raises OSError (the temporary file
    removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    _IN_FLIGHT.add(tmp)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            as_created(f.fileno())
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _IN_FLIGHT.discard(tmp)


def write_record(results_dir: str, run_id: str, record: Record | dict, stage: bool = False) -> Path:
    """Writes a record (typed, or its JSON layout) to `<results_dir>/<run_id>.json` atomically
    (temp file + fsync + rename), or with `stage` to its partial name
    (`<run_id>.json.partial`), which the training run commits with its other outputs
    (run/outputs.py): a directory removed since the start is made again; a write that fails (a
    full disk) leaves whatever record was there as it was, removes its temp file and raises
    UsageError naming the path.

    Returns the path written. The writing process's (results.write_record).
    """
    path = check_writable(results_dir) / f"{run_id}.json"
    path = staged(path) if stage else path
    if not isinstance(record, dict):
        record = to_dict(record)
    text = json.dumps(record, indent=2, sort_keys=False, default=_jsonable) + "\n"
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{run_id}.", suffix=".tmp", dir=path.parent)
        _IN_FLIGHT.add(tmp)
        with os.fdopen(fd, "w") as f:
            as_created(f.fileno())
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        if is_full(e):
            raise disk_full(
                f"--results_dir={results_dir}",
                "the record",
                path,
                len(text.encode()),
                "nothing there was replaced",
            ) from None
        raise UsageError(
            f"--results_dir={results_dir}: cannot write the record {path} ({e.strerror}); "
            "nothing there was replaced"
        ) from None
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _IN_FLIGHT.discard(tmp)
    return path


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
