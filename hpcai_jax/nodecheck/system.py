"""The rows about the machine itself: its devices (and their datasheet entries), the host's
cores and memory, and whether the devices' energy counters can be read."""

from __future__ import annotations

import os
import zlib

import jax
import numpy as np

from hpcai_jax import nodes
from hpcai_jax.distributed import allgather
from hpcai_jax.flops.peaks import device_row
from hpcai_jax.nodecheck import expectations
from hpcai_jax.nodecheck.rows import FAIL, PASS, WARN, Row, not_judged
from hpcai_jax.stream.datasheet import memory_bandwidth
from hpcai_jax.telemetry.energy import read_energy


def host_cores() -> int:
    """Cores this process may run on (its affinity, as a scheduler's cgroup sets it)."""
    return len(os.sched_getaffinity(0))


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def describe() -> dict:
    """The record's section about devices, nodes and this host. A collective (node names)."""
    devices = jax.devices()
    kind = devices[0].device_kind
    names = nodes.process_nodes()
    return {
        "backend": jax.default_backend(),
        "device_kind": kind,
        "device_count": len(devices),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "nodes": sorted(set(names)),
        "node_of_process": names,
        "peaks_row": device_row(kind),
        "memory_bandwidth": memory_bandwidth(kind),
        "link": expectations.link_bandwidth(kind),
        "host_cores": host_cores(),
        "host_memory_bytes": host_memory_bytes(),
    }


def device_rows(info: dict) -> list[Row]:
    """Every process sees the same device kind and count; the kind is in the datasheet tables.
    An unknown accelerator is named, its datasheet figures left blank (WARN)."""
    local = np.asarray(
        [jax.local_device_count(), zlib.crc32(info["device_kind"].encode()) % (1 << 31)]
    )
    everyone = allgather(local).reshape(-1, 2)
    same = bool((everyone == everyone[0]).all())
    count = info["device_count"]
    expected = jax.process_count() * int(everyone[0][0])
    kind, backend = info["device_kind"], info["backend"]
    if not same:
        status, note = FAIL, "processes differ in local device count or kind"
    elif backend == "cpu":
        status = PASS
        machine = expectations.CPU_MACHINE_CLASS
        note = f"{kind}: no datasheet; CPU rows compare with a reference machine's ({machine})"
    elif info["peaks_row"] and info["memory_bandwidth"]:
        status, note = PASS, f"{kind}: datasheet row {info['peaks_row']}"
    else:
        status = WARN
        note = f"{kind!r} is in no datasheet table: its ratios are n/a (not guessed)"
    nodes_note = f"{len(info['nodes'])} node(s): {', '.join(info['nodes'])}"
    return [
        Row(
            "devices",
            status,
            float(count),
            float(expected),
            "devices",
            "processes x local devices of process 0",
            f"{note}; {nodes_note}",
        )
    ]


def host_rows(info: dict) -> list[Row]:
    """Cores per local device: an accelerator needs a core to dispatch its steps (and more to
    decode its images: the input row). CPU devices share the cores by design: not judged (n/a)."""
    cores, local = info["host_cores"], info["local_device_count"]
    memory = info["host_memory_bytes"]
    note = f"{cores} cores, {memory / 2**30:.1f} GiB" if memory else f"{cores} cores"
    if info["backend"] == "cpu":
        why = "; not judged: CPU devices share the host's cores by design"
        return [not_judged("host cores per device", cores / local, "cores", note + why)]
    status = PASS if cores >= local else WARN
    return [
        Row(
            "host cores per device",
            status,
            cores / local,
            1.0,
            "cores",
            "one core per device dispatches its steps",
            note,
        )
    ]


def energy_rows() -> list[Row]:
    """The energy counters of this process's devices read twice, the second at least the first.
    A CPU has none to read: not judged (n/a). Where an accelerator has none (TPU, no
    nvidia-ml-py) the row WARNs saying why."""
    first = read_energy()
    if not first.available and jax.default_backend() == "cpu":
        return [not_judged("energy counters", None, "", f"not judged on a CPU: {first.why}")]
    if not first.available:
        return [Row("energy counters", WARN, note=first.why)]
    second = read_energy()
    ok = second.available and all(
        b >= a for a, b in zip(first.millijoules, second.millijoules, strict=True)
    )
    joules = sum(second.millijoules) / 1e3
    return [
        Row(
            "energy counters",
            PASS if ok else FAIL,
            joules,
            None,
            "J",
            "NVML total energy, local devices",
            "readable, non-decreasing" if ok else "counter went backwards or stopped reading",
        )
    ]
