"""A Ctrl-C or SIGTERM at any moment ends a run cleanly (run/interrupt.py, docs/reliability.md,
Interrupts): noted by the handler, acted on at a safe point, a named exit code and one line
saying what was kept; never a KeyboardInterrupt inside XLA's compile (a traceback and a
segmentation fault)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import ROOT, run_in_process, subprocess_env

from hpcai_jax.run import interrupt, startup


@pytest.fixture
def handlers():
    """The handlers installed for one test, the test process's own put back after it."""
    assert interrupt.install()
    yield
    interrupt.restore()


def _signal(sig: signal.Signals) -> None:
    # To the calling (main) thread, at once: its handler runs before the next bytecode. Not
    # os.kill(os.getpid()), which the kernel may deliver to another thread after it returns.
    signal.raise_signal(sig)


def test_a_signal_is_noted_and_stops_the_run_at_the_next_phase(handlers):
    with startup.phase("setup"):
        pass
    _signal(signal.SIGINT)  # between two phases: no KeyboardInterrupt here
    assert interrupt.received() == "SIGINT"
    with pytest.raises(interrupt.Interrupted) as caught, startup.phase("state", "initialised"):
        pytest.fail("a phase after the signal must not start")
    e = caught.value
    assert (e.signal_name, e.where, e.exit_code) == ("SIGINT", "after setup", 130)
    assert e.line() == (
        "hpcai_jax: interrupted by SIGINT during start-up (after setup): no step ran and no "
        "record was written; exit 130"
    )


def test_a_signal_inside_a_phase_is_acted_on_at_its_end_and_named_by_it(handlers):
    with pytest.raises(interrupt.Interrupted) as caught, startup.phase("peaks"):
        _signal(signal.SIGTERM)
        reached = True  # the phase's work is not cut short
    assert reached
    assert (caught.value.where, caught.value.exit_code) == ("peaks", 143)


def test_a_resumed_run_interrupted_in_start_up_keeps_its_checkpoint_and_exits_75(handlers):
    _signal(signal.SIGTERM)
    with pytest.raises(interrupt.Interrupted) as caught:
        interrupt.check()
    e = caught.value.keeping("the checkpoint of step 8 in /ck")
    assert e.exit_code == 75
    assert e.line().endswith(
        "kept the checkpoint of step 8 in /ck (no step ran); the same command resumes; exit 75"
    )
    assert caught.value.keeping(None) is caught.value


def test_once_the_guard_holds_the_signals_no_safe_point_raises(handlers):
    from hpcai_jax.run.guards import PreemptionGuard

    guard = PreemptionGuard()
    with startup.phase("barrier"):
        _signal(signal.SIGINT)
    assert guard.stop_now(at_check_point=False) and guard.signal_name == "SIGINT"
    guard.restore()  # main installed them: still noted after the loop, for the line
    assert signal.getsignal(signal.SIGINT) is interrupt._note


def test_the_guard_alone_installs_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    from hpcai_jax.run.guards import PreemptionGuard

    guard = PreemptionGuard()
    assert signal.getsignal(signal.SIGTERM) is interrupt._note
    guard.restore()
    guard.restore()  # the ExitStack's second call
    assert signal.getsignal(signal.SIGTERM) is before and interrupt.received() is None


def test_threads_never_see_the_signal(handlers):
    """A thread (the data Prefetcher's) is never interrupted: the handler runs in the main
    thread and raises nothing."""
    seen = []

    def work():
        try:
            _signal(signal.SIGINT)
            seen.append("finished")
        except BaseException as e:  # noqa: BLE001 - what must not happen
            seen.append(repr(e))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == ["finished"] and interrupt.received() == "SIGINT"


@pytest.fixture
def exits(monkeypatch):
    """The codes `os._exit` was called with, in place of ending the test process."""
    codes: list[int] = []
    monkeypatch.setattr(os, "_exit", codes.append)
    return codes


def test_the_first_signal_is_answered_by_the_watcher_while_the_main_thread_is_busy(handlers, capfd):
    """A Python handler waits for the main thread to come back to the interpreter (a compile
    of a minute went on in silence): the watcher thread reads the byte CPython's C handler
    writes to the wakeup pipe, and answers. Here the byte is written as the C handler would,
    with no Python handler to run: only the thread can note it."""
    interrupt.at("compile")
    os.write(interrupt._pipe[1], bytes([signal.SIGINT]))
    deadline = time.monotonic() + 60  # a poll for the thread's answer, not a time limit on it
    while interrupt.received() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert interrupt.received() == "SIGINT"
    assert capfd.readouterr().err == (
        "hpcai_jax: SIGINT: stopping after start-up phase compile (Ctrl-C again to stop now)\n"
    )
    with pytest.raises(interrupt.Interrupted):  # and the phase's end acts on it
        interrupt.check()


