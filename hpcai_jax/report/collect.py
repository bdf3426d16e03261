"""Finds the records a report reads and sorts them into used and skipped, each skip with its why.

A comparison is only honest when the runs compared differ in what the experiment varies (M and
P_degree) and nothing else, so the records a report plots are the largest group sharing one
configuration; every other file is listed with the reason it was left out, never dropped
silently. Reads JSON only: no JAX, so the report runs anywhere the records are copied to.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hpcai_jax import records
from hpcai_jax.errors import UsageError

PLOTTED = ("train", "stream")

# Fields that name a run or place its inputs and outputs, not what it measures: a run with an
# MLLOG, a STREAM record for its roofline or another checkpoint folder is the same experiment.
# `--compare` leaves them out of its configuration differences too.
OUTPUT_ONLY = (
    "results.run_name",
    "results.results_dir",
    "results.overwrite",
    "results.mllog",  # one file per run (a sweep's runs each have their own)
    "results.sweep_plan",  # the plan's fingerprint: its runs' flags, already compared
    "results.stream_record",  # where the roofline's bandwidth is read from
    "results.submission_org",
    "results.submission_platform",
    "results.submission_status",
    "data.data_dir",
    "distributed.",
    "reliability.checkpoint_dir",
    "reliability.checkpoint_every",
    "reliability.keep_checkpoints",
    "train.log_every",
)
# The field a sweep's --repeats varies between the runs of one configuration: runs that differ
# in it alone are repeats, summarised together (report/repeats.py).
SEED = "train.seed"
# Besides those, the fields that vary by design between the points of a sweep: they never make
# two records incomparable.
_RUN_IDENTITY = (
    "mode",
    "mesh.ensemble_size",
    "mesh.parallel_degree",
    "mesh.members_per_device",
    SEED,
    *OUTPUT_ONLY,
)
# A STREAM record's figures depend on its own settings only (not on the training fields its
# config also carries): its precision splits the records. How many devices it measured and its
# array size are what a STREAM plot compares (each bar names both, and marks a size below the
# 4x-cache rule), so neither --stream_devices nor the size flags split the records.
_STREAM_FIELDS = ("stream.precision",)
MAX_LISTED_DIFFERENCES = 6


@dataclasses.dataclass(frozen=True)
class Record:
    """A record and the file it was read from. Given a JSON object (a test's edited copy), it
    reads it as the reader would read the file."""

    path: Path
    record: records.AnyRecord

    def __post_init__(self):
        if isinstance(self.record, dict):
            object.__setattr__(self, "record", records.read(self.record))

    @property
    def run_id(self) -> str:
        return self.path.stem if self.record.run_id is None else str(self.record.run_id)

    @property
    def mode(self) -> str:
        return self.record.mode


@dataclasses.dataclass(frozen=True)
class Point:
    """Where a training record stands in a sweep's plan: its point's label and seed index."""

    experiment: str
    label: str
    seed_index: int
    smoke: bool


def point(r: Record) -> Point | None:
    """The record's place in a sweep plan, read from its `sweep_plan` (point, seed_index), never
    from its run id; None outside a plan or in a record stamped before sweeps placed each run."""
    plan = getattr(r.record, "sweep_plan", None)
    if plan is None or plan.point is None or plan.seed_index is None:
        return None
    return Point(plan.experiment, plan.point, plan.seed_index, plan.size == "smoke")


def is_paper(r: Record) -> bool:
    """Whether a record belongs to the paper's plan: its own section reports it."""
    found = r.mode == "train" and point(r)
    return bool(found) and found.experiment == "paper"


@dataclasses.dataclass(frozen=True)
class Skipped:
    path: Path
    run_id: str | None
    why: str


@dataclasses.dataclass
class Collection:
    """The records a report plots, by mode, the ones it does not, and what the plotted share."""

    inputs: list[str]
    used: dict[str, list[Record]]
    skipped: list[Skipped]
    majority: dict[str, dict]  # mode -> the shared comparison fields of its plotted records
    notes: list[str] = dataclasses.field(default_factory=list)  # a tie, said first
    # mode -> every complete record of it, before the majority: the paper section reads them all
    complete: dict[str, list[Record]] = dataclasses.field(default_factory=dict)
    # train records set aside for a section of their own (the paper plan's), out of the majority
    aside: list[Record] = dataclasses.field(default_factory=list)

    @property
    def train(self) -> list[Record]:
        return self.used.get("train", [])

    @property
    def stream(self) -> list[Record]:
        return self.used.get("stream", [])


def flatten(value, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}: nested dicts as dotted keys, everything else a leaf."""
    if not isinstance(value, dict):
        return {prefix: value}
    out = {}
    for key, item in value.items():
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def find(paths: list[str]) -> list[Path]:
    """The JSON files named or held (directly) by `paths`, in order, each once."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.glob("*.json") if not p.name.startswith("."))
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"{name}: no such file or directory")
    unique = list({p.resolve(): p for p in files}.values())
    if not unique:
        raise UsageError(f"no records found in {', '.join(paths)}: expected *.json record files")
    return unique


