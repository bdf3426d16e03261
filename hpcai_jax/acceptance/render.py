"""The acceptance's outputs, written from its journal: `acceptance.json` (every item with its
value, unit, reference and verdict), `acceptance.md` (the same as a table, for a build log or
a page), and the summary printed last. It imports no JAX, so the shell script can write them
after the measuring process died.

    python -m hpcai_jax.acceptance.render OUT_DIR [--interrupted_exit=CODE]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from hpcai_jax.acceptance.items import (
    FAIL,
    GROUP_NAMES,
    Item,
    interrupted_item,
    not_reached_item,
    verdict_of,
)
from hpcai_jax.acceptance.journal import Journal
from hpcai_jax.file_modes import as_created

JSON_NAME, MD_NAME = "acceptance.json", "acceptance.md"
SCHEMA_VERSION = 1


def header(journal: Journal) -> dict:
    """The run's own facts (command, sizes, budget, start), from the journal's first note."""
    return next((n["run"] for n in journal.notes() if "run" in n), {})


def document(journal: Journal) -> dict:
    items = journal.items()
    run = header(journal)
    reached = {i.group for i in items} | set(journal.finished())
    if journal.interrupted() is not None:
        reached.add(journal.interrupted())
    items += [not_reached_item(g) for g in run.get("groups") or GROUP_NAMES if g not in reached]
    started = run.get("started_unix_s")
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict_of(items) if items else FAIL,
        "counts": {v: sum(i.verdict == v for i in items) for v in ("PASS", "WARN", "FAIL", "n/a")},
        "run": run,
        # The backend the measuring process ran on (the last process's), None before it started.
        "backend": next((n["backend"] for n in reversed(journal.notes()) if "backend" in n), None),
        "wall_s": round(time.time() - started, 1) if started else None,
        "restarts": [n for n in journal.notes() if "resumed_after_exit" in n],
        "items": [i.to_dict() for i in items],
    }


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        as_created(f.fileno())  # mkstemp's 600: the umask's mode, as open gives
        f.write(text)
    os.replace(tmp, path)


def _ratio(item: Item) -> str:
    return "-" if item.ratio is None else f"{item.ratio:.3f}"


def table(items: list[Item]) -> str:
    """Fixed-width rows: name, value, ratio to the reference, verdict, reference and note."""
    width = max([len(i.name) for i in items] + [4])
    value_width = max([len(i.shown_value()) for i in items] + [5])
    lines = [f"{'item':{width}}  {'value':>{value_width}}  {'ratio':>6}  verdict  reference; note"]
    for i in items:
        tail = "; ".join(t for t in (i.reference, i.note) if t)
        lines.append(
            f"{i.name:{width}}  {i.shown_value():>{value_width}}  {_ratio(i):>6}  {i.verdict:7}  "
            f"{tail}"
        )
    return "\n".join(lines)


def markdown(doc: dict) -> str:
    run = doc["run"]
    items = [Item.from_dict(d) for d in doc["items"]]
    lines = [
        "# Accelerator acceptance",
        "",
        f"- command: `{run.get('command', '?')}`",
        f"- verdict: **{doc['verdict']}** ({doc['counts']['PASS']} PASS, "
        f"{doc['counts']['WARN']} WARN, {doc['counts']['FAIL']} FAIL) in "
        f"{doc['wall_s'] if doc['wall_s'] is not None else '?'} s of a "
        f"{run.get('budget_s', '?')} s budget",
    ]
    if doc["restarts"]:
        lines.append(f"- restarts after a dead process: {len(doc['restarts'])}")
    lines += [
        "",
        "| group | item | value | reference | ratio | verdict | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i in items:
        cells = (i.group, i.name, i.shown_value(), i.reference, _ratio(i), i.verdict, i.note)
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write(out_dir: Path) -> dict:
    """Writes acceptance.json and acceptance.md from the journal (atomically); returns the
    document."""
    doc = document(Journal(out_dir))
    _atomic_write(out_dir / JSON_NAME, json.dumps(doc, indent=2) + "\n")
    _atomic_write(out_dir / MD_NAME, markdown(doc))
    return doc


def summary(doc: dict) -> str:
    items = [Item.from_dict(d) for d in doc["items"]]
    counts = doc["counts"]
    return (
        table(items)
        + f"\n\nacceptance: {doc['verdict']} ({counts['PASS']} PASS, {counts['WARN']} WARN, "
        f"{counts['FAIL']} FAIL) in {doc['wall_s']} s"
    )


def exit_code(doc: dict) -> int:
    return 1 if doc["verdict"] == FAIL else 0


USAGE = "usage: python -m hpcai_jax.acceptance.render OUT_DIR [--interrupted_exit=CODE]"
HELP = (
    "Writes acceptance.json and acceptance.md from OUT_DIR's journal and prints the summary\n"
    "(docs/acceptance.md); --interrupted_exit=CODE first reports the group a measuring process\n"
    "that died with CODE left unfinished."
)


def main(argv: list[str]) -> int:
    """Finishes a run whose measuring process died: its group is reported, then the files."""
    if any(a in ("-h", "--help") for a in argv):
        print(f"{USAGE}\n\n{HELP}")
        return 0
    args = [a for a in argv if not a.startswith("--interrupted_exit=")]
    codes = [a.split("=", 1)[1] for a in argv if a.startswith("--interrupted_exit=")]
    if unknown := [a for a in args if a.startswith("-")]:
        print(f"render: {unknown[0]}: not an option of render; {USAGE}", file=sys.stderr)
        return 2
    if len(args) != 1 or (codes and not codes[0].lstrip("-").isdigit()):
        print(f"render: {USAGE}", file=sys.stderr)
        return 2
    out_dir = Path(args[0])
    journal = Journal(out_dir)
    if not journal.path.exists():
        print(f"render: {journal.path}: no acceptance journal there", file=sys.stderr)
        return 2
    if codes and (cut := journal.interrupted()) is not None:
        journal.finish(cut, [interrupted_item(cut, int(codes[0]))])
    doc = write(out_dir)
    print(summary(doc))
    return exit_code(doc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
