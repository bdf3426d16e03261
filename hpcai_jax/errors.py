"""The exceptions that end a run with a one-line message instead of a traceback, and the exit
codes of the failures that are not input (docs/reliability.md, Exit codes)."""

import argparse

# EX_UNAVAILABLE (sysexits.h): a peer or device the run needs stopped answering: a process of
# the job is gone (a collective failed for it) or hung (the watchdog). Transient: the launch
# scripts requeue it, up to MAX_REQUEUES.
LOST_EXIT_CODE = 69
# EX_TEMPFAIL, "try again later": SIGTERM or SIGINT stopped a run that can resume (a checkpoint
# saved or restored); the launch scripts requeue it. A run signalled before it had anything to
# resume from exits 128 + the signal's number instead (run/interrupt.py).
PREEMPTED_EXIT_CODE = 75
# EX_IOERR: a write found no space (ENOSPC) or no quota (EDQUOT) left (`DiskFull`); the launch
# scripts requeue it, up to MAX_REQUEUES, as space is often freed by then (another job's files
# removed, a scratch purge) and the run resumes from its last complete checkpoint.
NO_SPACE_EXIT_CODE = 74


class UsageError(Exception):
    """Bad input from the user (a flag, a file, a data set): printed as one line, exit code 2.

    The message must name the flag or file and say what was expected.
    """

    exit_code = 2


class Parser(argparse.ArgumentParser):
    """The tools' argparse parser: a bad argument is a UsageError (one line naming it, exit 2),
    not argparse's usage block."""

    def error(self, message: str):
        raise UsageError(message)


class DataError(UsageError):
    """Bad input data (a record that does not decode, non-finite values in a batch): one line
    naming the data set and the examples, exit 65 (EX_DATAERR), never requeued: a rerun reads
    the same bytes (docs/reliability.md, Exit codes)."""

    exit_code = 65


class DiskFull(UsageError):
    """A write of the run found the file system full or the quota spent: one line naming the
    path and the bytes it needed, exit 74 (requeued: docs/reliability.md, Exit codes)."""

    exit_code = NO_SPACE_EXIT_CODE


_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "os_error_code='28'")


def is_full(error: BaseException | None) -> bool:
    """Whether `error`, or one it came from, says the disk or the quota is full: an OSError of
    ENOSPC or EDQUOT, or tensorstore's ValueError (RESOURCE_EXHAUSTED: ... No space left on
    device [os_error_code='28']) that orbax raises for it."""
    import errno

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(error) for text in _NO_SPACE_TEXT):
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full(flag: str, what: str, path, needed: int | None = None, then: str = "") -> DiskFull:
    """The one line of a write that found no space: the flag that named the place, what it
    wrote and where, the bytes it needed (where known) and what was kept."""
    size = f" ({needed:,} bytes needed)" if needed else ""
    then = f"; {then}" if then else ""
    return DiskFull(f"{flag}: no space left on device to write {what} {path}{size}{then}")


def tool_main(prog: str, run, argv: list[str]) -> int:
    """A command-line tool's main: `run(argv)` gives the exit code; a UsageError ends in one
    line on stderr, `PROG: error: ...`, and its exit code."""
    import sys

    try:
        return run(argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code


def end_process(line: str, code: int) -> None:
    """`line` on stderr (none if empty), then the process ends with `code` at once: no clean-up,
    no atexit, no JAX shutdown barrier (a lost peer, a second signal: each would wait or abort
    there)."""
    import os
    import sys

    if line:
        print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)
