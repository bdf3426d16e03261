"""A record's envelope with this machine's provenance (JAX's devices and versions, the hosts),
and its writing by process 0 only. The records' definitions, reader and writer are
`hpcai_jax/records/` (every field is listed in docs/record.md); this is what needs JAX.
"""

from __future__ import annotations

import collections
import datetime
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import jax

from hpcai_jax import gpu_settings, nodes, records
from hpcai_jax.records import write

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


def claim(results_dir: str, run_id: str, overwrite: bool, resuming: bool = False) -> write.Claim:
    """records/write.claim on process 0 (after every process checked the directory); a claim
    that holds nothing elsewhere."""
    write.check_writable(results_dir)
    if jax.process_index() != 0:
        return write.Claim()
    return write.claim(results_dir, run_id, overwrite, resuming)


def envelope(
    mode: str, run_id: str, status: str, config, reason: str = "", **sections
) -> records.AnyRecord:
    """The mode's typed record (`records.KINDS`): the common envelope, then the mode's sections.
    Every process must call it (the provenance gathers host names)."""
    if status not in records.STATUSES:
        raise ValueError(f"status {status!r}: expected one of {records.STATUSES}")
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


def write_record(
    results_dir: str, run_id: str, record: records.Record | dict, stage: bool = False
) -> Path | None:
    """records/write.write_record on process 0: the path written there, None elsewhere."""
    if jax.process_index() != 0:
        return None
    return write.write_record(results_dir, run_id, record, stage)