def load(path: Path) -> records.AnyRecord | str:
    """The record in `path`, or why it is not a hpcai_jax record."""
    try:
        return records.read(path)
    except records.RecordError as e:
        return f"not a hpcai_jax record: {e}"


def _among(key: str, names: tuple[str, ...]) -> bool:
    """`key` is one of `names`, or lies under one that ends with a dot."""
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in names)


def comparison_fields(record: records.AnyRecord) -> dict:
    """The fields two records of a mode must share to sit in one comparison plot: their
    configuration's, flattened, and the devices they ran on."""
    config = flatten(record.config or {})
    if record.mode == "stream":
        fields = {k: v for k, v in config.items() if _among(k, _STREAM_FIELDS)}
    else:
        fields = {
            k: v
            for k, v in config.items()
            if not _among(k, _RUN_IDENTITY) and not k.startswith("stream.")
        }
    fields["provenance.device_kind"] = record.provenance.device_kind
    fields["provenance.backend"] = record.provenance.backend
    return fields


def configuration_fields(record: records.AnyRecord) -> dict:
    """What two runs of one configuration share: the comparison fields and the sweep's point
    (mode, M, P_degree, members per device); not the seed nor what names or places a run."""
    fields = comparison_fields(record)
    point = (k for k in _RUN_IDENTITY if not _among(k, (*OUTPUT_ONLY, SEED)))
    config = flatten(record.config or {})
    fields.update({k: config.get(k) for k in point})
    return fields


def _missing(record: records.AnyRecord) -> str:
    """The first field a plotted record must hold that `record` lacks, or '' (the rest may be
    None: plotted where it exists)."""
    if isinstance(record, records.StreamRecord):
        return "" if record.kernels else "kernels"
    mesh = record.mesh
    required = (
        ("mesh.ensemble_size", mesh.ensemble_size),
        ("mesh.parallel_degree", mesh.parallel_degree),
        ("mesh.num_devices", mesh.num_devices),
    )
    return next((name for name, value in required if value is None), "")


def _json(value) -> str:
    return json.dumps(value, default=str)


def differences(fields: dict, majority: dict) -> str:
    """`model.model = "resnet50" (majority: "resnet_small"); ...`, the first few."""
    keys = sorted(k for k in majority if fields.get(k) != majority[k])
    listed = [f"{k} = {_json(fields.get(k))} (majority: {_json(majority[k])})" for k in keys]
    more = len(listed) - MAX_LISTED_DIFFERENCES
    text = "; ".join(listed[:MAX_LISTED_DIFFERENCES])
    return text + (f"; and {more} more" if more > 0 else "")


def _written(r: Record) -> tuple[str, float]:
    """When a record was written: its provenance's UTC time, then its file's modification time
    (a record without the former, or two of the same second)."""
    utc = getattr(getattr(r.record, "provenance", None), "utc", None)
    try:
        mtime = Path(r.path).stat().st_mtime
    except OSError:
        mtime = 0.0
    return str(utc or ""), mtime


def _majority(group: list[Record]) -> tuple[dict, list[Record], list[Record], int]:
    """The largest group of records sharing comparison fields (ties: the one holding the newest
    record, `_written`), and how many groups are that large (more than 1: a tie,
    which the report states).

    Only fields every record has are compared: a field added to the configuration by a newer
    version of hpcai_jax is not a difference between two runs' setups."""
    fields = [comparison_fields(r.record) for r in group]
    shared = set.intersection(*(set(f) for f in fields))
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(fields):
        key = json.dumps({k: f[k] for k in shared}, sort_keys=True, default=str)
        groups.setdefault(key, []).append(i)
    newest = {key: max(_written(group[i]) for i in g) for key, g in groups.items()}
    best = groups[max(groups, key=lambda key: (len(groups[key]), newest[key]))]
    majority = {k: fields[best[0]][k] for k in sorted(shared)}
    others = [r for i, r in enumerate(group) if i not in best]
    tied = sum(len(g) == len(best) for g in groups.values())
    return majority, [group[i] for i in best], others, tied


