"""`python -m hpcai_jax.ranking PKG_DIR... --out=DIR [--overwrite] [--all] [--date=YYYY-MM-DD]
[--cpu_examples] [--recount] [--rerun_steps=N [--same_system]] [--data_dir=DIR]`: submission
packages checked and ranked into an HPC AI500 V3.0 list (docs/ranking.md). A progress line per
package; exit 0 when anything is listed, 1 when nothing is, 2 on bad input (one line)."""

from __future__ import annotations

import argparse
import sys

from hpcai_jax.errors import Parser, tool_main

PROG = "hpcai_jax.ranking"
EPILOG = """\
Exit 0: at least one entry listed; 1: no package passed check; 2: bad input (one line).

examples:
  python -m hpcai_jax.ranking submissions/ --out=list --date=2026-12-07
  python -m hpcai_jax.ranking docs/example_ranking/packages --out=/tmp/list --cpu_examples
"""


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=f"python -m {PROG}",
        description="Check submission packages and rank those that pass into an HPC AI500 "
        "V3.0 list: docs/ranking.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("packages", nargs="+", metavar="PKG_DIR", help="packages, or folders of them")
    p.add_argument("--out", required=True, help="the list's folder (new, or --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace a list already at --out")
    p.add_argument("--all", action="store_true", help="every run, not the best per system")
    p.add_argument("--date", help="the list's date, YYYY-MM-DD (none by default: same bytes)")
    p.add_argument(
        "--cpu_examples",
        action="store_true",
        help="mark every page: CPU examples, not systems (docs/example_ranking)",
    )
    p.add_argument("--recount", action="store_true", help="check --recount on every package")
    p.add_argument("--rerun_steps", type=int, metavar="N", help="check --rerun_steps=N: level L3")
    p.add_argument(
        "--same_system", action="store_true", help="check --same_system (with --rerun_steps)"
    )
    p.add_argument("--data_dir", metavar="DIR", help="the data for --reevaluate and --rerun_steps")
    return p


def run(argv: list[str]) -> int:
    from hpcai_jax.ranking import cli, collect, output
    from hpcai_jax.ranking.columns import Meta
    from hpcai_jax.ranking.verify import Options

    args = parser().parse_args(argv)
    options = Options(args.recount, args.rerun_steps, args.same_system, args.data_dir)
    cli.validate(args.date, options)
    output.refuse(args.out, args.overwrite)
    paths = collect.packages(args.packages)
    listed, not_listed = cli.checked(paths, options)
    meta = Meta(args.date, args.cpu_examples)
    files, ranking = cli.files(listed, not_listed, args.all, meta)
    where = output.write(args.out, files)
    rows = sum(len(t.rows) for t in ranking.tables)
    print(
        f"list: {where} ({rows} entries in {len(ranking.tables)} tables; "
        f"{len(ranking.not_listed)} packages not listed)"
    )
    return 0 if rows else 1


def main(argv: list[str] | None = None) -> int:
    return tool_main(PROG, run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
