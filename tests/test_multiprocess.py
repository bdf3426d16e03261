"""Several JAX processes on this machine form one job: same results as one process, SLURM
auto-detection, and a dead peer that stops the job instead of hanging it."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, packs_and_passes_check, run_in_process, subprocess_env
from test_reliability import _final_params, _leaves

from hpcai_jax import records

pytestmark = pytest.mark.multiprocess

# Seconds the processes may take to start and join: a loaded machine can spend minutes on importing
# JAX alone. Every outer limit (the launcher's --timeout_s, then the test's own) is larger still.
JOIN_S = 300


# The smallest model: what is tested is the job (its joining, sampling, collectives, record and
# end), not the model.
SMALL = [
    "--workload=regression",
    "--model=mlp",
    "--dataset=friedman1",
    "--ensemble_size=4",
    "--parallel_degree=2",
    "--batch_size=16",
    "--train_examples=256",
    "--eval_examples=64",
    "--log_every=1",
    f"--distributed_timeout_s={JOIN_S}",
    "--target_quality=0.9",
]


RUN = [*SMALL, "--steps=6"]


def _launch(*args, timeout, **kwargs):
    return subprocess.run(
        [sys.executable, "launch/local.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_job(launcher: list[str], main: list[str]) -> subprocess.Popen:
    """`launch/local.py LAUNCHER -- python -m hpcai_jax.main MAIN`, its output piped, in a session
    of its own (a test that fails can kill the whole job)."""
    return subprocess.Popen(
        [sys.executable, "launch/local.py", *launcher, "--", sys.executable, "-m", "hpcai_jax.main"]
        + main,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def read_until(proc: subprocess.Popen, output: list[str], prefix: str, text: str) -> None:
    """Reads the job's lines into `output` up to the first of process `prefix` holding `text`."""
    for line in proc.stdout:
        output.append(line)
        if line.startswith(prefix) and text in line:
            return


def pids_of(proc: subprocess.Popen, index: int, output: list[str]) -> list[int]:
    """Process `index` of this launcher only (its child: other tests' jobs run beside this one)."""
    ps = subprocess.run(
        ["pgrep", "-P", str(proc.pid), "-f", "--", f"--process_id={index}$"],
        capture_output=True,
        text=True,
    )
    pids = [int(p) for p in ps.stdout.split()]
    assert pids, "".join(output)
    return pids


# One member per process, and no agreement between the processes before the run's end.
ONE_MEMBER_EACH = [
    *[f for f in SMALL if not f.startswith(("--parallel_degree", "--log_every"))],
    "--parallel_degree=1",
    "--log_every=100000",
    "--divergence_check_every=100000",
]


def _slurm_step(*args: str) -> list[str]:
    """Two processes of a hand-made SLURM step on this machine (JAX auto-detects it: no
    distributed flags), 4 CPU devices each, each on its own node as SLURM names it
    (SLURMD_NODENAME); returns each process's output."""
    port = _free_port()
    procs = []
    for rank in range(2):
        env = subprocess_env(
            4,
            SLURM_JOB_ID="4242",
            SLURM_STEP_NODELIST="localhost",
            SLURM_NTASKS="2",
            SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(rank),
            SLURMD_NODENAME=f"node{rank}",
            JAX_COORDINATOR_PORT=str(port),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "hpcai_jax.main", *args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=JOIN_S + 300)[0])
    finally:
        for proc in procs:
            proc.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    return outputs


