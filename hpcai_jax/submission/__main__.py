"""`python -m hpcai_jax.submission pack RUN_RECORDS... --out=DIR [--system_json=FILE]
[--with_weights]` and `python -m hpcai_jax.submission check DIR [--recount] [--reevaluate]
[--rerun_steps=N [--same_system]] [--data_dir=DIR]`. check prints what a re-evaluation or a
re-run measured (`measured: ...` lines), then PASS (exit 0) or one line per failure (exit 1);
bad input (a record without an MLLOG, a malformed package, an option that cannot run) is one
line on stderr and exit 2, like `python -m hpcai_jax.main`."""

from __future__ import annotations

import argparse
import sys

from hpcai_jax.errors import Parser, tool_main

PROG = "hpcai_jax.submission"
EPILOG = """\
check prints what a re-evaluation or a re-run measured (`measured: ...` lines), then PASS
(exit 0) or one line per failure (exit 1); bad input is one line on stderr and exit 2.

examples: a run a package can take has an MLLOG (--mllog, which needs the mllog extra:
pip install -e '.[mllog]') and a record named by --run_name (else train-<UTC>-<pid>):
  python -m hpcai_jax.main --flagfile=configs/quickstart.flags --run_name=quickstart --mllog=results/quickstart.mllog
  python -m hpcai_jax.submission pack results/quickstart.json --out=submission
  python -m hpcai_jax.submission check submission --recount
"""


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=f"python -m {PROG}",
        description="Gather training and STREAM records into a submission package (pack), and\n"
        "re-derive and check a package's figures (check): docs/submission.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    pack = commands.add_parser("pack", help="gather training and STREAM records into a package")
    pack.add_argument("records", nargs="+", metavar="RUN_RECORDS", help="record files or folders")
    pack.add_argument("--out", required=True, help="the package folder (new, or empty)")
    pack.add_argument(
        "--system_json", help="a JSON object merged into system.json (the interconnect, ...)"
    )
    pack.add_argument(
        "--with_weights",
        action="store_true",
        help="also each run's final weights, <run_id>.weights (for check --reevaluate)",
    )
    check = commands.add_parser("check", help="re-derive and check a package's figures")
    check.add_argument("package", metavar="DIR")
    check.add_argument(
        "--recount", action="store_true", help="also recount FLOPs per step from the flagfiles"
    )
    check.add_argument(
        "--reevaluate",
        action="store_true",
        help="evaluate the packed weights again on the held-out split (pack --with_weights)",
    )
    check.add_argument(
        "--rerun_steps",
        type=int,
        metavar="N",
        help="re-run each flagfile for N steps here: FLOPs per step (and step time)",
    )
    check.add_argument(
        "--same_system",
        action="store_true",
        help="this machine is the runs' system: the re-run's median step must match too",
    )
    check.add_argument(
        "--data_dir",
        metavar="DIR",
        help="the data set's folder for --reevaluate and --rerun_steps (default: the flagfile's)",
    )
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.command == "pack":
        from hpcai_jax.submission.pack import pack

        print(f"package: {pack(args.records, args.out, args.system_json, args.with_weights)}")
        return 0
    from hpcai_jax.submission.verify import Review, check

    review = Review(
        args.recount, args.reevaluate, args.rerun_steps, args.same_system, args.data_dir
    )
    notes: list[str] = []
    verdicts: list[tuple[str, str, str]] = []
    failures = check(args.package, review=review, notes=notes, verdicts=verdicts)
    for note in notes:
        print(f"measured: {note}")
    for who in dict.fromkeys(w for w, _, _ in verdicts):  # each run, then the package
        said = ", ".join(f"{name} {v}" for w, name, v in verdicts if w == who)
        print(f"checked {'' if who == 'package' else 'run '}{who}: {said}")
    print("\n".join(failures) if failures else "PASS")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    return tool_main(PROG, run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
