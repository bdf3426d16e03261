"""A Ctrl-C (SIGINT) or a scheduler's SIGTERM at any moment of a run ends it cleanly: a named
exit code, one line saying what was kept, no traceback (docs/reliability.md, Interrupts).

Python's own handling raises KeyboardInterrupt wherever the main thread happens to be: inside
XLA's compile or a JAX callback that left a traceback of 80 lines and a segmentation fault.
Here the handlers only note the signal, and the run acts on the note where it is safe to: at
each start-up phase's start and end (`check`, from run/startup.py) it stops with `Interrupted`;
from the training loop on, the preemption guard (run/guards.py) stops it at a step boundary,
saves and writes a partial record. Standard library only: `main` installs the handlers before
it imports JAX.

A Python handler runs only when the main thread is back in the interpreter: not during a
compile of a minute. So each signal also reaches a thread, through the wakeup pipe that
CPython's own C handler writes a byte to (`signal.set_wakeup_fd`): the first signal is answered
at once with a line naming what the run will stop after, and a second one ends the process at
once (`hard_exit`: the locks removed, a folder the run made and left empty removed).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable

from hpcai_jax.errors import PREEMPTED_EXIT_CODE

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_noted: list[tuple[str, str]] = []  # (signal name, what the run was doing), in arrival order
_previous: dict[int, object] = {}  # the handlers `install` replaced
_where = ["start-up"]  # what the run is doing, for the line
_then = [""]  # what the run does once it stops there, for the first signal's answer
_mode = ["raise"]  # "raise": `check` raises; "defer": the guard acts; "exit": at once
_lock = threading.RLock()  # the watcher thread's and the handler's reads of the pipe
_pipe: list[int] = []  # the wakeup pipe: its read and write ends, while installed
_wakeup = [-1]  # the wakeup fd `install` replaced
_watcher: list[threading.Thread] = []
_kept: list[str] = []  # what a hard exit leaves on disk, for its line ("": the mode's default)
_cleanups: list[Callable[[], None]] = []  # run before a hard exit (remove what is left empty)


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
    """Notes SIGINT and SIGTERM from now on (main thread only), answering each at once from a
    thread; False if already installed."""
    if _previous:
        return False
    for sig in SIGNALS:
        _previous[sig] = signal.signal(sig, _note)
    read, write = os.pipe()  # not inherited by a child process (O_CLOEXEC)
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    _wakeup[0] = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _pipe[:] = [read, write]
    watcher = threading.Thread(target=_watch, args=(read,), name="interrupt-watch", daemon=True)
    watcher.start()
    _watcher[:] = [watcher]
    return True


def restore() -> None:
    """The handlers `install` replaced, the watcher stopped, and nothing noted."""
    for sig, handler in _previous.items():
        signal.signal(sig, handler)
    if _pipe:
        signal.set_wakeup_fd(_wakeup[0])
        read, write = _pipe
        os.close(write)  # the watcher reads the end of the pipe and returns
        for watcher in _watcher:
            watcher.join(timeout=5)
        os.close(read)
    _pipe.clear()
    _watcher.clear()
    _previous.clear()
    _noted.clear()
    _kept.clear()
    _cleanups.clear()
    _where[0], _then[0], _mode[0] = "start-up", "", "raise"


def _forked_child() -> None:
    """A forked child (a data worker) has its own handlers: its signals are not this run's."""
    if _pipe:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)


os.register_at_fork(after_in_child=_forked_child)


def _watch(read: int) -> None:
    """The watcher thread: each byte the C handler writes is a signal, acted on here whatever
    the main thread is doing (a compile, a wait on the device)."""
    while True:
        try:
            select.select([read], [], [])
        except (OSError, ValueError):  # closed by `restore`
            return
        if not _drain(read):
            return


def _drain(read: int) -> bool:
    """Acts on the signals waiting in the pipe; False once its write end is closed."""
    with _lock:
        while True:
            try:
                got = os.read(read, 64)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not got:
                return False
            for signum in got:
                if signum in SIGNALS:
                    _arrived(signum)


