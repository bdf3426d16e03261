"""The numbers each plot draws, read from the records once, so that a plot and the table beside
it can never disagree. A figure a record does not hold (synthetic data has no quality, hence no
VFLOPS) stays None: it is shown as n/a and left off the plot, never filled in.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from hpcai_jax.report.collect import Record
from hpcai_jax.units import number


@dataclasses.dataclass(frozen=True)
class ScalePoint:
    """One training run on the FLOPS/VFLOPS-against-Sys_scale plot (HPC AI500 V3.0 Fig. 5)."""

    run_id: str
    m: int
    p: int
    sys_scale: int
    flops: float | None
    vflops: float | None
    ideal_flops: float | None  # None where the series has one Sys_scale: nothing to scale from
    ideal_vflops: float | None
    members_per_device: int = 1
    model_parallel: int = 1

    @property
    def efficiency(self) -> float | None:
        """FLOPS over the ideal linear figure: 1 is perfect scaling."""
        return self.flops / self.ideal_flops if self.flops and self.ideal_flops else None


def sys_scale_label(points) -> str:
    """What Sys_scale counts, as Eq. 5 reads for these runs: devices = M × P_degree, with
    members_per_device and P_model where any run has them other than 1. `points` are anything
    with `members_per_device` and `model_parallel` (ScalePoint, TradePoint)."""
    formula = "M"
    if any(p.members_per_device != 1 for p in points):
        formula = "M / members_per_device"
    formula += " × P_degree"
    if any(p.model_parallel != 1 for p in points):
        formula += " × P_model"
    return f"Sys_scale (devices = {formula})"


def _ideal(points: list[tuple[int, float | None]]) -> tuple[int, float] | None:
    """(Sys_scale, figure) of the smallest Sys_scale that has the figure (mean of its runs);
    None unless two Sys_scales have it (one point is its own ideal: no ratio to show)."""
    have = [(s, v) for s, v in points if v is not None]
    if len({s for s, _ in have}) < 2:
        return None
    s0 = min(s for s, _ in have)
    return s0, statistics.fmean(v for s, v in have if s == s0)


def scalability(records: list[Record]) -> dict[int, list[ScalePoint]]:
    """Training runs by P_degree (each a series, as the paper's sweep keeps P_degree fixed),
    sorted by Sys_scale; the ideal is the smallest Sys_scale's figure scaled linearly."""
    by_p: dict[int, list[Record]] = {}
    for r in records:
        by_p.setdefault(int(r.record.mesh.parallel_degree), []).append(r)
    out = {}
    for p, runs in sorted(by_p.items()):
        # M before the run id: an ablation's points share their devices (docs/members.md)
        runs = sorted(
            runs,
            key=lambda r: (r.record.mesh.num_devices, int(r.record.mesh.ensemble_size), r.run_id),
        )
        scale = [int(r.record.mesh.num_devices) for r in runs]
        flops = [number(r.record.metrics.flops_per_s) for r in runs]
        vflops = [number(r.record.metrics.vflops_per_s) for r in runs]
        base_f, base_v = (
            _ideal(list(zip(scale, flops, strict=True))),
            _ideal(list(zip(scale, vflops, strict=True))),
        )
        out[p] = [
            ScalePoint(
                run_id=r.run_id,
                m=int(r.record.mesh.ensemble_size),
                p=p,
                sys_scale=s,
                flops=f,
                vflops=v,
                ideal_flops=base_f[1] * s / base_f[0] if base_f else None,
                ideal_vflops=base_v[1] * s / base_v[0] if base_v else None,
                members_per_device=_or_one(r.record.mesh.members_per_device),
                model_parallel=_or_one(r.record.mesh.model_parallel),
            )
            for r, s, f, v in zip(runs, scale, flops, vflops, strict=True)
        ]
    return out


def _or_one(value: int | None) -> int:
    """A layout count a record may lack (a version-2 record edited by hand): 1, as Eq. 5 has it
    without the option."""
    return 1 if value is None else int(value)


@dataclasses.dataclass(frozen=True)
class TradePoint:
    """One (M, P_degree) run on the quality-against-training-time plot (Fig. 7)."""

    run_id: str
    m: int
    p: int
    train_s: float | None
    ensemble: float | None
    member_mean: float | None
    oob: float | None
    sys_scale: int = 0
    members: tuple[float, ...] = ()
    target: float | None = None
    members_per_device: int = 1
    model_parallel: int = 1


def tradeoff(records: list[Record]) -> dict[int, list[TradePoint]]:
    """Every Sys_scale's runs, sorted by M, quality or not (the plot draws those that have it)."""
    out: dict[int, list[TradePoint]] = {}
    for r in sorted(records, key=lambda r: (r.record.mesh.ensemble_size, r.run_id)):
        mesh, quality = r.record.mesh, r.record.quality
        out.setdefault(int(mesh.num_devices), []).append(
            TradePoint(
                run_id=r.run_id,
                m=int(mesh.ensemble_size),
                p=int(mesh.parallel_degree),
                train_s=number(r.record.timing.train_wall_s),
                ensemble=number(quality.ensemble),
                member_mean=number(quality.member_mean),
                oob=number(quality.oob.quality) if quality.oob else None,
                sys_scale=int(mesh.num_devices),
                members=tuple(v for v in map(number, quality.members or []) if v is not None),
                target=number(quality.target),
                members_per_device=_or_one(mesh.members_per_device),
                model_parallel=_or_one(mesh.model_parallel),
            )
        )
    return dict(sorted(out.items()))


def by_parallel_degree(points: list[TradePoint]) -> dict[int, list[TradePoint]]:
    """Runs with a quality figure by P_degree, sorted by M: quality against M as Sys_scale
    grows (the scalability sweep's runs)."""
    out: dict[int, list[TradePoint]] = {}
    for t in sorted(points, key=lambda t: (t.m, t.run_id)):
        if t.ensemble is not None:
            out.setdefault(t.p, []).append(t)
    return dict(sorted(out.items()))


METRIC_LABELS = {
    "top1_accuracy": "top-1 accuracy",
    "map_iou50": "mAP at IoU 0.5",
    "r2": "R²",
}


def metric_label(metric: str) -> str:
    """A workload's quality metric as a reader names it (the record's key otherwise)."""
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def plottable(points: list[TradePoint]) -> list[TradePoint]:
    """The points Fig. 7 can place: a training time and an ensemble quality."""
    return [t for t in points if t.train_s is not None and t.ensemble is not None]


def quality_metric(records: list[Record]) -> str:
    return next((r.record.quality.metric for r in records if r.record.quality.metric), "")


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    epoch: float
    wall_s: float
    ensemble: float
    member_mean: float | None
    members: tuple[float | None, ...] = ()  # each member's, pruned ones included


@dataclasses.dataclass(frozen=True)
class QualityCurve:
    """One run's held-out evaluations during training (quality.curve), its target and its time
    to target (the record's own, with its why when there is none)."""

    run_id: str
    target: float | None
    points: list[CurvePoint]
    time_to_target_s: float | None
    time_to_target_why: str | None


def quality_curves(records: list[Record]) -> list[QualityCurve]:
    """The runs whose record has evaluation points, by run id (records older than the curve
    have none)."""
    out = []
    for r in sorted(records, key=lambda r: r.run_id):
        points = [
            CurvePoint(
                epoch=float(p.epoch),
                wall_s=float(p.wall_s),
                ensemble=float(p.ensemble),
                member_mean=number(p.member_mean),
                members=tuple(number(q) for q in p.members or ()),
            )
            for p in r.record.quality.curve
        ]
        if points:
            out.append(
                QualityCurve(
                    run_id=r.run_id,
                    target=number(r.record.quality.target),
                    points=points,
                    time_to_target_s=number(r.record.time_to_target_s),
                    time_to_target_why=r.record.time_to_target_why,
                )
            )
    return out


@dataclasses.dataclass(frozen=True)
class MfuRow:
    run_id: str
    sys_scale: int
    flops_per_device: float | None
    measured: float | None
    datasheet: float | None
    peak_measured: float | None
    peak_datasheet: float | None
    shared_cores: bool = False  # CPU devices: forced host devices share the host's cores


def mfu(records: list[Record]) -> list[MfuRow]:
    rows = [
        MfuRow(
            run_id=r.run_id,
            sys_scale=int(r.record.mesh.num_devices),
            flops_per_device=number(r.record.metrics.flops_per_s_per_device),
            measured=number(r.record.metrics.mfu_measured),
            datasheet=number(r.record.metrics.mfu_datasheet),
            peak_measured=number(r.record.peak_flops.measured_per_device),
            peak_datasheet=number(r.record.peak_flops.datasheet_per_device),
            shared_cores=getattr(r.record.provenance, "backend", "") == "cpu",
        )
        for r in records
    ]
    return sorted(rows, key=lambda row: (row.sys_scale, row.run_id))


@dataclasses.dataclass(frozen=True)
class RoofPoint:
    """One run's step on its device's roofline (per device, from the record's `roofline`)."""

    run_id: str
    peak: float
    bandwidth: float
    intensity: float
    achieved: float | None
    attainable: float
    device: str = ""


def roofline(records: list[Record]) -> list[RoofPoint]:
    points = []
    for r in records:
        roof = r.record.roofline
        if roof is None:
            continue
        values = [
            number(roof.peak_flops_per_s),
            number(roof.bandwidth_bytes_per_s),
            number(roof.arithmetic_intensity_flops_per_byte),
            number(roof.achieved_flops_per_s),
            number(roof.attainable_flops_per_s),
        ]
        if None not in (values[0], values[1], values[2], values[4]):
            device = str(r.record.provenance.device_kind or "")
            points.append(RoofPoint(r.run_id, *values, device=device))
    return sorted(points, key=lambda p: p.run_id)


@dataclasses.dataclass(frozen=True)
class StreamKernel:
    key: str
    label: str
    gb_per_s: float | None
    gb_per_s_per_device: float | None


@dataclasses.dataclass(frozen=True)
class StreamRun:
    run_id: str
    num_devices: int
    precision: str
    kernels: list[StreamKernel]
    per_process: list[dict[str, float]] | None  # --stream_devices=one: each process's device
    below_rule: str = ""  # why one array is under 4x the largest cache; "" where it is not
    elements: int | None = None  # of each array

    @property
    def label(self) -> str:
        devices = f"{self.num_devices} device{'s' if self.num_devices != 1 else ''}"
        size = f", {_pow2(self.elements)} elements" if self.elements else ""
        below = f", {BELOW_RULE_MARK}" if self.below_rule else ""
        return f"{self.run_id} ({devices}, {self.precision}{size}{below})"


def _pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"


# How a STREAM run whose arrays break the size rule is marked in every table and plot.
BELOW_RULE_MARK = "below the 4x-cache rule"


def below_rule(record) -> str:
    """Why a STREAM record's arrays break NERSC-10's rule (one array >= 4x the largest cache),
    or "". Read from the record's own cache figures, so that records written under the older
    reading (the three arrays together) are judged by the same rule."""
    cache = record.cache
    if record.status == "small_arrays":
        return record.reason
    if cache.bytes is None or cache.arrays_bytes_per_cache is None:
        return ""
    array = cache.arrays_bytes_per_cache / 3
    if array >= 4 * cache.bytes:
        return ""
    return (
        f"one array {array / 2**20:,.1f} MiB < 4 x largest cache {cache.bytes / 2**20:,.1f} MiB "
        f"({cache.source})"
    )


def stream(records: list[Record]) -> list[StreamRun]:
    out = []
    for r in sorted(records, key=lambda r: r.run_id):
        record = r.record
        out.append(
            StreamRun(
                run_id=r.run_id,
                num_devices=int(record.placement.num_devices or 1),
                precision=str(record.array.precision or ""),
                kernels=[
                    StreamKernel(
                        key=key,
                        label=str(key if k.label is None else k.label),
                        gb_per_s=number(k.gb_per_s),
                        gb_per_s_per_device=number(k.gb_per_s_per_device),
                    )
                    for key, k in record.kernels.items()
                ],
                per_process=record.per_process_gb_per_s,
                below_rule=below_rule(record),
                elements=record.array.elements,
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class CommRow:
    """One run's collectives per step and device (the record's `comm`, telemetry/comm.py): the
    payload and the bytes sent under ring algorithms, by mesh axis, and the training bytes that
    stay inside a node or cross the network."""

    run_id: str
    m: int
    p: int
    p_model: int
    allreduce: str  # e.g. "flat float32", "hierarchical (2) bfloat16"
    nodes: int | None
    payload: dict[str, float]
    wire: dict[str, float] | None  # None in records older than the wire figures
    intra_node: float | None
    inter_node: float | None


def _allreduce(precision) -> str:
    mode, inner = precision.allreduce, precision.inner_group_size
    group = f" ({inner})" if mode != "flat" and inner else ""
    return f"{mode}{group} {precision.grad_allreduce_dtype}"


def communication(records: list[Record]) -> list[CommRow]:
    rows = []
    for r in records:
        comm = r.record.comm
        if comm is None or not comm.payload_bytes:
            continue
        mesh, link = r.record.mesh, comm.link_bytes
        rows.append(
            CommRow(
                run_id=r.run_id,
                m=int(mesh.ensemble_size),
                p=int(mesh.parallel_degree),
                p_model=_or_one(mesh.model_parallel),
                allreduce=_allreduce(r.record.precision),
                nodes=comm.nodes,
                payload=comm.payload_bytes,
                wire=comm.wire_bytes,
                intra_node=number(link.intra_node) if link else None,
                inter_node=number(link.inter_node) if link else None,
            )
        )
    return sorted(rows, key=lambda row: (row.m * row.p * row.p_model, row.m, row.run_id))


@dataclasses.dataclass(frozen=True)
class MachineRow:
    """What else a run's record says about the machine and the rules: its division, the
    compiled step's memory per device, and energy where it was measured."""

    run_id: str
    division: str | None
    violations: int
    memory_bytes: float | None  # arguments + outputs − aliased + temporaries
    joules: float | None
    average_watts: float | None
    flops_per_watt: float | None
    energy_why: str | None


def machine(records: list[Record]) -> list[MachineRow]:
    rows = []
    for r in records:
        memory, energy, submission = (
            r.record.memory_per_device,
            r.record.energy,
            r.record.submission,
        )
        parts = (
            [number(memory.argument_bytes), number(memory.output_bytes), number(memory.temp_bytes)]
            if memory
            else [None]
        )
        alias = (number(memory.alias_bytes) if memory else None) or 0.0
        rows.append(
            MachineRow(
                run_id=r.run_id,
                division=submission.division,
                violations=len(submission.violations or []),
                memory_bytes=None if None in parts else sum(parts) - alias,
                joules=number(energy.joules),
                average_watts=number(energy.average_watts),
                flops_per_watt=number(energy.flops_per_watt),
                energy_why=None
                if energy.available
                else ("not measured" if energy.why is None else energy.why),
            )
        )
    return sorted(rows, key=lambda row: row.run_id)


@dataclasses.dataclass(frozen=True)
class Observed:
    """Where one run's TensorBoard events and profiler trace are (docs/observe.md): found at
    the recorded path or beside the record (records travel with their results directory), and
    what the run said was lost."""

    run_id: str
    events: Path | None
    trace: Path | None
    lost: str


def _found(recorded: str | None, beside: Path) -> Path | None:
    """The copy beside the records first (it travels with them: a shipped report links its
    own), then the path the run recorded."""
    for candidate in (beside, Path(recorded) if recorded else None):
        if candidate is not None and candidate.exists():
            return candidate
    return None


def observed(records: list[Record]) -> list[Observed]:
    """The runs whose record has an `observe` section with something in it, by run id."""
    out = []
    for r in sorted(records, key=lambda r: r.run_id):
        seen = r.record.observe
        if seen is None or (seen.tensorboard is None and seen.profile is None):
            continue
        folder = r.path.parent
        events = trace = None
        lost = []
        if (tb := seen.tensorboard) is not None:
            events = _found(tb.dir, folder / "tensorboard" / r.run_id)
            lost += [f"events: {tb.lost}"] if tb.lost else []
        if (prof := seen.profile) is not None and prof.traced:
            base = _found(prof.dir, folder / f"{r.run_id}.profile" / Path(prof.dir or "").name)
            if base is not None and prof.perfetto_trace:
                trace = base / prof.perfetto_trace
            lost += [f"trace: {prof.lost}"] if prof.lost else []
        out.append(Observed(r.run_id, events, trace, "; ".join(lost)))
    return out
