"""`--flagfile` includes that work from any folder, and one line for a flagfile that cannot be
read.

absl reads a flagfile's nested `--flagfile=PATH` relative to the working directory, so
`configs/ensemble_ablation.flags` (which includes `configs/quickstart.flags`) worked only from
the repository's root. `expand` reads the flagfiles itself, as absl does (blank lines and lines
starting with `#` or `//` skipped, the others stripped, a nested include expanded where it
stands, a circular one skipped), and looks for a relative nested include in the working
directory first (absl's rule, so nothing that worked changes), then beside the including file
and in each folder above it. absl then parses flags only (docs/design.md, Decisions).
"""

from __future__ import annotations

import os
from pathlib import Path

from hpcai_jax.errors import UsageError

DIRECTIVES = ("--flagfile", "-flagfile")


def expand(argv: list[str]) -> list[str]:
    """`argv` with every `--flagfile=PATH` (or `--flagfile PATH`) replaced by the file's flag
    lines, up to a `--`; UsageError (one line naming the file) where one cannot be read."""
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            return [*out, arg, *rest]
        if arg in DIRECTIVES:
            if not rest:
                raise UsageError(f"{arg}: expected a file name")
            out += _lines(os.path.expanduser(rest.pop(0)), [])
        elif arg.split("=", 1)[0] in DIRECTIVES and "=" in arg:
            out += _lines(os.path.expanduser(arg.split("=", 1)[1]), [])
        else:
            out.append(arg)
    return out


def _lines(name: str, stack: list[str]) -> list[str]:
    """The flag lines of flagfile `name`, nested includes expanded (absl's rules)."""
    if not name or name in stack:  # absl ignores an empty name and a circular include
        return []
    try:
        text = Path(name).read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        where = f" (included by {stack[-1]})" if stack else ""
        raise UsageError(f"--flagfile={name}{where}: cannot read it: {why}") from None
    out = []
    for line in text.splitlines():
        flag = line.strip()
        if not flag or line.startswith(("#", "//")):
            continue
        if flag.split("=", 1)[0] in DIRECTIVES and "=" in flag:
            out += _lines(included(flag.split("=", 1)[1], name), [*stack, name])
        else:
            out.append(flag)
    return out


def included(path: str, including: str) -> str:
    """Where a nested include `path` of flagfile `including` is: as given when absolute or
    found from the working directory, else the first of the including file's folder and the
    folders above it that has it; as given when none does (its error names it)."""
    path = os.path.expanduser(path)
    if os.path.isabs(path) or os.path.exists(path):
        return path
    folder = Path(including).resolve().parent
    for base in (folder, *folder.parents):
        if (base / path).is_file():
            return str(base / path)
    return path
