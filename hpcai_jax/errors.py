"""The one exception type that ends a run with a one-line message instead of a traceback."""


class UsageError(Exception):
    """Bad input from the user (a flag, a file, a data set): printed as one line, exit code 2.

    The message must name the flag or file and say what was expected.
    """

    exit_code = 2