def test_two_processes_match_one_process(tmp_path):
    """One job of 2 processes × 4 devices, joined by SLURM auto-detection, trains what one
    process of 8 devices trains; each process derives its own members' samples."""
    single = run_in_process(
        *RUN, f"--checkpoint_dir={tmp_path}/ck1", f"--results_dir={tmp_path}/r1"
    )
    assert single.returncode == 0, single.stderr[-2000:]
    outputs = _slurm_step(*RUN, f"--checkpoint_dir={tmp_path}/ck2", f"--results_dir={tmp_path}/r2")
    assert "auto-detected slurm" in outputs[1] and "process 1 of 2" in outputs[1]

    one = records.read(next((tmp_path / "r1").glob("*.json")))
    paths = list((tmp_path / "r2").glob("*.json"))
    assert len(paths) == 1  # process 0 writes, alone
    two = records.read(paths[0])
    assert two.provenance.process_count == 2 and two.provenance.device_count == 8
    assert len(two.provenance.hosts) == 2
    assert two.quality.ensemble == pytest.approx(one.quality.ensemble, abs=1e-9)
    np.testing.assert_allclose(two.quality.members, one.quality.members, atol=1e-9)
    assert two.flops.per_step == pytest.approx(one.flops.per_step, rel=0.01)
    # Each process builds the out-of-bag votes of its own devices' members: the same estimate.
    oob_one, oob_two = one.quality.oob, two.quality.oob
    assert oob_two.quality == pytest.approx(oob_one.quality)
    assert oob_two.mean_voters == pytest.approx(oob_one.mean_voters)
    assert (oob_two.scored, oob_two.subset, oob_two.why_none) == (
        oob_one.scored,
        oob_one.subset,
        oob_one.why_none,
    )
    # Members 2 and 3 live on process 1's devices: their figures are process 1's own.
    assert two.data.distinct_fraction == one.data.distinct_fraction
    # Two nodes, and each member's 2 devices on one of them: its gradient all-reduce never
    # crosses (telemetry/comm.py; tests/test_comm.py has a member spanning two nodes).
    assert (one.comm.nodes, two.comm.nodes) == (1, 2)
    # The provenance (and MLLOG) count nodes the same way (hpcai_jax.nodes), not by hostname.
    assert two.provenance.number_of_nodes == 2
    assert two.provenance.hosts == ["node0", "node1"]
    assert two.comm.link_bytes == one.comm.link_bytes
    assert two.comm.link_bytes.inter_node == 0 < two.comm.link_bytes.intra_node

    _, params_one = _final_params(tmp_path / "ck1")
    _, params_two = _final_params(tmp_path / "ck2")
    # The cross-process all-reduce (gloo) sums in another order than one process does: float32
    # rounding, ~1e-6 after 6 steps. A desynchronised or wrongly reduced run differs by ~1e-2.
    for a, b in zip(_leaves(params_one), _leaves(params_two), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=5e-6)


KILLED = [*SMALL, "--steps=300", "--log_every=10", "--checkpoint_every=20"]


