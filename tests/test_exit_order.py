"""A lost peer ends every process with the lost-peer code, none aborted: process 0 hosts JAX's
coordination service and leaves last (distributed.end_in_order; docs/reliability.md)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from helpers import ROOT, subprocess_env

pytestmark = pytest.mark.multiprocess

JOIN_S = 300  # a loaded 2-core machine can take minutes to import JAX and join

# Process 1 is the peer that is gone. Process 2 ends late: its sleep is a stand-in for a process
# still blocked in a collective when process 0 has seen the loss (nothing it waits on could
# signal it: that is the case under test). Without process 0's wait, JAX's coordination client
# aborts process 2 (SIGABRT) as soon as process 0 exits.
WORKER = f"""
import os, signal, sys, time
import jax
jax.distributed.initialize(
    coordinator_address=sys.argv[1], num_processes=3, process_id=int(sys.argv[2]),
    initialization_timeout={JOIN_S},
)
from hpcai_jax import distributed
me = jax.process_index()
if me == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if me == 2:
    time.sleep(3)
distributed.end_in_order(f"process {{me}} lost a peer", 69)
"""


def test_process_zero_leaves_after_the_others_so_none_is_aborted():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, address, str(i)],
            cwd=ROOT,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(3)
    ]
    outputs = [p.communicate(timeout=JOIN_S + 60)[0] for p in procs]  # a hang's guard only
    codes = [p.returncode for p in procs]
    assert codes == [69, -9, 69], (codes, [o[-1500:] for o in outputs])
    assert "process 0 lost a peer" in outputs[0] and "process 2 lost a peer" in outputs[2]
