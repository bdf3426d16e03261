"""`python -m hpcai_jax.acceptance OUT_DIR [--smoke] [--budget_s=S] [--gpu_settings=SPEC]
[--groups=NAME,...] [--resume_after_exit=CODE]`: runs the acceptance plan and writes its outputs into OUT_DIR.

`benchmarks/accelerator/acceptance.sh` is the command users run; it calls this, and again with
`--resume_after_exit` when a measuring process dies, so the rest of the plan still runs.
Exit 0 when no item FAILs, 1 when one does, 2 for bad arguments (one line, no traceback).
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
import traceback
from pathlib import Path

from hpcai_jax import gpu_settings
from hpcai_jax.errors import UsageError

DEFAULT_BUDGET_S = {"full": 420.0, "smoke": 120.0}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage first)
        print(f"acceptance: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="python -m hpcai_jax.acceptance", description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", help="where acceptance.json, acceptance.md and the journal go")
    p.add_argument("--smoke", action="store_true", help="toy sizes: every item, on a CPU, fast")
    p.add_argument("--budget_s", type=float, default=None, help="seconds for the whole plan")
    p.add_argument("--gpu_settings", default="default", help="as hpcai_jax.main's flag")
    p.add_argument(
        "--groups", default="", help="only these groups, comma-separated (default: every group)"
    )
    p.add_argument("--resume_after_exit", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.budget_s is not None and not args.budget_s > 0:
        p.error(f"--budget_s={args.budget_s:g}: expected a number of seconds > 0")
    if args.budget_s is None:
        args.budget_s = DEFAULT_BUDGET_S["smoke" if args.smoke else "full"]
    args.groups = tuple(g for g in args.groups.split(",") if g) or None
    try:
        args.settings = gpu_settings.select(args.gpu_settings)
    except UsageError as e:
        p.error(str(e))
    out = Path(args.out_dir)
    if out.exists() and not out.is_dir():
        p.error(f"OUT_DIR {out}: exists and is not a directory")
    journal = out / "acceptance.journal.jsonl"
    if args.resume_after_exit is None and journal.exists():
        p.error(f"OUT_DIR {out}: holds an earlier acceptance run; choose another directory")
    return args


def _echo(item) -> None:
    from hpcai_jax.acceptance.render import table

    print(table([item]).splitlines()[1], flush=True)


def main(argv: list[str]) -> int:
    args = parse(argv)
    # Before JAX starts its backend (the plan's modules import JAX).
    applied = gpu_settings.apply(args.settings)
    from hpcai_jax.acceptance import plan, render

    names = [g.name for g in plan.GROUPS]
    if unknown := [g for g in args.groups or () if g not in names]:
        print(
            f"acceptance: error: --groups: unknown group {','.join(unknown)}"
            f" (expected some of {','.join(names)})",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from hpcai_jax.acceptance.items import failure_item
    from hpcai_jax.acceptance.journal import Journal
    from hpcai_jax.acceptance.sizes import FULL, SMOKE

    journal = Journal(out)
    if args.resume_after_exit is None:
        journal.note(
            run={
                "command": "acceptance.sh " + shlex.join(argv),
                "smoke": args.smoke,
                "budget_s": args.budget_s,
                "gpu_settings": applied.summary(),
                "groups": list(args.groups or ()),
                "host": platform.node(),
                "started_unix_s": time.time(),
            }
        )
    print(
        f"acceptance: {'smoke, toy sizes' if args.smoke else 'full sizes'}, "
        f"budget {args.budget_s:g} s; {applied.summary()}",
        flush=True,
    )
    try:
        plan.run(
            out,
            SMOKE if args.smoke else FULL,
            args.budget_s,
            accelerator=not args.smoke,
            groups=None if args.groups is None else plan.select(args.groups),
            after_exit=args.resume_after_exit,
            echo=_echo,
        )
    except Exception as e:  # noqa: BLE001 - e.g. no backend at all: still a verdict and files
        traceback.print_exc()
        journal.finish("acceptance", [failure_item("acceptance", e)])
    doc = render.write(out)
    print()
    print(render.summary(doc))
    return render.exit_code(doc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
