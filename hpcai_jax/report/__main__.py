"""`python -m hpcai_jax.report`: the command line. Bad input (a missing path, no records, an
--out it cannot write, a wrong flag) ends in one line on stderr and exit code 2, no traceback,
like `python -m hpcai_jax.main`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpcai_jax.errors import UsageError, tool_main
from hpcai_jax.report import output
from hpcai_jax.report.build import build_report
from hpcai_jax.report.cli import Parser
from hpcai_jax.report.compare import compare, read

PROG = "hpcai_jax.report"
DESCRIPTION = """\
Reports people can read and compare: a markdown report with PNG plots from training and STREAM
records, or two records side by side."""
EPILOG = """\
The report reads the JSON records only (no JAX, no device), so records copied off a cluster can
be reported anywhere. Runs of one configuration that differ only in --seed (a sweep's
--repeats) are summarised under Repeats: N, mean, spread and a 95 % Student-t interval.
What each section holds: docs/score.md, section 9.

examples:
  python -m hpcai_jax.report results/
  python -m hpcai_jax.report --compare results/a.json results/b.json --out results/report
"""


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=f"python -m {PROG}",
        description=DESCRIPTION,
        epilog=EPILOG,
        usage="%(prog)s RESULTS... [--out DIR] | --compare A B [--out DIR]",
    )
    p.add_argument(
        "results",
        nargs="*",
        metavar="RESULTS",
        help="record JSON files, or directories of them (their *.json files)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="report directory (default: report/ under the first RESULTS; with --compare, "
        "none: the comparison is printed only)",
    )
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN",
        help="report only this run, by its run id or record file name (repeatable; default: "
        "every record under RESULTS)",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="two record files of one mode, shown side by side with B/A (default: none, a "
        "report of RESULTS)",
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
    path, notes = build_report(args.results, args.out, tuple(args.run))
    for note in notes:  # what was chosen for the reader, before anything else
        print(f"note: {note}")
    print(f"report: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return tool_main(PROG, run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
