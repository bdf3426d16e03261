"""Results records: one JSON document per run of any mode, written atomically by process 0 only.

Every record starts with the same envelope (`envelope`); the records' definitions and their
reader are `hpcai_jax/records/`, every field is listed in docs/record.md.
"""

from __future__ import annotations

import collections
import datetime
import json
import os
import platform
import socket
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

import jax

from hpcai_jax import gpu_settings, nodes, records
from hpcai_jax.errors import UsageError
from hpcai_jax.file_modes import as_created
from hpcai_jax.locks import Busy, PathLock

_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "tensorflow-datasets", "orbax-checkpoint")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_commit() -> str:
    """The project's commit (with '+dirty' for uncommitted changes), or 'unknown'."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def node_counts(hosts: list[str], device_processes: list[int]) -> tuple[int, int]:
    """(number_of_nodes, accelerators_per_node) as MLPerf counts them: a node is a host
    (`hpcai_jax.nodes`: several processes may share one); its accelerators are the devices of all its processes,
    the largest node's where they differ. `hosts` per process, `device_processes` per device."""
    per_node = collections.Counter(hosts[p] for p in device_processes)
    return len(set(hosts)), max(per_node.values())


def provenance() -> records.Provenance:
    """Versions, devices, hosts and commit: what another site needs to reproduce the run.

    Every process must call it (the host names are gathered)."""
    devices = jax.devices()
    hosts = nodes.process_nodes()
    node_total, per_node = node_counts(hosts, [d.process_index for d in devices])
    return records.Provenance(
        versions=package_versions(),
        # One git call for the job, not one per process on a shared file system: only process
        # 0's record is written.
        git_commit=git_commit() if jax.process_index() == 0 else "read on process 0",
        backend=jax.default_backend(),
        device_kind=devices[0].device_kind,
        device_count=len(devices),
        local_device_count=jax.local_device_count(),
        process_count=jax.process_count(),
        hostname=socket.gethostname(),
        hosts=hosts,
        number_of_nodes=node_total,
        accelerators_per_node=per_node,
        platform=platform.platform(),
        environment=gpu_settings.environment(),
        utc=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


# small_arrays: a STREAM run whose arrays break the 4x-cache rule (--allow_small_arrays): its
# figures stand, marked, in every report; no score and no submission takes them.
STATUSES = ("complete", "partial", "invalid", "small_arrays")


def cell(value, fmt: str = "{:.4g}") -> str:
    """A figure for a summary table: formatted, or n/a when the record has none."""
    return "n/a" if value is None else fmt.format(value)


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
    """Refuses, before any compute, to overwrite another run's record (process 0 checks), or to
    run while another live run writes the same record (two runs given the same results directory
    and run id). A resumed run may replace its own partial record; --overwrite replaces any
    finished record, never a running one's."""
    path = check_writable(results_dir) / f"{run_id}.json"
    if jax.process_index() != 0:
        return Claim()
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
    if resuming and existing.get("run_id") == run_id and existing.get("status") == "partial":
        return Claim(lock)
    lock.release()
    raise UsageError(
        f"--results_dir={results_dir} already holds a record of run id {run_id}: "
        f"choose another --run_name, or pass --overwrite to replace it"
    )


def envelope(
    mode: str, run_id: str, status: str, config, reason: str = "", **sections
) -> records.AnyRecord:
    """The mode's typed record (`records.KINDS`): the common envelope, then the mode's sections.
    Every process must call it (the provenance gathers host names)."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r}: expected one of {STATUSES}")
    return records.KINDS[mode](
        schema_version=records.SCHEMA_VERSION,
        run_id=run_id,
        mode=mode,
        status=status,
        reason=reason,
        config=config.to_dict(),
        provenance=provenance(),
        **sections,
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


def write_text_atomically(path: Path, text: str) -> None:
    """`text` at `path`, its directory made, through a temporary file renamed over it: a reader
    sees the old file or the new one, never half of one. Raises OSError (the temporary file
    removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            as_created(f.fileno())
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(
    results_dir: str, run_id: str, record: records.Record | dict, stage: bool = False
) -> Path | None:
    """Writes a record (typed, or its JSON layout) to `<results_dir>/<run_id>.json` atomically
    (temp file + fsync + rename) on process 0, or with `stage` to its partial name
    (`<run_id>.json.partial`), which the training run commits with its other outputs
    (run/outputs.py): a directory removed since the start is made again; a write that fails (a
    full disk) leaves whatever record was there as it was, removes its temp file and raises
    UsageError naming the path.

    Returns the path written on process 0, None elsewhere.
    """
    if jax.process_index() != 0:
        return None
    path = check_writable(results_dir) / f"{run_id}.json"
    path = staged(path) if stage else path
    if not isinstance(record, dict):
        record = records.to_dict(record)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{run_id}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            as_created(f.fileno())
            json.dump(record, f, indent=2, sort_keys=False, default=_jsonable)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise UsageError(
            f"--results_dir={results_dir}: cannot write the record {path} ({e.strerror}); "
            "nothing there was replaced"
        ) from None
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
