"""A listed package's runs as entries of the list (docs/ranking.md, "Columns"): every figure read
from a record `check` has just re-derived from its MLLOG, the system and organisation as
system.json and the records name them (consistency.py), the STREAM Triad of the package's
BabelStream runs, and what was checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcai_jax import records
from hpcai_jax.ranking import consistency, ids
from hpcai_jax.ranking.verify import Verified
from hpcai_jax.submission import FLAGS, MLLOG, RECORD, recount, streams

# --submission_status → the category (MLPerf's Available, Preview, Research).
CATEGORIES = {"onprem": "available", "cloud": "available", "preview": "preview"}
SOFTWARE = ("jax", "jaxlib")  # then every version key naming CUDA, ROCm or libtpu
ACCELERATOR_STACKS = ("cuda", "rocm", "libtpu", "nvidia", "tpu")


@dataclass(frozen=True)
class Entry:
    """One run of a listed package, as the list shows it."""

    result_id: str
    package: str
    digest: str
    run_id: str
    workload: str
    model: str
    dataset: str
    division: str
    category: str
    system: str
    organisation: str
    devices: int
    device_kind: str
    ensemble_size: int
    parallel_degree: int
    flops: float
    vflops: float
    metric: str
    quality: float
    target: float
    target_official: bool
    exponent: float
    penalty: float
    time_to_target_s: float | None
    triad_gb_s_per_device: float | None
    software: str
    date: str
    levels: tuple[str, ...]
    configuration: tuple[str, ...]  # the flagfile's step lines: repeats share them
    checks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    violations: tuple[str, ...] = ()
    epochs: tuple[tuple[int, int, float, float], ...] = ()  # (index, steps, FLOPs, wall_s)
    curve: tuple[tuple[float, float], ...] = ()  # (wall_s, ensemble quality)
    flops_per_step: float = 0.0
    git_commit: str = ""
    flags: str = ""  # the packed flagfile's text

    @property
    def table(self) -> tuple[str, str, str]:
        return (self.workload, self.division, self.category)

    @property
    def level(self) -> str:
        return " ".join(self.levels)


def software(versions: dict[str, str]) -> str:
    keys = [k for k in SOFTWARE if k in versions]
    keys += sorted(k for k in versions if any(s in k.lower() for s in ACCELERATOR_STACKS))
    return ", ".join(f"{k} {versions[k]}" for k in dict.fromkeys(keys))


def triad_per_device(root: Path) -> float | None:
    """The best Triad GB/s per device among the package's BabelStream runs (those that read as
    records: check has failed any other), or None."""
    best = None
    for packed in streams.load(root):
        run = packed.record
        triad = run.kernels.get("triad") if run is not None else None
        if triad is not None and run.placement.num_devices:
            per = triad.gb_per_s / run.placement.num_devices
            best = per if best is None else max(best, per)
    return best


def _configuration(root: Path, run_id: str) -> tuple[str, ...]:
    lines = recount.step_lines(root / f"{run_id}{FLAGS}")
    return tuple(ln for ln in lines if not ln.startswith("--seed="))


def _checks(verified: Verified, run_id: str) -> tuple[str, ...]:
    return tuple(f"{name} {v}" for who, name, v in verified.verdicts if who in (run_id, "package"))


def entry(verified: Verified, record: records.TrainRecord, given: dict, triad) -> Entry:
    """The entry of one run of a listed package."""
    root, prov, q, mesh, m = (
        verified.path,
        record.provenance,
        record.quality,
        record.mesh,
        record.metrics,
    )
    model = (record.config or {}).get("model") or {}
    status = consistency.stated(record, "submission_status")
    return Entry(
        result_id=ids.result_id(verified.digest, record.run_id),
        package=root.name,
        digest=verified.digest,
        run_id=record.run_id,
        workload=str(model.get("workload", "")),
        model=str(model.get("model", "")),
        dataset=str(record.data.dataset),
        division=str(record.submission.division),
        category=CATEGORIES.get(status, "research"),
        system=str(given.get("system") or consistency.stated(record, "submission_platform")),
        organisation=str(given.get("organisation") or consistency.stated(record, "submission_org")),
        devices=mesh.num_devices,
        device_kind=str(prov.device_kind),
        ensemble_size=mesh.ensemble_size,
        parallel_degree=mesh.parallel_degree,
        flops=m.flops_per_s,
        vflops=m.vflops_per_s,
        metric=str(q.metric),
        quality=q.ensemble,
        target=q.target,
        target_official=bool(q.target_is_official),
        exponent=q.exponent,
        penalty=m.penalty,
        time_to_target_s=record.time_to_target_s,
        triad_gb_s_per_device=triad,
        software=software(prov.versions or {}),
        date=str(prov.utc or "")[:10],
        levels=verified.levels,
        configuration=_configuration(root, record.run_id),
        checks=_checks(verified, record.run_id),
        notes=tuple(n for n in verified.notes if n.startswith(f"run {record.run_id}:")),
        violations=tuple(record.submission.violations or ()),
        epochs=tuple((e.index, e.steps, e.flops, e.wall_s) for e in record.epochs),
        curve=tuple((p.wall_s, p.ensemble) for p in q.curve or ()),
        flops_per_step=record.flops.per_step,
        git_commit=str(prov.git_commit or ""),
        flags=(root / f"{record.run_id}{FLAGS}").read_text(encoding="utf-8", errors="replace"),
    )


def of(verified: Verified) -> list[Entry]:
    """The entries of a listed package, one per training run, by run id."""
    root = verified.path
    given = consistency.system_json(root)
    triad = triad_per_device(root)
    return [entry(verified, r, given, triad) for r in consistency.trained(root)]


def files(entry: Entry, root: Path) -> dict[str, Path]:
    """The run's files an entry page links to: record, MLLOG and flagfile."""
    return {s: root / f"{entry.run_id}{s}" for s in (RECORD, MLLOG, FLAGS)}
