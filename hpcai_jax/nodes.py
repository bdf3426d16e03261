"""Which node (host) each process and device is on, so traffic and bandwidth can be split into
intra-node and inter-node.

A node is a host: the name SLURM gives the node a task runs on, a TPU pod worker's host, else the
machine's hostname. Several processes of one node (one per GPU under launch/slurm/) are intra-node
to each other. `launch/local.py --processes_per_node=K` sets HPCAI_JAX_NODE so that tests can
make several "nodes" on one machine; it takes precedence over everything else.
"""

from __future__ import annotations

import os
import socket

import jax
import numpy as np

from hpcai_jax import distributed

NODE_ENV = "HPCAI_JAX_NODE"
_NAME_BYTES = 64  # node names are padded to this for the allgather; longer ones are hashed


def node_name(env=None) -> str:
    """This process's node, from the most specific source that names one."""
    env = os.environ if env is None else env
    for var in (NODE_ENV, "SLURMD_NODENAME"):
        if env.get(var, "").strip():
            return env[var].strip()
    if env.get("SLURM_NODEID", "").strip():
        return f"slurm-node{env['SLURM_NODEID'].strip()}"
    if env.get("TPU_WORKER_ID", "").strip() and env.get("TPU_WORKER_HOSTNAMES", "").strip():
        hosts = env["TPU_WORKER_HOSTNAMES"].split(",")
        worker = int(env["TPU_WORKER_ID"]) if env["TPU_WORKER_ID"].isdigit() else -1
        if 0 <= worker < len(hosts):
            return hosts[worker].strip()
    return socket.gethostname()


def _encode(name: str) -> np.ndarray:
    raw = name.encode()
    if len(raw) > _NAME_BYTES:
        import hashlib

        raw = hashlib.sha256(raw).hexdigest().encode()[:_NAME_BYTES]
    return np.frombuffer(raw.ljust(_NAME_BYTES, b"\0"), dtype=np.uint8)


def process_nodes() -> list[str]:
    """Every process's node name, in process order. A collective: every process calls it."""
    names = distributed.allgather(_encode(node_name()))
    return [bytes(row).rstrip(b"\0").decode() for row in names]


def device_node_index(devices=None) -> dict[int, int]:
    """Device id → node index (0, 1, ... in order of first appearance by process).
    A collective when there are several processes."""
    names = process_nodes()
    order = list(dict.fromkeys(names))
    devices = jax.devices() if devices is None else devices
    return {d.id: order.index(names[d.process_index]) for d in devices}


def node_count() -> int:
    """Distinct nodes in the job. A collective when there are several processes."""
    return len(set(process_nodes()))
