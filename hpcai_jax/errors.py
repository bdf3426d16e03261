"""The exceptions that end a run with a one-line message instead of a traceback, and the exit
codes of the failures that are not input (docs/reliability.md, Exit codes)."""

# EX_UNAVAILABLE (sysexits.h): a peer or device the run needs stopped answering: a process of
# the job is gone (a collective failed for it) or hung (the watchdog). Transient: the launch
# scripts requeue it, up to MAX_REQUEUES.
LOST_EXIT_CODE = 69
# EX_TEMPFAIL, "try again later": SIGTERM or SIGINT stopped a run that can resume (a checkpoint
# saved or restored); the launch scripts requeue it. A run signalled before it had anything to
# resume from exits 128 + the signal's number instead (run/interrupt.py).
PREEMPTED_EXIT_CODE = 75


class UsageError(Exception):
    """Bad input from the user (a flag, a file, a data set): printed as one line, exit code 2.

    The message must name the flag or file and say what was expected.
    """

    exit_code = 2


class DataError(UsageError):
    """Bad input data (a record that does not decode, non-finite values in a batch): one line
    naming the data set and the examples, exit 65 (EX_DATAERR), never requeued: a rerun reads
    the same bytes (docs/reliability.md, Exit codes)."""

    exit_code = 65


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
