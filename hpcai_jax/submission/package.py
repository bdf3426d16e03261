"""What a package says of its runs together (docs/submission.md §3, "What check proves"):
`README.md` and `system.json` regenerated from the records with pack's own writers and
compared, and no run packed twice under two ids. Returns failure lines, `run ID: ...` where one
run is at fault, `package: ...` otherwise.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.records import TrainRecord
from hpcai_jax.submission import README, SYSTEM, pack, safe, streams, system

# system.json's keys pack derives from the records; the rest are the submitter's (--system_json)
# or, packing_host, the packing host's own description, which no record holds.
DERIVED = ("devices", "software", "runs")
UNCHECKED = ("packing_host",)


def check(root: Path, runs: list) -> list[str]:
    """The package's failure lines (`runs`: check.Run, in file order)."""
    trained = {run.id: run for run in runs if isinstance(run.record, TrainRecord)}
    stream_runs = streams.readable(streams.load(root))  # a malformed one failed already
    if not trained and not stream_runs:
        return []
    return [
        *_readme(root, trained, stream_runs),
        *_system(root, trained, stream_runs),
        *_duplicates(list(trained.values())),
        *streams.duplicates(stream_runs),
    ]


def _ordered(ids: list[str], trained: dict) -> list:
    """The runs in the order a file lists them (pack keeps the order it was given), the rest
    after them by id."""
    first = list(dict.fromkeys(i for i in ids if i in trained))
    return [trained[i].record for i in first + sorted(set(trained) - set(first))]


def _row(line: str, trained: dict) -> bool:
    return any(line.startswith(f"| {run} |") for run in trained)


def _readme(root: Path, trained: dict, stream_runs: list) -> list[str]:
    path = root / README
    if not path.is_file():
        return [f"package: {README} is missing (pack writes the score table from the records)"]
    got = path.read_text(encoding="utf-8", errors="replace").splitlines()
    rows = [line.split("|")[1].strip() for line in got if line.startswith("| ")]
    want = pack.readme(_ordered(rows, trained), stream_runs).splitlines()
    if got == want:
        return []
    out = []
    for run in _ordered(rows, trained):
        row = next(line for line in want if line.startswith(f"| {run.run_id} |"))
        mine = [line for line in got if line.startswith(f"| {run.run_id} |")]
        if not mine:
            out.append(f"run {run.run_id}: {README} has no score-table row (pack writes {row!r})")
        elif mine != [row]:
            out.append(
                f"run {run.run_id}: {README} score-table row {mine[0]!r} != {row!r} "
                f"(pack.readme from {run.run_id}.json)"
            )
    mine = [(n, line) for n, line in enumerate(got, 1) if not _row(line, trained)]
    pack_lines = [line for line in want if not _row(line, trained)]
    for ours, b in itertools.zip_longest(mine, pack_lines):
        n, a = ours or (len(got) + 1, None)
        if a != b:
            out.append(f"package: {README} line {n} {a!r} != {b!r} (pack.readme from the records)")
            break
    return out


def _system(root: Path, trained: dict, stream_runs: list) -> list[str]:
    path = root / SYSTEM
    given = safe.load_json(path)  # bounded in size and nesting
    if not isinstance(given, dict):
        raise UsageError(f"{path}: not a JSON object")
    user = {k: v for k, v in given.items() if k not in DERIVED + UNCHECKED}
    ordered = _ordered(list(given.get("runs") or {}), trained)
    want = json.loads(json.dumps(system.describe(ordered + stream_runs, user)))
    out = []
    for key in DERIVED:
        if key == "runs":
            out += _system_runs(given.get("runs"), want["runs"])
        elif given.get(key) != want[key]:
            out.append(
                f"package: {SYSTEM} {key} {given.get(key)!r} != {want[key]!r} "
                "(system.describe from the records' provenance)"
            )
    return out


def _system_runs(given, want: dict) -> list[str]:
    if not isinstance(given, dict):
        return [f"package: {SYSTEM} runs {given!r} is not an object of the package's runs"]
    out = [f"package: {SYSTEM} runs.{i} is no run of the package" for i in given if i not in want]
    for run, fields in want.items():
        mine = given.get(run)
        if not isinstance(mine, dict):
            out.append(f"run {run}: {SYSTEM} has no runs.{run} (pack writes its provenance)")
            continue
        for key, value in fields.items():
            if mine.get(key) != value:
                out.append(
                    f"run {run}: {SYSTEM} runs.{run}.{key} {mine.get(key)!r} != {value!r} "
                    f"({run}.json provenance.{key})"
                )
    return out


def _fingerprints(run) -> list[tuple[str, tuple]]:
    """What two runs never share: the log's time stamps (from its first line) and the record's
    measured epoch times, to the nanosecond. A copy re-noised in both is a forged clock, which
    only a re-run exposes (docs/submission.md)."""
    stamps = [line.get("time_ms") for line in run.log.lines]
    first = next((t for t in stamps if isinstance(t, (int, float))), 0)
    prints = [
        (
            f"the same MLLOG time stamps ({run.log.path.name})",
            tuple(t - first if isinstance(t, (int, float)) else t for t in stamps),
        )
    ]
    if run.record.epochs:
        walls = tuple(e.wall_s for e in run.record.epochs)
        prints.append((f"the same epochs[].wall_s ({run.id}.json)", walls))
    return prints


def _duplicates(runs: list) -> list[str]:
    seen: dict[tuple, str] = {}
    out, pairs = [], set()
    for run in runs:
        for what, key in _fingerprints(run):
            kind = what.split(" (")[0]
            other = seen.setdefault((kind, key), run.id)
            if other != run.id and (other, run.id) not in pairs:
                pairs.add((other, run.id))
                out.append(
                    f"run {run.id}: {what} as run {other}: one run packed twice under two ids"
                )
    return out
