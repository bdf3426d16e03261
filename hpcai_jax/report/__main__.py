"""`python -m hpcai_jax.report`: the command line. Bad input (a missing path, no records, an
--out it cannot write, a wrong flag) ends in one line on stderr and exit code 2, no traceback,
like `python -m hpcai_jax.main`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpcai_jax.errors import UsageError, tool_main
from hpcai_jax.report import output
from hpcai_jax.report.build import write_report
from hpcai_jax.report.compare import compare, read

PROG = "hpcai_jax.report"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"python -m {PROG}",
        description=__doc__.split("\n")[0],
        usage="%(prog)s RESULTS... [--out DIR] | --compare A B [--out DIR]",
    )
    p.add_argument(
        "results", nargs="*", metavar="RESULTS", help="record JSON files, or directories of them"
    )
    p.add_argument("--out", help="report directory (default: report/ under the first RESULTS)")
    p.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), help="two record files, shown side by side"
    )
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.compare:
        if args.results:
            raise UsageError(f"--compare takes two records, not also {' '.join(args.results)}")
        text = compare(*args.compare)
        if args.out:
            a, b = (read(p).run_id for p in args.compare)
            path = Path(args.out) / f"compare_{a}_vs_{b}.md"
            output.write_text(path, text)
        print(text, end="")
        return 0
    if not args.results:
        raise UsageError("give RESULTS (record files or directories), or --compare A B")
    path = write_report(args.results, args.out)
    print(f"report: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return tool_main(PROG, run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
