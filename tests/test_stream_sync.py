"""Honest multi-device STREAM figures: calls that overlap across processes (a barrier before
every call), and --stream_devices=each, one figure per device, measured alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from hpcai_jax import records
from hpcai_jax.config import ResultsConfig
from hpcai_jax.settings import Settings
from hpcai_jax.stream import run_stream
from hpcai_jax.stream.benchmark import measure_each
from hpcai_jax.stream.config import StreamConfig

pytestmark = pytest.mark.slow  # each compiles and times STREAM on 8 devices or 2 processes

JOIN_S = 300  # a loaded 2-core machine can take minutes to import JAX and join
SLEEP_CALL, SLEEP_S = 2, 2.0

# Process 1 is late for its call SLEEP_CALL, outside the timing, once without the barrier and
# once with it. Without it, process 1 waits until process 0 has finished that call (process 0
# leaves a file when it reaches the next one): an event, so that the order asserted holds on any
# load. With it, process 1 sleeps SLEEP_S (a stand-in for a late process: the barrier must hold
# process 0 however long; the length only makes a missing barrier obvious). Both processes
# write when they arrived at each call and when its timing started (perf_counter:
# CLOCK_MONOTONIC, the same clock for every process of this host) and when the late one woke.
WORKER = f"""
import json, os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[2:])
import jax
jax.distributed.initialize(
    coordinator_address=args["coordinator_address"],
    num_processes=int(args["num_processes"]),
    process_id=int(args["process_id"]),
    initialization_timeout={JOIN_S},
)
import jax.numpy as jnp
from hpcai_jax.stream.kernels import KERNELS, compile_kernel
from hpcai_jax.stream.layout import init_arrays
from hpcai_jax.stream.placement import make_placement
from hpcai_jax.stream.runner import run_kernels
from hpcai_jax.stream.sync import call_barrier

placement = make_placement("all")
kernel = compile_kernel(KERNELS["triad"], placement, 4096, jnp.float32)
barrier = call_barrier(placement)
me, out = jax.process_index(), {{}}
for name, sync in (("unsynced", None), ("synced", barrier)):
    calls, woke, arrived = [0], [], []
    passed = f"{{sys.argv[1]}}/p0-passed-{{name}}"

    def before():
        if me == 0 and calls[0] == {SLEEP_CALL} + 1:
            open(passed, "w").close()  # process 0 has finished the call process 1 is late for
        if me == 1 and calls[0] == {SLEEP_CALL}:
            if sync is None:  # a poll: the file is process 0's only sign (deadline: JOIN_S)
                deadline = time.monotonic() + {JOIN_S}
                while not os.path.exists(passed) and time.monotonic() < deadline:
                    time.sleep(0.01)
            else:
                time.sleep({SLEEP_S})
            woke.append(time.perf_counter())
        calls[0] += 1
        arrived.append(time.perf_counter())
        if sync is not None:
            sync()

    arrays, _ = init_arrays(placement, 4096, jnp.float32, spaced=True)
    barrier()  # both runs start together; only the calls' own synchronisation differs
    run = run_kernels([kernel], arrays, 4, before)
    out[name] = {{
        "starts": run.starts_s["triad"].tolist(),
        "times": run.times_s["triad"].tolist(),
        "woke": woke[0] if woke else None,
        "arrived": arrived,
    }}
with open(f"{{sys.argv[1]}}/p{{me}}.json", "w") as f:
    json.dump(out, f)
