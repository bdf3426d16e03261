"""hpcai_jax.nodes: which host a process is on, by the most specific source that names one."""

from __future__ import annotations

import socket

import pytest

from hpcai_jax import nodes


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HPCAI_JAX_NODE": "local-node1", "SLURMD_NODENAME": "gpu017"}, "local-node1"),
        ({"SLURMD_NODENAME": "gpu017", "SLURM_NODEID": "3"}, "gpu017"),
        ({"SLURM_NODEID": "3"}, "slurm-node3"),
        ({"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "t-w0,t-w1"}, "t-w1"),
        ({"TPU_WORKER_ID": "7", "TPU_WORKER_HOSTNAMES": "t-w0,t-w1"}, socket.gethostname()),
        ({"HPCAI_JAX_NODE": "  "}, socket.gethostname()),
        ({}, socket.gethostname()),
    ],
)
def test_node_name_precedence(env, expected):
    assert nodes.node_name(env) == expected


def test_single_process_devices_share_one_node(monkeypatch):
    monkeypatch.setenv("HPCAI_JAX_NODE", "x" * 200)  # longer than the allgather row: hashed
    assert nodes.process_nodes() == [nodes._encode("x" * 200).tobytes().rstrip(b"\0").decode()]
    assert set(nodes.device_node_index().values()) == {0}
    assert nodes.node_count() == 1
