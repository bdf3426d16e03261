"""Honest multi-device STREAM figures: calls that overlap across processes (a barrier before
every call), and --stream_devices=each, one figure per device, measured alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from hpcai_jax.config import ResultsConfig
from hpcai_jax.settings import Settings
from hpcai_jax.stream import run_stream
from hpcai_jax.stream.benchmark import measure_each
from hpcai_jax.stream.config import StreamConfig

pytestmark = pytest.mark.slow  # each compiles and times STREAM on 8 devices or 2 processes

JOIN_S = 300  # a loaded 2-core machine can take minutes to import JAX and join
SLEEP_CALL, SLEEP_S = 2, 2.0

# Process 1 sleeps before its call SLEEP_CALL, outside the timing, once without the barrier and
# once with it; both processes write their call start times (perf_counter: CLOCK_MONOTONIC, the
# same clock for every process of this host) and when the sleeper woke.
WORKER = f"""
import json, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[2:])
import jax
jax.distributed.initialize(
    coordinator_address=args["coordinator_address"],
    num_processes=int(args["num_processes"]),
    process_id=int(args["process_id"]),
    initialization_timeout={JOIN_S},
)
import jax.numpy as jnp
from hpcai_jax.stream.kernels import KERNELS, compile_kernel, init_arrays
from hpcai_jax.stream.placement import make_placement
from hpcai_jax.stream.runner import run_kernels
from hpcai_jax.stream.sync import call_barrier

placement = make_placement("all")
kernel = compile_kernel(KERNELS["triad"], placement, 4096, jnp.float32)
barrier = call_barrier(placement)
me, out = jax.process_index(), {{}}
for name, sync in (("unsynced", None), ("synced", barrier)):
    calls, woke = [0], []

    def before():
        if me == 1 and calls[0] == {SLEEP_CALL}:
            time.sleep({SLEEP_S})
            woke.append(time.perf_counter())
        calls[0] += 1
        if sync is not None:
            sync()

    arrays = init_arrays(placement, 4096, jnp.float32)
    barrier()  # both runs start together; only the calls' own synchronisation differs
    run = run_kernels([kernel], arrays, 4, before)
    out[name] = {{
        "starts": run.starts_s["triad"].tolist(),
        "times": run.times_s["triad"].tolist(),
        "woke": woke[0] if woke else None,
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

    # Without the barrier, process 0 ran the call long before process 1 woke: the calls did
    # not overlap, yet an "aggregate" would have added them up.
    loose = p0["unsynced"]["starts"][SLEEP_CALL]
    assert loose < p1["unsynced"]["woke"] - SLEEP_S / 2

    synced, woke = p0["synced"], p1["synced"]["woke"]
    # With it, process 0 started that call only after process 1 woke ...
    assert synced["starts"][SLEEP_CALL] >= woke
    # ... every call started together on both processes ...
    for k in range(4):
        assert abs(synced["starts"][k] - p1["synced"]["starts"][k]) < SLEEP_S / 4, k
    # ... and the wait is not in the call's time (the job's time: the slowest process's).
    assert synced["times"][SLEEP_CALL] < SLEEP_S / 4
    assert synced["times"] == p1["synced"]["times"]


def _config(tmp_path, **stream) -> Settings:
    return Settings(
        mode="stream",
        stream=StreamConfig(**{"array_size": 1 << 12, "num_times": 2, **stream}),
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
    record = json.loads(path.read_text())
    assert record["placement"]["mode"] == "each" and record["placement"]["num_devices"] == 8
    per_device = record["per_device"]
    assert [d["device_id"] for d in per_device] == list(range(8))
    rates = [d["kernels"]["triad"]["gb_per_s"] for d in per_device]
    assert all(r > 0 for r in rates) and len(set(rates)) > 1  # measured, not divided
    assert record["kernels"]["triad"]["gb_per_s"] == min(rates)
    assert record["figure_of_merit"]["gb_per_s"] == min(rates)
    # The table's rate column is each device's own MBytes/sec.
    assert [float(r[2]) for r in rows] == pytest.approx([r * 1e3 for r in rates], abs=5e-4)


def test_each_measures_every_device_alone_with_full_arrays():
    results = measure_each(StreamConfig(array_size=1 << 12, num_times=2, kernels="nstream"))
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
    [record] = [json.loads(p.read_text()) for p in tmp_path.glob("stream-*.json")]
    assert [(str(d["device_id"]), d["process_index"]) for d in record["per_device"]] == [
        (r[0], int(r[1])) for r in rows
    ]
    assert len({d["device_id"] for d in record["per_device"]}) == 8
    assert record["validation"]["passed"] and record["placement"]["process_count"] == 2
