"""The record's start-up phases (run/startup.py, docs/scale.md): each phase timed where the run
goes through it, and the process's age at main's entry read from the OS."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, FakeClock, subprocess_env

from hpcai_jax import records
from hpcai_jax.run import startup


def test_phases_add_up_and_the_process_age_is_the_os_s(monkeypatch):
    fake = FakeClock(50.0)  # stands for the `time` module in run/startup.py
    monkeypatch.setattr(startup, "time", fake)
    startup.begin()
    age = startup.process_age_s()
    assert age is not None and 0 < age < 24 * 3600
    with startup.phase("setup"):
        fake.advance(0.25)
    fake.advance(100)  # between the phases: in none
    with startup.phase("setup"):  # a phase run twice adds up
        fake.advance(0.5)
    startup.record("compile", 1.5)
    phases = startup.phases()
    assert list(phases) == list(startup.PHASES)
    assert phases["setup"] == 0.75 and phases["compile"] == 1.5
    assert phases["distributed"] is None  # not reached
    assert startup.total_s() == pytest.approx(phases["python"] + 2.25)


@pytest.mark.slow
def test_a_fresh_process_reads_its_own_start():
    code = "from hpcai_jax.run import startup; startup.begin(); print(startup.phases()['python'])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=subprocess_env()
    )
    assert 0 < float(out.stdout) < 60, out.stderr


def test_the_tiny_run_records_every_phase_it_went_through(tiny_run):
    phases = tiny_run.record["timing"]["startup"]
    # Every phase (the record's order is its definition's: counting_s, added later, comes last).
    assert sorted(phases) == sorted(f"{name}_s" for name in startup.PHASES)
    for name in startup.PHASES:  # the compile's and every one after it included
        assert phases[f"{name}_s"] is not None and phases[f"{name}_s"] >= 0, name
    per = records.read(tiny_run.record).timing.per_process
    assert len(per) == 1 and per[0].startup_s >= phases["compile_s"]


def test_every_phase_after_the_compile_says_so_before_the_first_step(tiny_run):
    """Nothing between the compile and the first step goes without a line: at hundreds of
    devices per process these phases were most of the start-up, silent (docs/scale_sim.md)."""
    lines = tiny_run.proc.stderr.splitlines()

    def at(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    order = [f"start-up: {name} took" for name in startup.PHASES[6:]]
    order.append("process 0: training steps")
    assert [at(x) for x in order] == sorted(at(x) for x in order), order


def test_the_settings_table_follows_the_checks_and_the_phases_before_it(tiny_run):
    """Errors before tables: the settings print once the run's configuration has passed what
    can be checked (the layout, the data, the results directory); the phase lines held until
    then keep their order."""
    lines = tiny_run.proc.stderr.splitlines()

    def at(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    assert (
        at("start-up: single process")
        < at("start-up: distributed took")
        < at("start-up: imports took")
        < at("start-up: setup took")
        < at("setting(s) not at their defaults")
        < at("start-up: state (initialised) took")
    )


def test_held_lines_wait_for_valid_and_a_failed_run_drops_them(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="absl")
    announced = []
    startup.begin()
    startup.hold(lambda: announced.append("table"))
    with startup.phase("distributed"):
        pass
    assert not any("start-up:" in r.getMessage() for r in caplog.records) and not announced
    startup.valid()
    assert [r.getMessage()[:28] for r in caplog.records] == ["start-up: distributed took 0"]
    assert announced == ["table"]
    with startup.phase("setup"):  # after valid(): at once
        pass
    assert "start-up: setup took" in caplog.records[-1].getMessage()
    caplog.clear()
    startup.hold(lambda: announced.append("again"))
    with startup.phase("setup"):
        pass
    startup.drop()  # the run's flags were refused: nothing of it is logged, later lines are
    startup.valid()
    assert caplog.records == [] and announced == ["table"]
    with startup.phase("setup"):
        pass
    assert "start-up: setup took" in caplog.records[-1].getMessage()


def test_the_run_log_holds_no_library_info_lines(tiny_run):
    """orbax writes about 30 INFO lines for each save (its handlers, threads, timings): the
    run's log keeps its own lines (the kept weights, the phases) and none of them."""
    err = tiny_run.proc.stderr
    assert "kept the members' final weights" in err  # the tiny run saved its weights
    assert "start-up: state (initialised) took" in err
    assert "orbax" not in err.lower(), [x for x in err.splitlines() if "orbax" in x.lower()][:5]
    for name in ("async_checkpointer.py", "atomicity.py", "event_tracking.py"):
        assert name not in err, name


def test_each_phase_says_how_long_it_took_on_the_first_process_only(caplog):
    """A start-up silent for tens of seconds reads as a hang: each phase prints one line, on
    one process of the job (the others are quiet once it is known, main.py)."""
    import logging

    caplog.set_level(logging.INFO, logger="absl")
    with startup.phase("setup"):
        pass
    assert any("start-up: setup took" in r.getMessage() for r in caplog.records)
    caplog.clear()
    startup.quiet(True)
    try:
        with startup.phase("setup"):
            pass
    finally:
        startup.quiet(False)
    assert not any("start-up:" in r.getMessage() for r in caplog.records)


def test_a_long_evaluation_says_where_it_is(monkeypatch, caplog):
    import logging

    from hpcai_jax.engine import evaluate

    caplog.set_level(logging.INFO, logger="absl")
    monkeypatch.setattr(evaluate, "PROGRESS_S", 0.0)
    progress = evaluate._Progress(3)
    for _ in range(3):
        progress.tick()
    lines = [r.getMessage() for r in caplog.records if "evaluating:" in r.getMessage()]
    assert lines[0].startswith("evaluating: batch 2 of 3, ETA") and len(lines) == 2