def test_a_killed_process_ends_the_job_as_lost_and_the_resume_matches(tmp_path):
    """kill -9 of one process of four mid-run: the job ends within seconds with the lost-peer
    code (69: requeued on SLURM), no record written; the resume from the last periodic
    checkpoint (here one process of 8 devices: another machine shape) ends at the parameters
    of an uninterrupted run (docs/reliability.md, Exit codes and Faults)."""
    mllog = f"--mllog={tmp_path}/run.mllog"
    outcome = tmp_path / "job.json"
    proc = start_job(
        ["--num_processes=4", "--devices_per_process=2", "--grace_s=5", f"--result={outcome}"],
        [*KILLED, f"--checkpoint_dir={tmp_path}/ck", f"--results_dir={tmp_path}/r", mllog],
    )
    output = []
    try:
        read_until(proc, output, "[p0] ", "step 60/300")
        for pid in pids_of(proc, 1, output):
            os.kill(pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=JOIN_S)  # a hang's guard, not a figure under test
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(output) + rest
    assert proc.returncode == 69, text[-3000:]
    # The launcher's own account: the killed process named, whichever of the others noticed
    # (and exited with the lost-peer code) before the launcher looked. None aborted: a process
    # that sees the loss exits at once, without a clean-up that JAX's coordination client could
    # abort midway (those the launcher stopped first may end by its SIGTERM, or its SIGKILL).
    job = json.loads(outcome.read_text())
    assert job["first"] == {"process": 1, "returncode": -9, "signal": "SIGKILL"}, job
    assert job["exit_code"] == 69 and job["reason"] == "failed", job
    aborted = [p["process"] for p in job["processes"] if p["returncode"] == -signal.SIGABRT]
    # On failure, each aborted process's last lines: what aborted it (seen once in 20 rounds
    # beside a burner, 2026-12-06, without them).
    last = {i: [x for x in text.splitlines() if x.startswith(f"[p{i}]")][-12:] for i in aborted}
    assert not aborted, (job, last)
    assert "Fatal Python error" not in text, text[-3000:]
    # No traceback through this package's code. (orbax's background commit of a save in flight
    # logs its own, when process 0's exit takes the coordination service with it: seen once in
    # 20 rounds under load; that thread is orbax's, and the process still exits 69.)
    assert not re.search(r'File "[^"]*hpcai_jax/', text), text[-3000:]
    assert not list((tmp_path / "r").glob("*.json"))  # no record of a run that did not finish
    resumed = run_in_process(
        *KILLED, f"--checkpoint_dir={tmp_path}/ck", f"--results_dir={tmp_path}/r", mllog
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # The log died without its segment_stop: cut back to the checkpoint's lines, the segment
    # closed there, the resumed one appended; the run packs and passes submission check.
    assert "the log is cut back to the checkpoint's" in resumed.stderr
    assert packs_and_passes_check(next((tmp_path / "r").glob("*.json")), tmp_path)
    record = records.read(next((tmp_path / "r").glob("*.json")))
    # From a periodic checkpoint: the newest complete one (the one in flight at the kill, or a
    # process that lagged behind process 0, may leave it one period back).
    at = record.resumes[0].at_step
    assert record.status == "complete" and 20 <= at < 300 and at % 20 == 0, at
    whole = run_in_process(
        *KILLED, f"--checkpoint_dir={tmp_path}/ck1", f"--results_dir={tmp_path}/r1"
    )
    assert whole.returncode == 0, whole.stderr[-2000:]
    _, params_resumed = _final_params(tmp_path / "ck")
    _, params_whole = _final_params(tmp_path / "ck1")
    for a, b in zip(_leaves(params_whole), _leaves(params_resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=5e-6)


def test_stream_across_two_processes_reports_all_eight_devices(tmp_path):
    proc = _launch(
        "--num_processes=2",
        "--devices_per_process=4",
        f"--timeout_s={JOIN_S + 200}",
        "--",
        sys.executable,
        "-m",
        "hpcai_jax.main",
        "--mode=stream",
        "--stream_devices=all",
        f"--distributed_timeout_s={JOIN_S}",
        "--array_size=1048576",
        "--allow_small_arrays",
        "--num_times=5",
        f"--results_dir={tmp_path}",
        timeout=JOIN_S + 260,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "[p0] Figure of merit: Triad" in out and "[p1] Figure of merit" not in out
    paths = list(tmp_path.glob("*.json"))
    assert len(paths) == 1  # process 0 reports
    record = records.read(paths[0])
    # Placed on all 8 devices of the 2 processes.
    assert record.placement.num_devices == 8 and record.placement.process_count == 2
    # 8 MiB per array by hand, below the 4x-cache rule: validated, and marked as such.
    assert record.validation.passed and record.status == "small_arrays"


def epochs_logged(mllog: Path) -> int:
    """Process 0's epoch_stop lines so far, from its MLLOG under its final or partial name."""
    for path in (mllog, mllog.with_name(mllog.name + ".partial")):
        with contextlib.suppress(FileNotFoundError):
            return path.read_text().count('"key": "epoch_stop"')
    return 0


def wait_for_epochs(mllog: Path, count: int) -> None:
    """A poll with a deadline: process 0's MLLOG is the one sign of its progress that needs no
    other process (its progress lines would gather from all)."""
    deadline = time.monotonic() + JOIN_S
    while epochs_logged(mllog) < count:
        assert time.monotonic() < deadline, f"process 0 logged {epochs_logged(mllog)} epochs"
        time.sleep(0.05)


def main_thread_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) that process `pid`'s main thread has run so far."""
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # from the state on: utime and stime are 12th, 13th
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_steps(pids: list[int], cpu_s: float = 0.02) -> None:
    """Once process 0 has started its steps, all processes have left the barrier before timing
    (run/trainer.py): the main thread of one that waits there runs nothing, and after it only
    the run clock's start comes before the steps. `cpu_s` of its CPU time from then on is its
    steps': its run clock is running, and a stop lands in one of its timed steps. A poll with a
    deadline, as `wait_for_epochs`."""
    start = {pid: main_thread_cpu_s(pid) for pid in pids}
    deadline = time.monotonic() + JOIN_S
    while any(main_thread_cpu_s(pid) - start[pid] < cpu_s for pid in pids):
        assert time.monotonic() < deadline, "process 2 ran no steps"
        time.sleep(0.01)


def test_a_stalled_process_delays_only_itself_and_its_epoch(tmp_path):
    """Four processes, one member each: process 2 is stopped (SIGSTOP) mid-run, early in its
    steps, until process 0 has finished an epoch more. The other members' steps do not wait for
    it (no collective of the step spans two members, and the host meets only at the end): were
    they to wait, process 0 would never finish that epoch. Eq. 6's epoch time is the slowest
    process's."""
    mllog = tmp_path / "run.mllog"
    proc = start_job(
        [
            "--num_processes=4",
            "--devices_per_process=1",
            "--grace_s=5",
            f"--timeout_s={JOIN_S + 200}",
        ],
        [
            *ONE_MEMBER_EACH,
            "--train_examples=8192",  # 512 steps of 16 an epoch
            # Epochs enough that process 2 is still in its steps when the stop lands, and
            # process 0 has one to finish while it is stopped. The stop is cued by process 2's
            # first steps (wait_for_steps), not by process 0's first epoch, which a loaded
            # machine once made longer than all of process 2's run (6 epochs then, 16 after);
            # process 0 would have to run many times process 2's pace to be done before it.
            "--epochs=6",
            "--timing_warmup_steps=0",  # every step timed: the stop lands in one
            f"--results_dir={tmp_path}",
            f"--mllog={mllog}",
        ],
    )
    output = []
    try:
        read_until(proc, output, "[p0] ", "process 0: training steps")
        pids = pids_of(proc, 2, output)
        wait_for_steps(pids)  # process 2 is in its steps
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_for_epochs(mllog, epochs_logged(mllog) + 1)
        stall = time.monotonic() - stopped_at  # the stop, as this process saw it
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        rest, _ = proc.communicate(timeout=JOIN_S + 300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(output) + rest
    assert proc.returncode == 0, text[-3000:]
    record = records.read(next(tmp_path.glob("*.json")))
    per = record.timing.per_process
    assert [p.process_index for p in per] == [0, 1, 2, 3]
    assert [p.members for p in per] == [[0], [1], [2], [3]]
    stalled = int(np.argmax(per[2].epoch_wall_s))  # the epoch process 2 was stopped in
    walls = [p.epoch_wall_s[stalled] for p in per]
    # The stopped process: a step holding the whole stop (it began before the SIGSTOP and ended
    # after the SIGCONT), inside that epoch's wall time.
    assert per[2].step_s.max_s >= stall, per
    assert walls[2] >= per[2].step_s.max_s, walls
    # Eq. 6's epochs are the slowest process's, and FLOPS is computed from them.
    epochs = record.epochs
    for i, epoch in enumerate(epochs):
        assert epoch.wall_s == pytest.approx(max(p.epoch_wall_s[i] for p in per))
    # ... so the job's epoch holds the stop too (another process, slow on a loaded machine, may
    # have taken longer still: the stop need not be the slowest).
    assert epochs[stalled].wall_s >= walls[2]
    assert record.metrics.flops_per_s == pytest.approx(
        sum(e.flops for e in epochs) / sum(e.wall_s for e in epochs), rel=1e-9
    )
