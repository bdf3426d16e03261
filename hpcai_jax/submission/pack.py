"""`pack RUN_RECORDS... --out=DIR [--with_weights]`: one folder holding each run's record, its
MLLOG, its configuration as a flagfile, the system description and a README with the score
table, and with --with_weights each run's final weights (run/kept_weights.py), checked against the
MLLOG's digest of them; each STREAM run's record and printed output go in stream/ (streams.py). The package is written into a temporary folder beside DIR and renamed
into place: a failed pack leaves nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import NamedTuple

from hpcai_jax import records
from hpcai_jax.errors import UsageError, is_full
from hpcai_jax.file_modes import as_created
from hpcai_jax.submission import (
    FLAGS,
    MLLOG,
    README,
    RECORD,
    SYSTEM,
    flagfile,
    safe,
    streams,
    system,
)
from hpcai_jax.submission.logfile import Log, metadata
from hpcai_jax.units import formatted


class Found(NamedTuple):
    """What pack was given: training records (file, record), then STREAM records."""

    train: list[tuple[Path, records.TrainRecord]]
    stream: list[tuple[Path, records.StreamRecord]]


def _records(paths: list[str]) -> Found:
    """Every training and STREAM record: files as given, folders' *.json that are."""
    found = Found([], [])
    for given in paths:
        path = Path(given)
        for file in sorted(path.glob("*.json")) if path.is_dir() else [path]:
            record = _load(file)
            if isinstance(record, records.TrainRecord):
                found.train.append((file, record))
            elif isinstance(record, records.StreamRecord):
                why = streams.refused(file, record)
                if why:
                    raise UsageError(why)
                found.stream.append((file, record))
            elif not path.is_dir():
                raise UsageError(
                    f"{path}: a --mode={record.mode} record; pack takes training and STREAM runs"
                )
    if not found.train and not found.stream:
        raise UsageError(f"no training or STREAM record in {' '.join(paths)}")
    ids = [r.run_id for _, r in found.train + found.stream]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise UsageError(f"run id {twice[0]} given twice: a package holds each run once")
    found.stream.sort(key=lambda pair: pair[1].run_id)  # the order check reads them in
    return found


def _load(path: Path) -> records.AnyRecord:
    try:
        if not path.is_file():  # a FIFO is never opened (it would wait for a writer)
            raise UsageError(f"{path}: not a regular file (a record is a JSON file)")
        record = records.read(path)
    except records.RecordError as e:
        raise UsageError(f"{path}: not a hpcai_jax record ({e})") from None
    if record.run_id is None:
        raise UsageError(f"{path}: not a hpcai_jax record (no run_id)")
    if isinstance(record, records.TrainRecord | records.StreamRecord):
        safe.run_id(record.run_id, path)  # it names the package's files
    if isinstance(record, records.TrainRecord) and record.status != "complete":
        why = f" ({record.reason.splitlines()[0]})" if record.reason else ""
        raise UsageError(
            f"{path}: run {record.run_id} is {record.status}{why}: pack takes complete runs only"
        )
    return record


def _mllog(path: Path, record: records.TrainRecord) -> Path:
    """The record's MLLOG: where the run wrote it, else a file of that name beside the record
    (records and logs copied off the cluster together, where the run's absolute path is no
    more)."""
    log = record.mllog
    if not log:
        raise UsageError(
            f"{path}: run {record.run_id} names no MLLOG: a submission needs its run made "
            "with --mllog=PATH"
        )
    for candidate in (Path(log), path.parent / Path(log).name):
        if candidate.is_file():
            return candidate
    raise UsageError(
        f"{path}: its MLLOG {log} (--mllog) does not exist, nor does "
        f"{path.parent / Path(log).name} beside the record"
    )


def _same_run(path: Path, record: records.TrainRecord, log: Path) -> None:
    """The MLLOG is the record's run's: the run ids its lines name (init_start, segment_stop,
    run_stop) are the record's, and it ends with the run_stop of a run of the record's status
    (the log of a later run of the same name that stopped early does not)."""
    lines = Log(log)
    keys = ("init_start", "segment_stop", "run_stop")
    ids = {metadata(line, "run_id") for key in keys for line in lines.all(key)} - {None}
    if ids != {record.run_id}:
        named = f"names run {', '.join(sorted(map(str, ids)))}" if ids else "names no run id"
        raise UsageError(
            f"{path}: its MLLOG {log} {named}, not {record.run_id}: the record and the log are "
            "from different runs"
        )
    last = lines.lines[-1] if lines.lines else {}
    status = metadata(last, "record_status")
    if last.get("key") != "run_stop":
        why = f"it ends without run_stop (its last line: {last.get('key')}): its run never finished"
    elif status not in (None, record.status):
        why = f"its run_stop ends a {status} run"
    else:
        return
    raise UsageError(
        f"{path}: its MLLOG {log} is not the log of complete run {record.run_id}: {why}"
    )


def _weights(path: Path, record: records.TrainRecord, log: Path) -> dict:
    """The run's final weights as numpy arrays, from where the run kept them (the MLLOG's
    `weights_digest` names the place), beside the record, or its final checkpoint; UsageError
    unless they are there and give the digest the log holds."""
    from hpcai_jax.run import kept_weights

    line = Log(log).one(kept_weights.MLLOG_KEY)
    if line is None:
        raise UsageError(
            f"{path}: its MLLOG {log} has no {kept_weights.MLLOG_KEY}: the run kept no weights "
            "(--nokeep_weights, or not complete); pack it without --with_weights"
        )
    config = record.config or {}
    kept = (line.get("metadata") or {}).get("path")
    candidates = [
        *([Path(kept)] if kept else []),
        path.parent / f"{record.run_id}{kept_weights.SUFFIX}",
    ]
    checkpoints = (config.get("reliability") or {}).get("checkpoint_dir")
    if checkpoints and record.timing:
        candidates.append(kept_weights.in_checkpoint(checkpoints, record.timing.steps))
    found = next((c for c in candidates if c.is_dir()), None)
    if found is None:
        raise UsageError(
            f"{path}: run {record.run_id}'s weights are in none of "
            f"{', '.join(map(str, candidates))}"
        )
    tree = kept_weights.load(found)
    value, _ = kept_weights.digest(tree)
    if value != line.get("value"):
        raise UsageError(
            f"{found}: sha256 {value} != the {kept_weights.MLLOG_KEY} of {log}: not the weights "
            f"run {record.run_id} kept"
        )
    return tree