"""


def _launch(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "launch/local.py",
            "--num_processes=2",
            "--devices_per_process=4",
            f"--timeout_s={JOIN_S + 120}",
            "--",
            *command,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=JOIN_S + 180,
    )


@pytest.mark.multiprocess
def test_a_sleeping_process_delays_the_others_start_of_that_call(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    proc = _launch(sys.executable, str(worker), str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    p0, p1 = (json.loads((tmp_path / f"p{i}.json").read_text()) for i in (0, 1))

    # Without the barrier, process 0 ran the call before process 1 woke: the calls did not
    # overlap, yet an "aggregate" would have added them up.
    assert p0["unsynced"]["starts"][SLEEP_CALL] < p1["unsynced"]["woke"]

    synced, woke = p0["synced"], p1["synced"]["woke"]
    # With it, process 0 started that call only after process 1 woke: the wait is before the
    # call's timing starts, so not in its time ...
    assert synced["starts"][SLEEP_CALL] >= woke
    # ... and every call started, on both processes, only once both had arrived at it ...
    for k in range(4):
        arrived = max(synced["arrived"][k], p1["synced"]["arrived"][k])
        assert arrived <= min(synced["starts"][k], p1["synced"]["starts"][k]), k
    # ... and a call's time is the job's: the slowest process's, the same on both.
    assert synced["times"] == p1["synced"]["times"]


def _config(tmp_path, **stream) -> Settings:
    return Settings(
        mode="stream",
        stream=StreamConfig(
            **{"allow_small_arrays": True, "array_size": 1 << 12, "num_times": 2, **stream}
        ),
        results=ResultsConfig(results_dir=str(tmp_path)),
    ).validate()


def test_each_gives_one_figure_per_device(tmp_path, capsys):
    assert run_stream(_config(tmp_path, devices="each", kernels="triad")) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index(next(x for x in out if x.startswith("Each device alone (8 devices")))
    rows = [line.split() for line in out[start + 2 : start + 10]]
    assert [r[:2] for r in rows] == [[str(i), "0"] for i in range(8)]
    assert "the slowest of 8 devices, each measured alone" in out[-1]
    [path] = tmp_path.glob("stream-*.json")
    record = records.read(path)
    assert record.placement.mode == "each" and record.placement.num_devices == 8
    per_device = record.per_device
    assert [d.device_id for d in per_device] == list(range(8))
    rates = [d.kernels["triad"].gb_per_s for d in per_device]
    assert all(r > 0 for r in rates) and len(set(rates)) > 1  # measured, not divided
    assert record.kernels["triad"].gb_per_s == min(rates)
    assert record.figure_of_merit.gb_per_s == min(rates)
    # The table's rate column is each device's own MBytes/sec.
    assert [float(r[2]) for r in rows] == pytest.approx([r * 1e3 for r in rates], abs=5e-4)


def test_each_measures_every_device_alone_with_full_arrays():
    results = measure_each(
        StreamConfig(allow_small_arrays=True, array_size=1 << 12, num_times=2, kernels="nstream")
    )
    assert [r.placement.devices[0].id for r in results] == list(range(8))
    assert all(r.placement.num_devices == 1 and r.elements == 1 << 12 for r in results)
    assert all(r.validation.passed and r.buffer_reused == {"nstream": True} for r in results)


@pytest.mark.multiprocess
def test_each_across_two_processes_reports_all_eight_devices(tmp_path):
    proc = _launch(
        sys.executable,
        "-m",
        "hpcai_jax.main",
        "--mode=stream",
        "--stream_devices=each",
        "--stream_kernels=triad",
        "--array_size=4096",
        "--allow_small_arrays",
        "--num_times=2",
        "--csv",
        f"--distributed_timeout_s={JOIN_S}",
        f"--results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [x.removeprefix("[p0] ") for x in proc.stdout.splitlines() if x.startswith("[p0] ")]
    start = lines.index(next(x for x in lines if x.startswith("device,process,function,")))
    rows = [x.split(",") for x in lines[start + 1 : start + 9]]
    assert [(r[1], r[2]) for r in rows] == [(str(d // 4), "Triad") for d in range(8)]
    [record] = [records.read(p) for p in tmp_path.glob("stream-*.json")]
    assert [(str(d.device_id), d.process_index) for d in record.per_device] == [
        (r[0], int(r[1])) for r in rows
    ]
    assert len({d.device_id for d in record.per_device}) == 8
    assert record.validation.passed and record.placement.process_count == 2
