"""A Ctrl-C (SIGINT) or a scheduler's SIGTERM at any moment of a run ends it cleanly: a named
exit code, one line saying what was kept, no traceback (docs/reliability.md, Interrupts).

Python's own handling raises KeyboardInterrupt wherever the main thread happens to be: inside
XLA's compile or a JAX callback that left a traceback of 80 lines and a segmentation fault.
Here the handlers only note the signal, and the run acts on the note where it is safe to: at
each start-up phase's start and end (`check`, from run/startup.py) it stops with `Interrupted`;
from the training loop on, the preemption guard (run/guards.py) stops it at a step boundary,
saves and writes a partial record. Standard library only: `main` installs the handlers before
it imports JAX.
"""

from __future__ import annotations

import signal

from hpcai_jax.errors import PREEMPTED_EXIT_CODE, end_process

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_noted: list[tuple[str, str]] = []  # (signal name, what the run was doing), in arrival order
_previous: dict[int, object] = {}  # the handlers `install` replaced
_where = ["start-up"]  # what the run is doing, for the line
_mode = ["raise"]  # "raise": `check` raises; "defer": the guard acts; "exit": at once


class Interrupted(Exception):
    """A signal seen at a safe point before the training loop. `kept` names a checkpoint the
    run had restored (the same command resumes from it: exit 75), else no step ran, nothing was
    written and the exit code is the shell's for the signal: 130 SIGINT, 143 SIGTERM."""

    def __init__(self, signal_name: str, where: str, kept: str | None = None):
        super().__init__(signal_name, where, kept)
        self.signal_name, self.where, self.kept = signal_name, where, kept

    @property
    def exit_code(self) -> int:
        return PREEMPTED_EXIT_CODE if self.kept else signal_exit_code(self.signal_name)

    def keeping(self, kept: str | None) -> Interrupted:
        """This interrupt, of a run that had restored `kept` (None: nothing to resume from)."""
        return Interrupted(self.signal_name, self.where, kept) if kept else self

    def line(self) -> str:
        what = (
            f"kept {self.kept} (no step ran); the same command resumes"
            if self.kept
            else "no step ran and no record was written"
        )
        return (
            f"hpcai_jax: interrupted by {self.signal_name} during start-up ({self.where}): "
            f"{what}; exit {self.exit_code}"
        )


def signal_exit_code(signal_name: str) -> int:
    """128 + the signal's number, as a shell reports a process that signal ended."""
    return 128 + int(signal.Signals[signal_name])


def install() -> bool:
    """Notes SIGINT and SIGTERM from now on (main thread only); False if already installed."""
    if _previous:
        return False
    for sig in SIGNALS:
        _previous[sig] = signal.signal(sig, _note)
    return True


def restore() -> None:
    """The handlers `install` replaced, and nothing noted."""
    for sig, handler in _previous.items():
        signal.signal(sig, handler)
    _previous.clear()
    _noted.clear()
    _where[0], _mode[0] = "start-up", "raise"


def _note(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    _noted.append((name, _where[0]))
    if _mode[0] == "exit":
        end_process(
            f"hpcai_jax: interrupted by {name} during {_where[0]}: {_EXIT_KEPT}; exit "
            f"{signal_exit_code(name)}",
            signal_exit_code(name),
        )


_EXIT_KEPT = "stopped at once, before its record was written"


def received() -> str | None:
    """The first signal noted, by name; None if none."""
    return _noted[0][0] if _noted else None


def at(where: str) -> None:
    """What the run is doing now, for the line of an interrupt that arrives meanwhile."""
    _where[0] = where


def check() -> None:
    """A safe point before the training loop: raises `Interrupted` if a signal was noted."""
    if _noted and _mode[0] == "raise":
        raise Interrupted(*_noted[0])


def defer() -> None:
    """From here on the preemption guard acts on a signal (at a step boundary, and after the
    loop: the record is written, then the line); `check` no longer raises."""
    _mode[0] = "defer"


def exit_at_once(where: str) -> None:
    """For a mode that writes its record only at its end (flops, stream, check): a signal ends
    the process at once, with its line; one already noted does so now."""
    _where[0], _mode[0] = where, "exit"
    if _noted:
        _note(int(signal.Signals[_noted[0][0]]), None)
