"""This process's start-up, phase by phase, for the record's `timing.startup`: where the minutes
go before the first step when thousands of processes start at once (docs/scale.md). Standard
library only: `main` marks its phases before JAX is imported. Until the run's configuration is
checked, the phase lines are held (`hold`, `valid`): a bad flag prints its one line alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable

from hpcai_jax.run import interrupt

# The phases in the order a run goes through them: up to the compile, then what the record
# says about the compiled step and the devices, then the processes' meeting before the steps.
PHASES = (
    "python",
    "distributed",
    "imports",
    "setup",
    "state",
    "compile",
    "counting",
    "crosscheck",
    "traffic",
    "peaks",
    "stream",
    "barrier",
)
_seconds: dict[str, float] = {}
_quiet = [False]  # set on every process but the first once the job is known (main.py)
# Until the run's configuration is known valid (hold, valid): its phase lines, and what to log
# once it is (main's settings table); None while lines go out as they come.
_held: list[tuple[str, float]] | None = None
_announce: list[Callable[[], None]] = []


def quiet(value: bool) -> None:
    """Phase lines from this process or not: one process's account is the job's."""
    _quiet[0] = value


def process_age_s() -> float | None:
    """Seconds since the OS started this process (Linux's /proc), or None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


def begin() -> None:
    """At main's entry: the interpreter's start and the imports so far are the "python" phase."""
    _seconds.clear()
    drop()
    age = process_age_s()
    if age is not None:
        _seconds["python"] = age


@contextlib.contextmanager
def phase(name: str, part: str = ""):
    """Times a phase (its seconds add up if it runs twice; `part` names each time in its line).
    Its start and end are safe points: a SIGINT or SIGTERM noted before either stops the run
    there (run/interrupt.py)."""
    label = f"{name} ({part})" if part else name
    interrupt.check()
    interrupt.at(label)
    start = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - start
        _seconds[name] = _seconds.get(name, 0.0) + took
        if _held is not None:
            _held.append((label, took))
        else:
            _log(label, took)
    interrupt.at(f"after {label}")
    interrupt.check()


def _log(label: str, took: float) -> None:
    if not _quiet[0]:  # absl's logger, so the line reads like the run's own
        logging.getLogger("absl").info("start-up: %s took %.1f s", label, took)


def hold(announce: Callable[[], None]) -> None:
    """Keeps the phase lines, and `announce` (main's settings table), until `valid()`: a run
    whose flags cannot work prints its one error line, not a page of settings before it."""
    global _held
    _held = []
    _announce[:] = [announce]


def valid() -> None:
    """The run's configuration is valid (each mode says so once it has checked what it can): the
    phase lines kept so far, then the announcement; from here on lines go out as they come. A
    no-op when nothing is held (a mode called without main)."""
    global _held
    held, announce = _held or [], list(_announce)
    drop()
    for label, took in held:
        _log(label, took)
    for call in announce:
        call()


def drop() -> None:
    """Forgets what is held, unlogged: the run ended before its configuration was valid."""
    global _held
    _held = None
    _announce.clear()


def record(name: str, seconds: float) -> None:
    """A phase timed elsewhere (the first compile, which the loop times itself)."""
    _seconds[name] = seconds


def phases() -> dict[str, float | None]:
    """Every phase's seconds, None where it was not reached or not measurable."""
    return {name: _seconds.get(name) for name in PHASES}


def total_s() -> float:
    return float(sum(v for v in _seconds.values()))
