"""BabelStream runs in a submission package. NERSC-10's run rules ask for all data printed to
stdout, so `pack` copies each STREAM record and what it printed, verbatim, into `stream/`, and
the README gets a bandwidth table; `check` holds the printed table to the record's figures and
each run to the rules (arrays ≥ 4 × the last cache, validation passed): docs/submission.md,
"BabelStream runs"."""

from __future__ import annotations

from pathlib import Path

from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.records.stream import Kernel, StreamRecord
from hpcai_jax.stream import report
from hpcai_jax.units import formatted

FOLDER, PRINTED = "stream", ".txt"  # stream/<run_id>.json, stream/<run_id>.txt
KERNELS = ("copy", "mul", "add", "triad", "dot")


def refused(path: Path, record: StreamRecord) -> str:
    """Why `pack` cannot take this STREAM record (a UsageError line), or empty."""
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
    return ""


def write(folder: Path, path: Path, record: StreamRecord) -> None:
    """stream/<run_id>.json (the record, byte for byte) and stream/<run_id>.txt (its stdout)."""
    out = folder / FOLDER
    out.mkdir(exist_ok=True)
    (out / f"{record.run_id}.json").write_bytes(path.read_bytes())
    (out / f"{record.run_id}{PRINTED}").write_text(record.printed or "", encoding="utf-8")


def load(root: Path) -> list[StreamRecord]:
    """The package's STREAM records, by file name; UsageError on one that is not."""
    found = []
    for path in sorted((root / FOLDER).glob("*.json")):
        try:
            record = records.read(path)
        except records.RecordError as e:
            raise UsageError(f"{path}: not a readable record ({e})") from None
        if not isinstance(record, StreamRecord) or record.run_id != path.stem:
            raise UsageError(f"{path}: not the STREAM record of run {path.stem}")
        found.append(record)
    return found


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


def _figures(key: str, kernel: Kernel) -> report.KernelFigures:
    return report.KernelFigures(
        key, kernel.label, kernel.bytes_moved, kernel.min_s, kernel.max_s, kernel.avg_s, 1, None
    )


def _printed_rows(record: StreamRecord) -> list[str]:
    """The lines the record's figures print as: its table's (or CSV's) rows."""
    conf = (record.config or {}).get("stream") or {}
    mib = bool(conf.get("mibibytes"))
    figures = [_figures(key, k) for key, k in record.kernels.items()]
    if conf.get("csv"):
        lines = report.csv(
            figures, record.run.num_times, record.array.elements, record.array.itemsize, mib
        ).splitlines()[1:]
        return [",".join(line.split(",")[:8]) for line in lines]  # without per-device columns
    merit = report.figure_of_merit(figures, mib).split(" (=")[0]  # without the note
    return [*report.table(figures, mib).splitlines()[1:], merit]


def _arithmetic(record: StreamRecord) -> list[str]:
    """Each kernel's bandwidth is its bytes over its fastest call, as BabelStream defines it."""
    out = []
    for key, k in record.kernels.items():
        want = k.bytes_moved / k.min_s * 1e-9
        if abs(k.gb_per_s - want) > 1e-9 * want:
            out.append(
                f"run {record.run_id}: kernels.{key}.gb_per_s {k.gb_per_s:.6g} != bytes_moved / "
                f"min_s = {want:.6g}"
            )
    return out


def check(root: Path, record: StreamRecord) -> list[str]:
    """Failure lines of one packed STREAM run: its printed output present and the record's,
    each kernel's row re-derived from the record's figures, the size rule and validation."""
    run, out = record.run_id, []
    printed = root / FOLDER / f"{run}{PRINTED}"
    if not printed.is_file():
        return [f"run {run}: {FOLDER}/{printed.name} is missing (its stdout, NERSC-10's rules)"]
    text = printed.read_text(encoding="utf-8", errors="replace")
    if text != (record.printed or ""):
        out.append(f"run {run}: {FOLDER}/{printed.name} is not the printed output its record holds")
    lines = text.splitlines()
    for row in _printed_rows(record):
        if not any(line.rstrip().startswith(row.rstrip()) for line in lines):
            out.append(f"run {run}: printed output has no line {row.rstrip()!r} (its figures)")
    out += _arithmetic(record)
    if not record.cache.size_rule_ok or record.status == "small_arrays":
        out.append(f"run {run}: arrays below the size rule ({record.cache.message})")
    if not record.validation.passed or record.status != "complete":
        out.append(
            f"run {run}: status {record.status}, validation passed {record.validation.passed}"
        )
    return out
