"""The hang watchdog (run/guards.py): a step or a wait for the other processes far longer
than the median step, or a checkpoint save or an eval batch longer than --watchdog_min_s, ends
the process with HUNG_EXIT_CODE and one line; stalls of a few seconds are left alone."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from helpers import FakeClock, packs_and_passes_check, run_in_process

from hpcai_jax import records
from hpcai_jax.run import checkpoint_interval as interval_rule
from hpcai_jax.run import guards, hooks
from hpcai_jax.run.guards import HUNG_EXIT_CODE, Watchdog


def test_the_limit_is_the_factor_times_the_median_and_at_least_the_floor():
    dog = Watchdog(factor=100, min_s=5, process=0, exit=lambda code: None)
    try:
        assert dog.limit_s(None) == 5 and dog.limit_s(0.01) == 5 and dog.limit_s(0.2) == 20
    finally:
        dog.close()


# The unit tests below run the watchdog's thread on a fake clock: `time` in run/guards.py is
# replaced by one whose monotonic() only the test moves. A floor of FLOOR_FAKE_S keeps the
# thread re-reading it every few hundredths of a real second while armed, so a deadline passed on
# the fake clock ends the "process" at once; one never passed cannot, whatever the machine's load.
FLOOR_FAKE_S = 0.05
# How long a disarmed watchdog is given to fire wrongly: many of its polls at FLOOR_FAKE_S.
SILENT_S = 0.3
# A bound for a deadline passed on the fake clock to be acted on (met in a few ms).
FIRES_WITHIN_S = 30


@pytest.fixture
def fake_time(monkeypatch):
    fake = FakeClock()  # stands for the `time` module in run/guards.py
    monkeypatch.setattr(guards, "time", fake)
    return fake


def _dog(process: int):
    """A watchdog at the fake floor whose `exit` records the code and says so."""
    exits, fired = [], threading.Event()

    def exit(code):
        exits.append(code)
        fired.set()

    return Watchdog(factor=10, min_s=FLOOR_FAKE_S, process=process, exit=exit), exits, fired


def test_an_armed_deadline_that_passes_ends_the_process_and_a_disarmed_one_does_not(
    capfd, fake_time
):
    dog, exits, fired = _dog(3)
    try:
        dog.arm("step 7", 0.001)  # the floor: 10 x 1 ms is less
        fake_time.advance(0.04)
        dog.disarm()  # finished in time
        fake_time.advance(1000)
        assert not fired.wait(SILENT_S) and exits == []
        dog.arm("step 8", 0.001)
        fake_time.advance(0.06)
        assert fired.wait(FIRES_WITHIN_S)
        assert exits == [HUNG_EXIT_CODE]
    finally:
        dog.close()
    err = capfd.readouterr().err
    assert "process 3 hung: step 8 has not finished after 0 s" in err
    assert err.count("hung") == 1


class _Clock:
    @contextlib.contextmanager
    def checkpointing(self):
        yield


class _Checkpointer:
    def due(self, step: int) -> bool:
        return step % 2 == 0


def test_a_checkpoint_save_is_bounded_by_the_floor(capfd, monkeypatch, fake_time):
    """A save that never returns (a hung file system, a peer stopped inside orbax's barriers)
    ends the process with the hung code at --watchdog_min_s, however short the steps; one that
    returns leaves the watchdog disarmed for the next step to arm."""
    dog, exits, fired = _dog(1)
    save_s = [0.04]

    def save(ctx, step):  # takes save_s on the fake clock; one past the floor hangs
        fake_time.advance(save_s[0])
        if save_s[0] > FLOOR_FAKE_S:
            fired.wait(FIRES_WITHIN_S)

    monkeypatch.setattr(hooks.Context, "save", save)
    ctx = hooks.Context(None, None, None, _Clock(), None, None, _Checkpointer(), 10, dog)
    checkpoint = hooks.Checkpoint(interval_rule.fixed(2), _Checkpointer(), total=10)
    run = hooks.Services(ctx)

    def after(done: int) -> hooks.StepInfo:
        return hooks.StepInfo(done, 10, None, None, None)

    try:
        assert checkpoint.due(after(2)) and not checkpoint.due(after(3))  # every 2 steps
        checkpoint(after(2), run)  # in time
        fake_time.advance(1000)
        assert not fired.wait(SILENT_S) and exits == []
        save_s[0] = 1.0  # past the floor
        checkpoint(after(4), run)
        assert exits == [HUNG_EXIT_CODE]
    finally:
        dog.close()
    err = capfd.readouterr().err
    assert "process 1 hung: the checkpoint save of step 4 has not finished after 0 s " in err
    assert "(--watchdog_min_s); exit 69" in err


def test_an_eval_batch_is_bounded_by_the_floor_and_the_end_disarms(capfd, fake_time):
    """run/evaluation._watched: each batch re-arms the watchdog at its floor (an evaluation of
    many batches may take long, one batch may not); the evaluation's end disarms it."""
    from hpcai_jax.run import evaluation

    dog, exits, fired = _dog(2)
    try:
        with evaluation._watched(dog, step=7) as on_batch:
            for done in range(3):  # 0.12 s in all, each batch within the floor
                on_batch(done, 4)
                fake_time.advance(0.04)
        fake_time.advance(1000)  # ended: disarmed
        assert not fired.wait(SILENT_S) and exits == []
        with evaluation._watched(dog, step=7) as on_batch:
            on_batch(3, 4)
            fake_time.advance(1.0)
            assert fired.wait(FIRES_WITHIN_S)
        assert exits == [HUNG_EXIT_CODE]
    finally:
        dog.close()
    err = capfd.readouterr().err
    assert "process 2 hung: evaluation batch 4 of 4 at step 7 has not finished after 0 s" in err


@pytest.mark.parametrize(
    "flag, words",
    [("--watchdog_factor=0", "--watchdog_factor=0"), ("--watchdog_min_s=-1", "--watchdog_min_s")],
)
def test_bad_watchdog_values_end_in_one_line(flag, words):
    result = run_in_process("--mode=train", flag)
    assert result.returncode == 2 and words in result.stderr
    assert result.stderr.strip().count("\n") == 0


def _complete_steps(checkpoint_dir) -> list[int]:
    if not checkpoint_dir.is_dir():
        return []
    return sorted(int(p.name) for p in checkpoint_dir.iterdir() if p.name.isdigit())


# The watchdog's floor in the job below: it bounds the saves too, and a loaded machine's first
# orbax save of device arrays takes seconds, so not the 3 s a step would allow.
FLOOR_S = 8
# Steps enough that no process ends its run before the stop lands (a checkpoint on disk, read
# by a 50 ms poll, after the first 50); the resume runs the rest.
STOPPED_RUN_STEPS = 600


@pytest.mark.multiprocess
def test_a_stopped_process_ends_the_others_with_the_hung_code(tmp_path):
    """Process 2 of 4 is stopped for good (SIGSTOP) once a periodic checkpoint is on disk: the
    others, which never wait for it in a step, meet it in the next save's barriers (or the run's
    final agreement), and their watchdog ends them there with the hung code, within its floor of
    FLOOR_S and the launcher's grace. The run resumed from its newest checkpoint (on another machine
    shape) completes, packs and passes submission check."""
    from test_multiprocess import JOIN_S, ONE_MEMBER_EACH, pids_of, read_until, start_job

    run = [
        *ONE_MEMBER_EACH,
        f"--steps={STOPPED_RUN_STEPS}",
        "--checkpoint_every=50",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
        f"--mllog={tmp_path}/run.mllog",
    ]
    proc = start_job(
        [
            "--num_processes=4",
            "--devices_per_process=1",
            "--grace_s=5",
            f"--timeout_s={JOIN_S + 200}",
        ],
        [*run, f"--watchdog_min_s={FLOOR_S}"],
    )
    output, stopped = [], []
    try:
        read_until(proc, output, "[p0] ", "process 0: training steps")
        stopped = pids_of(proc, 2, output)
        # A poll with a deadline: a checkpoint on disk is process 0's only sign of having saved.
        deadline = time.monotonic() + 60
        while not _complete_steps(tmp_path / "ck") and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        rest, _ = proc.communicate(timeout=JOIN_S)  # a hang's guard, not a figure under test
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(output) + rest
    assert proc.returncode != 0, text[-2000:]
    hung = [line for line in text.splitlines() if "hung:" in line]
    assert hung and all(f"exit {HUNG_EXIT_CODE}" in line for line in hung), text[-3000:]
    assert not any(line.startswith("[p2] ") for line in hung)  # the stopped one never ran it
    # Without the bound on saves, JAX's missed heartbeats aborted them after 99 s (SIGABRT and
    # tracebacks, no hung line): the watchdog's lines, from the save, are what ended the job.
    assert all("the checkpoint save of step" in line for line in hung), hung
    assert "Fatal Python error" not in text, text[-3000:]
    assert not list((tmp_path / "r").glob("*.json"))  # no record of a run that did not finish
    saved = _complete_steps(tmp_path / "ck")
    assert saved and saved[-1] < STOPPED_RUN_STEPS, saved
    # Resumed on one process of 8 devices (P_degree 2: another machine shape).
    resumed = run_in_process(*run, "--parallel_degree=2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    (path,) = (tmp_path / "r").glob("*.json")
    record = records.read(path)  # resumed from its newest checkpoint
    assert [r.at_step for r in record.resumes] == [saved[-1]]
    assert record.timing.planned_steps == STOPPED_RUN_STEPS
    assert packs_and_passes_check(path, tmp_path)
