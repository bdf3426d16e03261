"""BabelStream runs in a submission package. NERSC-10's run rules ask for all data printed to
stdout, so `pack` copies each STREAM record and what it printed, verbatim, into `stream/`, and
the README gets a bandwidth table; `check` re-derives every figure of each run and renders its
printed output again (streamderive.py), after holding each value to its kind
(streamfields.py): docs/submission.md, "BabelStream runs"."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.submission import safe, streamderive, streamfields
from hpcai_jax.units import formatted

FOLDER, PRINTED = "stream", ".txt"  # stream/<run_id>.json, stream/<run_id>.txt
KERNELS = ("copy", "mul", "add", "triad", "dot")


def refused(path: Path, record: StreamRecord) -> str:
    """Why `pack` cannot take this STREAM record (a UsageError line), or empty: it breaks the
    rules, or check would fail it (its first line)."""
    run = record.run_id
    if record.status == "small_arrays" or not record.cache.size_rule_ok:
        return (
            f"{path}: STREAM run {run} breaks the size rule ({record.cache.message}): pack "
            "takes runs whose arrays are ≥ 4 × the last cache (--array_size=auto)"
        )
    if record.status != "complete" or not record.validation.passed:
        return f"{path}: STREAM run {run} is {record.status} (validation): pack takes valid runs"
    if not record.printed:
        return (
            f"{path}: STREAM run {run} holds no printed output (a record from before it was "
            "kept): NERSC-10's rules ask for it; run --mode=stream again"
        )
    packed = _read(path, run)
    lines = packed.problems or judged(record, record.printed, f"{run}{PRINTED}", None)
    if lines:
        more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
        why = lines[0].removeprefix(f"run {run}: ")
        return f"{path}: STREAM run {run} would fail check: {why}{more}"
    return ""


def write(folder: Path, path: Path, record: StreamRecord) -> None:
    """stream/<run_id>.json (the record, byte for byte) and stream/<run_id>.txt (its stdout)."""
    out = folder / FOLDER
    out.mkdir(exist_ok=True)
    (out / f"{record.run_id}.json").write_bytes(path.read_bytes())
    (out / f"{record.run_id}{PRINTED}").write_text(record.printed or "", encoding="utf-8")


class Packed(NamedTuple):
    """One stream/<id>.json: its record where it reads as one, else the lines saying why."""

    id: str
    record: StreamRecord | None
    problems: list[str]


def load(root: Path) -> list[Packed]:
    """The package's STREAM runs by file name, each value held to its kind (streamfields.py)
    before it is read as a record: a malformed one is failure lines naming the field, never an
    exception."""
    found = []
    for path in sorted((root / FOLDER).glob("*.json"), key=lambda p: p.stem):  # pack's order
        found.append(_read(path))
    return found


def _read(path: Path, run: str | None = None) -> Packed:
    """`path` as the STREAM record of `run` (default: its file name's, as packed)."""
    run = path.stem if run is None else run
    where = f"{FOLDER}/{path.name}" if path.stem == run else str(path)
    try:
        safe.run_id(run, where)
        data = safe.load_json(path)
    except UsageError as e:
        return Packed(run, None, [f"run {run}: {e}"])
    lines = [f"run {run}: {line}" for line in streamfields.problems(data, where)]
    if lines:
        return Packed(run, None, lines)
    try:
        record = records.read(data)
    except records.RecordError as e:
        return Packed(run, None, [f"run {run}: {where}: not a STREAM record ({e})"])
    if not isinstance(record, StreamRecord) or record.run_id != run:
        return Packed(run, None, [f"run {run}: {where}: not the STREAM record of run {run}"])
    return Packed(run, record, [])


def readable(packed: list[Packed]) -> list[StreamRecord]:
    return [p.record for p in packed if p.record is not None]


def section(streams: list[StreamRecord]) -> str:
    """The README's BabelStream table (GB/s, the fastest call), empty without STREAM runs."""
    if not streams:
        return ""
    head = (
        "| run | devices | precision | elements per array | MiB per array | last cache [MiB] "
        "| Copy | Mul | Add | Triad | Dot | validation |"
    )
    rows = [head, "|" + " --- |" * 12]
    for r in streams:
        cache = r.cache.bytes
        gbs = [formatted(k.gb_per_s, "{:.2f}") if k else "n/a" for k in map(r.kernels.get, KERNELS)]
        cells = [
            r.run_id,
            f"{r.placement.num_devices} × {r.placement.device_kind}",
            r.array.precision,
            str(r.array.elements),
            f"{r.array.bytes_per_array / 2**20:.0f}",
            "n/a" if cache is None else f"{cache / 2**20:.0f}",
            *gbs,
            "passed" if r.validation.passed else "FAILED",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return f"""
## BabelStream (NERSC-10's run rules)

{chr(10).join(rows)}

Bandwidth in GB/s from each kernel's fastest call, the first excluded; every array is ≥ 4 × the
last cache in front of the devices. Each run's stdout, verbatim: `stream/<run_id>.txt`; its
record: `stream/<run_id>.json`.
"""


def check(root: Path, packed: Packed, host_caches: dict | None = None) -> list[str]:
    """Failure lines of one packed STREAM run (streamderive.py): its printed output present and
    rendered again from the record, every figure re-derived, the rules and bounds held.
    `host_caches` carries each host's cache size from run to run of a package."""
    if packed.record is None:
        return packed.problems
    record, run = packed.record, packed.id
    printed = root / FOLDER / f"{run}{PRINTED}"
    if not printed.is_file():
        return [f"run {run}: {FOLDER}/{printed.name} is missing (its stdout, NERSC-10's rules)"]
    try:
        text = safe.read_text(printed)
    except UsageError as e:
        return [f"run {run}: {e}"]
    f = streamderive.Found(record)
    if text != record.printed:
        f.fail(f"{FOLDER}/{printed.name} is not the printed output its record holds")
    return list(dict.fromkeys(f.lines + judged(record, text, printed.name, host_caches)))


def judged(record: StreamRecord, text: str, name: str, host_caches: dict | None) -> list[str]:
    """Failure lines of the record's own figures and of `text`, its printed output (`name`):
    what check re-derives of a STREAM run, and what pack asks of one."""
    f = streamderive.Found(record)
    if streamderive.identity(f, record):
        for rule in (
            streamderive.arrays,
            streamderive.placement,
            streamderive.kernels,
            streamderive.merit,
            streamderive.processes,
            streamderive.validation,
            lambda f, r: streamderive.size_rule(f, r, {} if host_caches is None else host_caches),
            streamderive.plausible,
            streamderive.acceptance,
            lambda f, r: streamderive.output(f, r, text, name),
            lambda f, r: streamderive.output(f, r, r.printed or "", f"{r.run_id}.json printed"),
        ):
            rule(f, record)
    return list(dict.fromkeys(f.lines))


def duplicates(packed: list[StreamRecord]) -> list[str]:
    """One run packed twice under two ids: its measured calls and set-up times, to the last
    bit, are another's."""
    seen: dict[tuple, str] = {}
    out = []
    for r in packed:
        key = (
            tuple((k, v.min_s, v.max_s, v.avg_s) for k, v in r.kernels.items()),
            (r.timing.compile_s, r.timing.init_s),
        )
        other = seen.setdefault(key, r.run_id)
        if other != r.run_id:
            out.append(
                f"run {r.run_id}: the same kernel timings and set-up times as run {other}: one "
                "STREAM run packed twice under two ids"
            )
    return out