def test_a_second_sigint_ends_the_process_at_once_and_removes_its_locks(
    handlers, exits, tmp_path, capfd
):
    from hpcai_jax.locks import PathLock

    held = PathLock(str(tmp_path / ".run.lock"))  # the run's, as its claim's is
    made = tmp_path / "made"
    made.mkdir()
    interrupt.on_hard_exit(made.rmdir)  # the folder the run made, once the file in it is gone:
    log = made / "run.mllog.partial"  # the clean-ups run the last registered first
    log.write_text("header\n")
    interrupt.on_hard_exit(log.unlink)
    interrupt.defer()
    interrupt.at("the training step under way", ", then write a partial record")
    _signal(signal.SIGINT)
    assert exits == [] and (tmp_path / ".run.lock").exists()
    _signal(signal.SIGINT)
    assert exits == [130] and held._fd is None
    assert not (tmp_path / ".run.lock").exists() and not made.exists()
    assert capfd.readouterr().err.splitlines() == [
        "hpcai_jax: SIGINT: stopping after the training step under way, then write a partial "
        "record (Ctrl-C again to stop now)",
        "hpcai_jax: stopped at once by a second SIGINT during the training step under way: no "
        "record was written; exit 130",
    ]


def test_a_second_sigint_mid_write_leaves_no_temporary_file(
    handlers, exits, tmp_path, capfd, monkeypatch
):
    """A hard exit while a record or log is being written (its temporary file made, not yet
    renamed): the temporary file is removed with the locks, and nothing is at the path."""
    from hpcai_jax.records import write as record_write

    target = tmp_path / "run.mllog"
    seen = []

    def signalled_mid_write(fd):  # inside the write: the file made, the rename to come
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        _signal(signal.SIGINT)
        _signal(signal.SIGINT)

    interrupt.defer()
    monkeypatch.setattr(record_write, "as_created", signalled_mid_write)
    with pytest.raises(FileNotFoundError):  # the (faked) exit returned; the rename fails
        record_write.write_text_atomically(target, "header\n")
    assert exits == [130]
    assert seen[0][0].startswith(".run.mllog.") and seen[0][0].endswith(".tmp"), seen
    assert list(tmp_path.iterdir()) == [] and not record_write._IN_FLIGHT
    capfd.readouterr()


def test_a_second_sigterm_is_only_noted(handlers, exits):
    """A scheduler may send SIGTERM twice: the save under way completes."""
    interrupt.defer()
    _signal(signal.SIGTERM)
    _signal(signal.SIGTERM)
    assert exits == [] and interrupt.received() == "SIGTERM"


def test_a_mode_that_stops_at_once_names_the_partial_record_it_left(
    handlers, exits, monkeypatch, tmp_path, capfd
):
    """--mode=check rewrites a partial record as each item finishes: a signal's line names it
    (it said "before its record was written" with the record on disk), and the claim's lock
    is removed (it was left behind)."""
    from hpcai_jax.locks import PathLock
    from hpcai_jax.nodecheck import runner

    held = PathLock(str(tmp_path / ".check-x.lock"))  # the check's claim
    path = tmp_path / "check-x.json"
    monkeypatch.setattr(runner, "check_record", lambda *a: object())
    monkeypatch.setattr(runner.results, "write_record", lambda *a: path)
    config = type("C", (), {"results": type("R", (), {"results_dir": str(tmp_path)})})
    reason = "running: 3 items finished, item collectives started"
    runner.Progress(config, "check-x")._write(None, reason)
    interrupt.exit_at_once("--mode=check")
    _signal(signal.SIGINT)
    assert exits == [130] and held._fd is None and not (tmp_path / ".check-x.lock").exists()
    assert capfd.readouterr().err == (
        f"hpcai_jax: interrupted by SIGINT during --mode=check: kept the partial record {path} "
        f"({reason}); exit 130\n"
    )


def test_a_signal_stops_an_evaluation_before_its_next_batch(handlers, capfd):
    from hpcai_jax.run import evaluation, hooks

    interrupt.defer()
    with evaluation._watched(None, 8, "the final evaluation") as on_batch:
        on_batch(0, 3)
        _signal(signal.SIGINT)
        with pytest.raises(evaluation.Stopped) as caught:
            on_batch(1, 3)
    reason = (
        "preempted by SIGINT during the final evaluation: the evaluation was interrupted at "
        "batch 2 of 3"
    )
    assert caught.value.reason == reason
    assert "stopping after batch 1 of 3 of the final evaluation" in capfd.readouterr().err

    class Run:  # an evaluation during training, stopped so: the run ends partial
        def flush(self):
            return None

        def diverged(self, keep_last):
            return None

        def evaluate(self, training):
            raise caught.value

    stop = hooks.Evaluation()(hooks.StepInfo(8, 20, None, None, None), Run())
    assert stop == hooks.Outcome(hooks.Status.PARTIAL, reason)


