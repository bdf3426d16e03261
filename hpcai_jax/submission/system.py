"""`system.json`: the system the packed runs ran on, from their records' provenance, plus what
the submitter adds (`--system_json`: the interconnect, above all, which no record can see)."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path

from hpcai_jax import records
from hpcai_jax.errors import UsageError

_PROVENANCE = (
    "backend",
    "device_kind",
    "device_count",
    "local_device_count",
    "process_count",
    "hosts",
    "number_of_nodes",
    "accelerators_per_node",
    "platform",
    "git_commit",
    "utc",
)


def _packing_host() -> dict:
    """What this host says of itself: CPUs and memory. The records do not hold them."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        memory = None
    return {
        "note": "the host `pack` ran on, which need not be a host of the runs: the records "
        "hold no CPU or memory figures",
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": cpu or None,
        "cpu_count": os.cpu_count(),
        "memory_bytes": memory,
    }


def user_file(path: str | None) -> dict:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--system_json={path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise UsageError(f"--system_json={path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--system_json={path}: expected a JSON object")
    return data


def describe(packed: list[records.TrainRecord], user: dict) -> dict:
    """Per run: devices (kind, count), hosts, versions; the runs' devices and software together;
    the packing host; then the submitter's own keys (a key the records determine is refused)."""
    runs, devices, software = {}, {}, {}
    for record in packed:
        prov = record.provenance
        fields = records.to_dict(prov)
        runs[record.run_id] = {k: fields.get(k) for k in _PROVENANCE} | {"versions": prov.versions}
        kind = prov.device_kind
        devices[kind] = max(devices.get(kind, 0), prov.device_count or 0)
        for name, version in prov.versions.items():
            seen = software.setdefault(name, [])
            if version not in seen:
                seen.append(version)
    derived = {
        "devices": [{"kind": k, "count": n} for k, n in devices.items()],
        "software": software,
        "runs": runs,
        "packing_host": _packing_host(),
        "interconnect": "not given (pack --system_json=FILE adds it)",
    }
    clash = sorted(set(user) & (set(derived) - {"interconnect"}))
    if clash:
        raise UsageError(
            f"--system_json: keys {', '.join(clash)} come from the records and cannot be given"
        )
    return derived | user