def _note(signum: int, frame) -> None:
    """The Python handler (main thread): the pipe read now, so that the signal is noted when
    the handler returns; without the pipe (another wakeup fd set since), the signal itself."""
    if _pipe:
        _drain(_pipe[0])
    if not _noted:
        with _lock:
            _arrived(signum)


def _arrived(signum: int) -> None:
    """One signal: the first answered with its line (or, in a mode that stops at once, the
    process ended); a second SIGINT (a person's Ctrl-C again) ends the process at once. A
    second SIGTERM is only noted: a scheduler may send it twice, and the save under way must
    complete (tests/test_reliability.py)."""
    name = signal.Signals(signum).name
    first = not _noted
    _noted.append((name, _where[0]))
    if first and _mode[0] != "exit":
        _say(acknowledgement(name))
    elif first or signum == signal.SIGINT:
        hard_exit(name, second=not first)


def acknowledgement(name: str) -> str:
    """The line that answers a first signal: what the run stops after."""
    where = _where[0]
    if _mode[0] == "defer":
        after = where + _then[0]
    elif where == "start-up" or where.startswith("after "):
        after = f"start-up ({where}), before its next phase"
    else:
        after = f"start-up phase {where}"
    return f"hpcai_jax: {name}: stopping after {after} (Ctrl-C again to stop now)"


def _say(line: str) -> None:
    """A line on stderr from a handler: written to the descriptor, past Python's buffers (a
    handler may run while the main thread is inside a write to sys.stderr)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())


SECOND_EXIT = "stopped at once by a second"  # the second signal's line, after "hpcai_jax: "
_EXIT_KEPT = "stopped at once, before its record was written"


def hard_exit(name: str, second: bool) -> None:
    """Ends the process now, from any thread: the locks this process holds and the temporary
    files of its writes under way removed, the clean-ups (each on its own: one that fails does
    not keep the others), then one line naming what is on disk, and exit 128 + the signal's
    number."""
    locks = sys.modules.get("hpcai_jax.locks")  # none is held if it was never imported
    if locks is not None:
        with contextlib.suppress(Exception):
            locks.release_all()
    writes = sys.modules.get("hpcai_jax.records.write")  # a record or log being written
    if writes is not None:
        with contextlib.suppress(Exception):
            writes.remove_in_flight()
    for cleanup in reversed(_cleanups):  # the last registered first: files before folders
        with contextlib.suppress(Exception):
            cleanup()
    code = signal_exit_code(name)
    kept = _kept[0] if _kept else (_EXIT_KEPT if _mode[0] == "exit" else "no record was written")
    what = f"{SECOND_EXIT} {name}" if second else f"interrupted by {name}"
    _say(f"hpcai_jax: {what} during {_where[0]}: {kept}; exit {code}")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a write under way in the main thread: skipped
            stream.flush()
    os._exit(code)


def keeping(kept: str) -> None:
    """What a hard exit would leave on disk from now on, for its line ("": the default)."""
    _kept[:] = [kept] if kept else []


def on_hard_exit(cleanup: Callable[[], None]) -> None:
    """`cleanup` runs before a hard exit (until `restore`), after those registered later."""
    _cleanups.append(cleanup)


def received() -> str | None:
    """The first signal noted, by name; None if none."""
    return _noted[0][0] if _noted else None


def at(where: str, then: str = "") -> None:
    """What the run is doing now, for the line of an interrupt that arrives meanwhile; `then`:
    what it does once it stops after that (a clause, for the first signal's answer)."""
    _where[0], _then[0] = where, then


def doing() -> tuple[str, str]:
    """What the run is doing and does then, as `at` last said: `at(*doing())` puts it back."""
    return _where[0], _then[0]


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
        hard_exit(_noted[0][0], second=len(_noted) > 1)
