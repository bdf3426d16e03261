"""The one exception type that ends a run with a one-line message instead of a traceback."""


class UsageError(Exception):
    """Bad input from the user (a flag, a file, a data set): printed as one line, exit code 2.

    The message must name the flag or file and say what was expected.
    """

    exit_code = 2


def tool_main(prog: str, run, argv: list[str]) -> int:
    """A command-line tool's main: `run(argv)` gives the exit code; a UsageError ends in one
    line on stderr, `PROG: error: ...`, and its exit code."""
    import sys

    try:
        return run(argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
