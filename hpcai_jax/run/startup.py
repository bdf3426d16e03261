"""This process's start-up, phase by phase, for the record's `timing.startup`: where the minutes
go before the first step when thousands of processes start at once (docs/scale.md). Standard
library only: `main` marks its phases before JAX is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

# The phases in the order a run goes through them: up to the compile, then what the record
# says about the compiled step and the devices, then the processes' meeting before the steps.
PHASES = (
    "python",
    "distributed",
    "imports",
    "setup",
    "state",
    "compile",
    "crosscheck",
    "traffic",
    "peaks",
    "stream",
    "barrier",
)
_seconds: dict[str, float] = {}
_quiet = [False]  # set on every process but the first once the job is known (main.py)


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
    age = process_age_s()
    if age is not None:
        _seconds["python"] = age


@contextlib.contextmanager
def phase(name: str, part: str = ""):
    """Times a phase (its seconds add up if it runs twice; `part` names each time in its line)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - start
        _seconds[name] = _seconds.get(name, 0.0) + took
        if not _quiet[0]:  # absl's logger, so the line reads like the run's own
            label = f"{name} ({part})" if part else name
            logging.getLogger("absl").info("start-up: %s took %.1f s", label, took)


def record(name: str, seconds: float) -> None:
    """A phase timed elsewhere (the first compile, which the loop times itself)."""
    _seconds[name] = seconds


def phases() -> dict[str, float | None]:
    """Every phase's seconds, None where it was not reached or not measurable."""
    return {name: _seconds.get(name) for name in PHASES}


def total_s() -> float:
    return float(sum(v for v in _seconds.values()))
