"""The command: every package checked in turn (a progress line each), the passing ones ranked,
the list written whole. Exit 0 when at least one entry is listed, 1 when none is (every
package failed), 2 on bad input (docs/ranking.md, "Exit codes")."""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.ranking import collect, consistency, entries, render_html, render_text, twice
from hpcai_jax.ranking.columns import Meta
from hpcai_jax.ranking.order import NotListed, build
from hpcai_jax.ranking.verify import Options, Verified, verified
from hpcai_jax.submission import FLAGS, MLLOG, RECORD, verify
from hpcai_jax.telemetry import mllog


def _plain(line: str, path: Path) -> str:
    """check's line with the package's own location replaced by its name: the list says the
    same wherever the packages lie."""
    for where in sorted({str(path.resolve()), str(path)}, key=len, reverse=True):
        line = line.replace(where, path.name)
    return line


def _progress(i: int, n: int, v: Verified, seconds: float) -> str:
    runs = len(consistency.trained(v.path)) if v.listed else 0
    if not v.listed:
        said = f"not listed: {_plain(v.failure, v.path)}"
    elif runs:
        said = f"listed, {runs} run{'s' if runs > 1 else ''}, {' '.join(v.levels)}"
    else:
        said = "passed check, no training run to list (STREAM runs alone)"
    return f"[{i}/{n}] {v.path.name}: {said} ({seconds:.1f} s)"


def distinct(paths: list[Path]) -> tuple[list[tuple[Path, str]], list[NotListed]]:
    """The packages to check, by name, with their digests (empty: unsafe to read), and those
    not to: a package whose digest an earlier one (by name) has is listed once, as that one."""
    first: dict[str, Path] = {}
    keep, twice = [], []
    for path in sorted(paths, key=lambda p: (p.name, str(p))):
        digest = "" if collect.unsafe(path) else collect.digest(path)
        if digest and digest in first:
            same = first[digest].name
            why = f"the same package as {same} (sha256 {digest}): listed once, as {same}"
            twice.append(NotListed(path.name, why))
            continue
        first.setdefault(digest, path)
        keep.append((path, digest))
    return keep, twice


def checked(
    paths: list[Path], options: Options, say=print
) -> tuple[list[Verified], list[NotListed]]:
    """Each distinct package checked in turn, a progress line each; the ones that passed, and
    a line for each of the others."""
    unique, not_listed = distinct(paths)
    for t in not_listed:
        say(f"{t.package}: not checked: {t.why}", flush=True)
    done, seen = [], twice.Seen()
    for i, (path, digest) in enumerate(unique, 1):
        start = time.monotonic()
        v = verified(path, options, digest)
        again = seen.add(path) if v.listed else ""
        v = v._replace(failure=again, levels=()) if again else v
        say(_progress(i, len(unique), v, time.monotonic() - start), flush=True)
        done.append(v)
        if not v.listed:
            not_listed.append(NotListed(path.name, _plain(v.failure, path)))
    return [v for v in done if v.listed], not_listed


def files(listed: list[Verified], not_listed: list[NotListed], all_runs: bool, meta: Meta):
    """Every file of the list: the pages, the CSV, JSON and Markdown, each run's files."""
    found = [e for v in listed for e in entries.of(v)]
    ranking = build(found, not_listed, all_runs)
    out: dict[str, str | bytes] = dict(render_html.pages(ranking, meta))
    out["ranking.csv"] = render_text.csv_text(ranking)
    out["ranking.json"] = render_text.json_text(ranking, meta)
    out["ranking.md"] = render_text.md_text(ranking, meta)
    roots = {v.digest: v.path for v in listed}
    for e in ranking.entries:
        for suffix in (RECORD, MLLOG, FLAGS):
            out[f"runs/{e.result_id}{suffix}"] = (
                roots[e.digest] / f"{e.run_id}{suffix}"
            ).read_bytes()
    return out, ranking


def validate(date: str | None, options: Options) -> None:
    """UsageError (one line) for a flag that cannot run, before any package is read."""
    review = verify.Review(  # --data_dir serves the re-evaluations of packages with weights
        options.recount, True, options.rerun_steps, options.same_system, options.data_dir
    )
    review.validate_options()
    if date is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise UsageError(f"--date={date}: expected the list's date as YYYY-MM-DD")
    if importlib.util.find_spec("mlperf_logging") is None:
        raise UsageError(
            f"the list runs check, which runs the MLLOG compliance checker: {mllog.INSTALL}"
        )