def score_table(runs: list[records.TrainRecord]) -> str:
    head = (
        "| run | division | M | P_degree | devices | FLOPS (Eq. 6) | quality | target | penalty "
        "| VFLOPS | time to target [s] |"
    )
    rows = [head, "|" + " --- |" * 11]
    for r in runs:
        m, q, mesh = r.metrics, r.quality, r.mesh
        cells = [
            r.run_id,
            str(r.submission.division),
            str(mesh.ensemble_size),
            str(mesh.parallel_degree),
            f"{mesh.num_devices} × {r.provenance.device_kind}",
            formatted(m.flops_per_s),
            formatted(q.ensemble, "{:.4f}"),
            formatted(q.target, "{:g}"),
            formatted(m.penalty),
            formatted(m.vflops_per_s),
            formatted(r.time_to_target_s, "{:.1f}"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def readme(runs: list[records.TrainRecord], stream_runs: list | None = None) -> str:
    """The package's README: the score table of the training runs, then the BabelStream table
    (streams.section) where the package holds STREAM runs."""
    if not runs:
        return f"# BabelStream submission (hpcai_jax)\n{streams.section(stream_runs or [])}"
    return f"""# HPC AI500 V3.0 submission (hpcai_jax)

{score_table(runs)}

FLOPS is Eq. 6 (an epoch's training FLOPs over its wall time, Σ over the run's epochs), VFLOPS =
FLOPS × penalty, penalty = (quality / target)^n; time to target runs from run_start to the end of
the first evaluation that reached the target.

Per run: `<run_id>.json` (the record as the run wrote it), `<run_id>.mllog` (its MLPerf-style
log) and `<run_id>.flags` (its whole configuration: `python -m hpcai_jax.main
--flagfile=<run_id>.flags` reruns it). `system.json` describes the system.

Re-check every figure from the logs and records (and recount the FLOPs per step from the
flagfiles with `--recount`):

    python -m hpcai_jax.submission check . [--recount]
{streams.section(stream_runs or [])}"""


def _put(path: Path, write) -> None:
    """`write(path)`; a full disk or another failed write is one line naming the path the
    package would have had (not the temporary folder's)."""
    try:
        write(path)
    except Exception as e:  # orbax words a full disk in its own exceptions
        if isinstance(e, OSError) or is_full(e):
            tmp = next(p for p in path.parents if p in _TARGET)
            raise safe.written(_TARGET[tmp] / path.relative_to(tmp), e) from None
        raise


_TARGET: dict[Path, Path] = {}  # pack's temporary folder → the package it becomes


def _write(tmp: Path, found: Found, logs: list[Path], flag_lines: list, with_weights: bool):
    """Every run's files into the package's temporary folder, each under its plain run id."""
    for (path, record), log, lines in zip(found.train, logs, flag_lines, strict=True):
        run = record.run_id
        _put(tmp / f"{run}{RECORD}", lambda p, src=path: shutil.copyfile(src, p))
        _put(tmp / f"{run}{MLLOG}", lambda p, src=log: shutil.copyfile(src, p))
        header = f"# run {run}: its configuration, rebuilt from the record's config section\n"
        text = header + "\n".join(lines) + "\n"
        _put(tmp / f"{run}{FLAGS}", lambda p, t=text: p.write_text(t))
        if with_weights:
            from hpcai_jax.run import kept_weights

            tree = _weights(path, record, log)
            _put(tmp / f"{run}{kept_weights.SUFFIX}", lambda p, t=tree: kept_weights.save(p, t))
    for path, record in found.stream:
        _put(
            tmp / streams.FOLDER / f"{record.run_id}.json",
            lambda p, a=(path, record): streams.write(tmp, *a),
        )


def pack(
    paths: list[str], out: str, system_json: str | None = None, with_weights: bool = False
) -> Path:
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"--out={out}: already exists and is not empty; pack writes a new folder")
    found = _records(paths)
    logs = [_mllog(path, record) for path, record in found.train]
    for (path, record), log in zip(found.train, logs, strict=True):
        _same_run(path, record, log)
    flag_lines = [flagfile.lines(r.config or {}, str(p)) for p, r in found.train]
    runs = [r for _, r in found.train]
    stream_runs = [r for _, r in found.stream]
    described = system.describe(runs + stream_runs, system.user_file(system_json))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        as_created(tmp, directory=True)  # mkdtemp's 700: the umask's mode, as mkdir gives
    except OSError as e:
        raise UsageError(f"--out={out}: cannot create it ({e.strerror})") from None
    _TARGET[tmp] = target
    try:
        _write(tmp, found, logs, flag_lines, with_weights)
        _put(tmp / SYSTEM, lambda p: p.write_text(json.dumps(described, indent=2) + "\n"))
        _put(tmp / README, lambda p: p.write_text(readme(runs, stream_runs)))
        if target.exists():
            target.rmdir()  # empty, checked above
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _TARGET.pop(tmp, None)
    return target