# A short run in process (tests/test_reliability.py's, whose step the suite's compilation cache
# holds): 2 steps, then the final evaluation of 2 batches.
SHORT = [
    "--ensemble_size=4",
    "--members_per_device=2",
    "--parallel_degree=4",
    "--batch_size=16",
    "--train_examples=128",
    "--eval_examples=200",
    "--eval_batch_size=100",
    "--lr_schedule=constant",
    "--model=resnet_tiny",
    "--log_every=1",
    "--target_quality=0.9",
    "--steps=2",
    "--nokeep_weights",
]


@pytest.mark.slow  # two runs compiled, in process
def test_a_signal_in_the_final_evaluation_ends_it_with_a_partial_record(tmp_path, monkeypatch):
    """SIGINT as the final evaluation's first batch starts: the run stops before the second,
    writes a partial record saying so and exits 75; the same command then resumes from the
    final checkpoint, evaluates, and completes. Before: the evaluation ran to its end (140 s
    on the quickstart) and the run was recorded complete."""
    at = interrupt.at

    def signalled(where: str, then: str = "") -> None:
        at(where, then)
        if where == "batch 1 of 2 of the final evaluation":
            _signal(signal.SIGINT)

    monkeypatch.setattr(interrupt, "at", signalled)
    args = [*SHORT, f"--checkpoint_dir={tmp_path}/ck", f"--results_dir={tmp_path}/r"]
    proc = run_in_process(*args, "--run_name=final-eval")
    assert proc.returncode == 75, proc.stderr[-2000:]
    record = json.loads((tmp_path / "r" / "final-eval.json").read_text())
    reason = (
        "preempted by SIGINT during the final evaluation: the evaluation was interrupted at "
        "batch 2 of 2"
    )
    assert (record["status"], record["reason"]) == ("partial", reason)
    assert f"hpcai_jax: {reason}: kept the checkpoint of step 2 in {tmp_path}/ck" in proc.stderr
    monkeypatch.setattr(interrupt, "at", at)
    proc = run_in_process(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((tmp_path / "r" / "final-eval.json").read_text())
    assert record["status"] == "complete" and record["quality"]["ensemble"] is not None


def test_an_error_leaves_no_folder_the_run_made_and_every_folder_it_found(tmp_path):
    """A run that fails (here: a --stream_record that does not exist, read after the results
    folder is made) removes the folders it made and left empty, its lock gone; a folder that
    was there, empty, stays."""
    made, found = tmp_path / "new" / "deep", tmp_path / "found"
    found.mkdir()
    for results_dir in (made, found):
        proc = run_in_process(
            *SHORT, f"--results_dir={results_dir}", f"--stream_record={tmp_path}/none.json"
        )
        assert proc.returncode == 2 and "--stream_record" in proc.stderr, proc.stderr
    assert not (tmp_path / "new").exists()
    assert found.is_dir() and not list(found.iterdir())


# The subprocess tests: the multiprocess tests' small regression run (tests/test_multiprocess.py),
# 4 members × P_degree 2 on 8 CPU devices, long enough that the loop is still running when a
# cue's signal lands; every case the same flags but its folders, so the compile cache serves all.
SMALL = [
    "--workload=regression",
    "--model=mlp",
    "--dataset=friedman1",
    "--ensemble_size=2",
    "--parallel_degree=1",
    "--batch_size=16",
    "--train_examples=256",
    "--eval_examples=64",
    "--steps=400",
    "--log_every=1",
    "--target_quality=0.9",
]
# (the stderr line's fragment at which the signal is sent, the signal, the phase it lands in)
# Phase lines are printed at a phase's end: the next phase is under way. Those of distributed,
# imports and setup are held until the configuration is valid (run/startup.py). In the order of
# the phases: no run before the one signalled in the peaks (or STREAM) gets to measure them.
START_UP = [
    ("start-up: single process", "SIGINT", "distributed"),
    ("setting(s) not at their defaults", "SIGINT", "state"),
    ("start-up: state (checkpoint) took", "SIGINT", "state (initialised)"),
    ("mesh {", "SIGINT", "compile"),  # logged as the compile starts
    ("start-up: crosscheck took", "SIGINT", "traffic"),
    ("start-up: traffic took", "SIGINT", "peaks"),
    ("start-up: peaks took", "SIGTERM", "stream"),
]
# The first signal's answer, at once (from the watcher thread), before the line that ends it.
ACK = re.compile(r"hpcai_jax: (SIGINT|SIGTERM): stopping after .+ \(Ctrl-C again to stop now\)")
LINE = re.compile(
    r"hpcai_jax: interrupted by (SIGINT|SIGTERM) during start-up \((.+)\): no step ran and "
    r"no record was written; exit (\d+)"
)


def _interrupted(tmp_path, name: str, cue: str, sig: str) -> tuple[int, list[str]]:
    """The CLI run (results and checkpoints in tmp_path/name), sent `sig` when a line holding
    `cue` appears on its stderr; its exit code and its lines that are not absl's log lines."""
    args = [*SMALL, f"--results_dir={tmp_path}/r", f"--checkpoint_dir={tmp_path}/{name}"]
    args.append(f"--mllog={tmp_path}/r/run.mllog")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpcai_jax.main", *args],
        cwd=ROOT,
        # The peaks and STREAM measured, not read from the suite's cache (host_cache.py): a
        # signal cued by the phase before them must land in them. The test's own cache, empty
        # at first: the run signalled in the peaks keeps them (the signal is acted on at the
        # phase's end), the next measures STREAM and keeps it, and the runs after read both
        # (START_UP's order).
        env=subprocess_env(
            2,
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            HPCAI_JAX_STARTUP_CACHE=str(tmp_path / "startup"),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(240, proc.kill)  # a hang fails the test, not the suite
    timer.start()
    sent, lines = False, []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if not sent and cue in line:
            proc.send_signal(getattr(signal, sig))
            sent = True
    code = proc.wait()
    timer.cancel()
    assert sent, f"no line held {cue!r}:\n" + "\n".join(lines[-20:])
    text = "\n".join(lines)
    for bad in ("Traceback", "Fatal Python error", "KeyboardInterrupt"):
        assert bad not in text, text[-3000:]
    return code, [x for x in lines if not re.match(r"[IWEF]\d{4} ", x)]


@pytest.mark.slow
def test_sigint_at_each_start_up_phase_ends_cleanly(tmp_path, record_property):
    """SIGINT (SIGTERM once) sent as each start-up phase begins, cued by the phase lines: the
    shell's code for the signal, one line naming the phase, no traceback, no record written,
    and no MLLOG left under its partial name (a new run's header lines, which no run takes up).
    Then one in the loop's first step (exit 75, a checkpoint, a partial record and its MLLOG)
    and one in the start-up of the run that resumes from it (exit 75, the checkpoint and the
    log kept)."""
    log = tmp_path / "r" / "run.mllog"
    for cue, sig, phase in START_UP:
        code, own = _interrupted(tmp_path, "new", cue, sig)
        record_property(phase, f"{code} {own}")
        assert len(own) == 2 and ACK.fullmatch(own[0]), (phase, own)
        assert (m := LINE.fullmatch(own[1])), (phase, own)
        assert m.group(1) == sig and code == int(m.group(3)) == 128 + getattr(signal, sig)
        assert not list((tmp_path / "r").glob("*.json")), phase
        assert not list((tmp_path / "r").glob("*.partial")), phase
    code, own = _interrupted(tmp_path, "ck", "start-up: barrier took", "SIGINT")
    record_property("first step", f"{code} {own}")
    assert code == 75 and len(own) == 2 and ACK.fullmatch(own[0]), own
    assert re.fullmatch(
        rf"hpcai_jax: preempted by SIGINT at step (\d+): kept the checkpoint of step \1 in "
        rf"{tmp_path}/ck and the record \S+\.json \(partial\); the same command resumes; exit 75",
        own[1],
    ), own
    lines = log.read_text().count("\n")
    assert "run_start" in log.read_text(), lines
    code, own = _interrupted(tmp_path, "ck", "start-up: state (checkpoint) took", "SIGTERM")
    record_property("resumed start-up", f"{code} {own}")
    assert code == 75 and len(own) == 2 and ACK.fullmatch(own[0]), own
    assert re.fullmatch(
        rf"hpcai_jax: interrupted by SIGTERM during start-up \(.+\): kept the checkpoint of "
        rf"step \d+ in {tmp_path}/ck \(no step ran\); the same command resumes; exit 75",
        own[1],
    ), own
    assert log.read_text().count("\n") >= lines  # the resumed run's log kept, whole


@pytest.mark.slow
def test_a_mode_that_writes_only_at_its_end_stops_at_once():
    """--mode=stream, flops and check: the signal ends the process at once, with its line."""
    code = (
        "import os, signal, time\n"
        "from hpcai_jax.run import interrupt\n"
        "interrupt.install()\n"
        "interrupt.exit_at_once('--mode=stream')\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 143
    assert proc.stderr == (
        "hpcai_jax: interrupted by SIGTERM during --mode=stream: stopped at once, before its "
        "record was written; exit 143\n"
    )