# The files' reasons a "no records" line names (the rest are counted).
REASONS_NAMED = 2


def _why_none(skipped: list[Skipped]) -> str:
    """Why none of the JSON files is a record, in their own words (a truncated file, an unknown
    schema_version), as `pack` names them: the first few, then how many more."""
    named = "; ".join(f"{s.path.name}: {s.why}" for s in skipped[:REASONS_NAMED])
    more = len(skipped) - REASONS_NAMED
    return f"{len(skipped)} JSON file(s), none a record: {named}" + (
        f"; and {more} more" if more > 0 else ""
    )


def collect(paths: list[str], runs: tuple[str, ...] = ()) -> Collection:
    """Loads every record under `paths` and decides which ones the report plots; `runs`, run
    ids or file names (--run), keeps only those records. The paper plan's records (`is_paper`)
    are set aside for the paper's section: they take no part in the majority the other sections
    plot, so no point of theirs gets a second figure there.

    Raises UsageError for a missing path, no JSON file at all, or no hpcai_jax record among them.
    """
    files = find(paths)
    candidates: dict[str, list[Record]] = {}
    skipped: list[Skipped] = []
    found = 0
    for path in files:
        read = load(path)
        if isinstance(read, str):
            skipped.append(Skipped(path, None, read))
            continue
        found += 1
        record = Record(path, read)
        if runs and not {record.run_id, Path(path).stem} & set(runs):
            skipped.append(Skipped(path, record.run_id, f"not one of --run={','.join(runs)}"))
        elif read.status != "complete" and (record.mode, read.status) != ("stream", "small_arrays"):
            reason = read.reason or "no reason given"
            skipped.append(Skipped(path, record.run_id, f"status {read.status}: {reason}"))
        elif record.mode not in PLOTTED:
            why = f"mode {record.mode}: the report plots train and stream records only"
            skipped.append(Skipped(path, record.run_id, why))
        elif missing := _missing(read):
            skipped.append(Skipped(path, record.run_id, f"incomplete record: no {missing}"))
        else:
            candidates.setdefault(record.mode, []).append(record)
    if not found:
        raise UsageError(f"no hpcai_jax records in {', '.join(paths)}: {_why_none(skipped)}")
    _check_selected(runs, skipped, candidates, paths)
    collection = Collection(list(paths), {}, skipped, {}, [], candidates)
    for mode, group in candidates.items():
        if mode == "train":
            collection.aside = [r for r in group if is_paper(r)]
            group = [r for r in group if not is_paper(r)]
        if group:
            _plot_majority(collection, mode, group)
    return collection


def _plot_majority(collection: Collection, mode: str, group: list[Record]) -> None:
    """Plots the majority of `group` (records of `mode`): the others skipped, each with its
    differences, and a tie said in a note."""
    majority, used, others, tied = _majority(group)
    collection.majority[mode], collection.used[mode] = majority, used
    tie = (
        f"; a tie: {tied} configurations have {len(used)} record(s) each, the newest "
        f"record's is plotted ({', '.join(r.run_id for r in used)})"
        if tied > 1
        else ""
    )
    if tie:
        collection.notes.append(
            f"{mode}: {tie.removeprefix('; ')}; the others are listed as skipped (--run picks one)"
        )
    for r in others:
        why = differences(comparison_fields(r.record), majority)
        collection.skipped.append(
            Skipped(
                r.path,
                r.run_id,
                f"configuration differs from the other {mode} records "
                f"({len(used)} plotted{tie}): {why}",
            )
        )


def _check_selected(runs, skipped: list[Skipped], candidates: dict, paths: list[str]) -> None:
    """Every --run names a record under `paths`: one line naming those that do not."""
    found = {r.run_id for group in candidates.values() for r in group}
    found |= {s.run_id for s in skipped} | {Path(s.path).stem for s in skipped}
    found |= {Path(r.path).stem for group in candidates.values() for r in group}
    missing = [run for run in runs if run not in found]
    if missing:
        raise UsageError(
            f"--run={','.join(missing)}: no record with that run id or file name in "
            f"{', '.join(paths)}"
        )
