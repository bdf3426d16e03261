"""The hang watchdog (run/watchdog.py): a step or a wait for the other processes far longer
than the median step ends the process with HUNG_EXIT_CODE and one line; stalls of a few
seconds, evaluations and saves are left alone."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest
from helpers import run_in_process

from hpcai_jax.run.watchdog import HUNG_EXIT_CODE, Watchdog


def test_the_limit_is_the_factor_times_the_median_and_at_least_the_floor():
    dog = Watchdog(factor=100, min_s=5, process=0, exit=lambda code: None)
    try:
        assert dog.limit_s(None) == 5 and dog.limit_s(0.01) == 5 and dog.limit_s(0.2) == 20
    finally:
        dog.close()


def test_an_armed_deadline_that_passes_ends_the_process_and_a_disarmed_one_does_not(capfd):
    exits = []
    dog = Watchdog(factor=10, min_s=0.2, process=3, exit=exits.append)
    try:
        dog.arm("step 7", 0.001)
        time.sleep(0.1)
        dog.disarm()  # finished in time
        time.sleep(0.3)
        assert exits == []
        dog.arm("step 8", 0.001)
        time.sleep(0.6)
        assert exits == [HUNG_EXIT_CODE]
    finally:
        dog.close()
    err = capfd.readouterr().err
    assert "process 3 hung: step 8 has not finished after 0 s" in err
    assert err.count("hung") == 1


@pytest.mark.parametrize(
    "flag, words",
    [("--watchdog_factor=0", "--watchdog_factor=0"), ("--watchdog_min_s=-1", "--watchdog_min_s")],
)
def test_bad_watchdog_values_end_in_one_line(flag, words):
    result = run_in_process("--mode=train", flag)
    assert result.returncode == 2 and words in result.stderr
    assert result.stderr.strip().count("\n") == 0


@pytest.mark.multiprocess
def test_a_stopped_process_ends_the_others_with_the_hung_code(tmp_path):
    """Process 2 of 4 is stopped for good (SIGSTOP) mid-run: the others, which never wait for it
    in a step, meet it at the run's final agreement, and their watchdog ends them there with the
    hung code, within its floor of 3 s and the launcher's grace."""
    from test_multiprocess import JOIN_S, ONE_MEMBER_EACH, pids_of, read_until, start_job

    proc = start_job(
        [
            "--num_processes=4",
            "--devices_per_process=1",
            "--grace_s=5",
            f"--timeout_s={JOIN_S + 200}",
        ],
        [*ONE_MEMBER_EACH, "--steps=400", "--watchdog_min_s=3", f"--results_dir={tmp_path}"],
    )
    output, stopped = [], []
    try:
        read_until(proc, output, "[p2] ", "process 2: training steps")
        stopped = pids_of(proc, 2, output)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        rest, _ = proc.communicate(timeout=120)
        elapsed = time.monotonic() - start
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
    assert elapsed < 60, elapsed
    assert not list(tmp_path.glob("*.json"))  # no record of a run that did not finish
