"""Bounds no honest run exceeds, from the package alone (docs/submission.md §3, "What check
proves"): FLOPS at most the devices' own measured matmul peak and their datasheet peak
(hpcai_jax/flops/peaks.py), so MFU ≤ 1; epochs no shorter than the timed steps inside them; and
a quality its metric can take (a top-1 accuracy is a count of held-out examples over their
number, in float32). Each function adds one line per figure out of bounds.
"""

from __future__ import annotations

import math

import numpy as np

from hpcai_jax import metrics
from hpcai_jax.flops import peaks
from hpcai_jax.records import TrainRecord
from hpcai_jax.submission.derive import REL, Findings
from hpcai_jax.submission.logfile import metadata

MFU_MAX = 1.0  # a step cannot do more FLOP/s than a large matmul on the same devices
# Timed steps and epochs are read on one clock: their sums differ by float rounding only.
CLOCK_SLACK_S = 1e-6
# The range each quality metric can take (None: unbounded on that side).
RANGES = {"top1_accuracy": (0.0, 1.0), "map_iou50": (0.0, 1.0), "r2": (None, 1.0)}
# A count over N held-out examples computed in float32 on any backend is within a few ulps of
# k / N; a value further off (relative) is no count at all.
COUNT_REL = 1e-6


def check(f: Findings, run, config, rec: str, lg: str) -> None:
    """Every bound of this module on one run (`run`: check.Run)."""
    record = run.record
    _rates(f, record, rec)
    _steps_inside_epochs(f, record, rec)
    _quality(f, run, rec, lg)


def _steady(f: Findings, record: TrainRecord, rec: str) -> float | None:
    """The steady rate re-derived from the timed steps (docs/score.md §5), checked against the
    record's, with the per-device figure and MFU it gives."""
    t, fl, m = record.timing, record.flops, record.mesh.ensemble_size
    f.same(
        f"{rec} timing.train_wall_s", t.train_wall_s, t.step_s.total_s, "(timing.step_s.total_s)"
    )
    dropped = len(record.members.dropped) if record.members else 0
    if dropped:  # members a fit resume left behind were timed until they stopped
        low, high = t.timed_steps * m, t.timed_steps * (m + dropped)
        if not low <= fl.timed_member_steps <= high:
            f.fail(
                f"{rec} flops.timed_member_steps {fl.timed_member_steps} outside [{low}, {high}] "
                f"(timing.timed_steps × M, × M + {dropped} dropped)"
            )
    else:
        f.same(f"{rec} flops.timed_member_steps", fl.timed_member_steps, t.timed_steps * m, "(× M)")
    if fl.useful_member_steps > fl.timed_member_steps:
        f.fail(f"{rec} flops.useful_member_steps > flops.timed_member_steps")
    steady = metrics.per_second(fl.per_step / m, fl.useful_member_steps, t.train_wall_s)
    if record.metrics.flops_per_s_steady is None:
        return None  # an invalid run's: nothing to bound
    how = "re-derived (flops.per_step ÷ M × flops.useful_member_steps ÷ timing.train_wall_s)"
    f.same(f"{rec} metrics.flops_per_s_steady", record.metrics.flops_per_s_steady, steady, how)
    per_device = None if steady is None else steady / record.mesh.num_devices
    f.same(
        f"{rec} metrics.flops_per_s_per_device",
        record.metrics.flops_per_s_per_device,
        per_device,
        "re-derived (flops_per_s_steady ÷ mesh.num_devices)",
    )
    measured = record.peak_flops.measured_per_device if record.peak_flops else None
    f.same(
        f"{rec} metrics.mfu_measured",
        record.metrics.mfu_measured,
        metrics.mfu(per_device, measured),
        "re-derived (flops_per_s_per_device ÷ peak_flops.measured_per_device)",
    )
    return steady


def _rates(f: Findings, record: TrainRecord, rec: str) -> None:
    """Eq. 6 FLOPS against the devices' peaks, the record's measured one and the datasheet's
    for its device kind and dtype; the steady rate against the datasheet's."""
    counted = [e for e in record.epochs if e.flops is not None]
    eq6 = metrics.over_epochs([e.flops for e in counted], [e.wall_s for e in counted])
    steady = _steady(f, record, rec)
    pk, n = record.peak_flops, record.mesh.num_devices
    if pk is None:
        return
    sheet = peaks.peak_flops_per_device(pk.device_kind, pk.dtype)
    f.same(
        f"{rec} peak_flops.datasheet_per_device",
        pk.datasheet_per_device,
        sheet,
        f"(hpcai_jax/flops/peaks.py for {pk.device_kind!r}, {pk.dtype})",
    )
    measured = (
        pk.measured_per_device,
        "peak_flops.measured_per_device",
        "the run's own matmul peak",
    )
    datasheet = (
        sheet,
        f"the datasheet peak of {pk.device_kind!r} ({pk.dtype})",
        "hpcai_jax/flops/peaks.py",
    )
    # The measured peak is one second's best at the run's start: a busy host (CPU devices share
    # its cores) depresses it, and the steady rate over a few timed steps may then pass it. Eq. 6,
    # warm-up and all, is what ranks and what it bounds; the datasheet bounds both.
    bounds = (
        ("metrics.flops_per_s", eq6, (measured, datasheet)),
        ("metrics.flops_per_s_steady", steady, (datasheet,)),
    )
    for name, figure, roofs in bounds:
        for roof, what, why in roofs:
            if figure is None or not roof or figure <= MFU_MAX * n * roof:
                continue
            f.fail(
                f"{rec} {name} {figure:.4g} > mesh.num_devices {n} × {what} {roof:.4g}: "
                f"MFU {figure / (n * roof):.3g} > {MFU_MAX:g} ({why})"
            )


def _steps_inside_epochs(f: Findings, record: TrainRecord, rec: str) -> None:
    """Σ epochs' wall time ≥ the timed steps inside them (every timed step lies in an epoch or
    after the last one, where each took at most step_s.max_s). A resumed run's redone steps are
    timed but in no epoch (docs/score.md §5): not bounded."""
    t, epochs = record.timing, record.epochs
    if record.resumes or not epochs or not t.step_s or not t.step_s.count:
        return
    f.same(f"{rec} timing.step_s.count", t.step_s.count, t.timed_steps, "(timing.timed_steps)")
    after = max(0, t.steps - sum(e.steps for e in epochs))
    inside = t.step_s.total_s - after * t.step_s.max_s
    walls = sum(e.wall_s for e in epochs)
    if inside > walls + CLOCK_SLACK_S:
        f.fail(
            f"{rec} epochs[].wall_s {walls:.6g} s in all < the {inside:.6g} s of timed steps "
            f"inside them (timing.step_s.total_s less {after} steps after the last epoch × "
            "max_s): epochs shorter than their own steps"
        )


def _held_out(record: TrainRecord) -> list[tuple[str, float | None]]:
    """(field, value) of every held-out quality the record lists."""
    q = record.quality
    out = [("quality.ensemble", q.ensemble)]
    out += [(f"quality.members[{i}]", v) for i, v in enumerate(q.members or [])]
    for i, p in enumerate(q.curve):
        out.append((f"quality.curve[{i}].ensemble", p.ensemble))
        out += [(f"quality.curve[{i}].members[{j}]", v) for j, v in enumerate(p.members)]
    return out


def _quality(f: Findings, run, rec: str, lg: str) -> None:
    """Each quality in its metric's range and, for a top-1 accuracy, a count of the held-out
    examples; the members' means re-derived; the final quality the last evaluation's."""
    record = run.record
    q, n = record.quality, record.data.eval_examples
    low, high = RANGES.get(q.metric, (None, None))
    outside, uncounted = [], []
    for where, value in _held_out(record):
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        if (low is not None and value < low) or (high is not None and value > high):
            outside.append(f"{where} {value:.6g}")
        elif q.metric == "top1_accuracy" and n:
            count = float(np.float32(round(value * n)) / np.float32(n))
            if not math.isclose(value, count, rel_tol=COUNT_REL, abs_tol=1e-12):
                uncounted.append(f"{where} {value:.9g} (nearest {count:.9g})")
    if outside:
        f.fail(f"{rec} {_some(outside)} outside [{low}, {high}], the range of {q.metric}")
    if uncounted:
        f.fail(
            f"{rec} {_some(uncounted)} no count of the {n} held-out examples "
            f"(data.eval_examples): top1_accuracy is correct ÷ {n} in float32"
        )
    _member_means(f, run, rec, lg)


def _some(figures: list[str]) -> str:
    """The first figure, and how many more: one line for a quality forged everywhere."""
    more = f" (and {len(figures) - 1} more figures)" if len(figures) > 1 else ""
    return f"{figures[0]}{more}"


def _mean(values: list, kept: list[int] | None) -> float | None:
    chosen = [v for i, v in enumerate(values) if (kept is None or i in kept) and v is not None]
    return float(np.mean(chosen)) if chosen else None


def _member_means(f: Findings, run, rec: str, lg: str) -> None:
    record, q = run.record, run.record.quality
    if q.members is None or not q.curve:
        return
    last = q.curve[-1]
    f.same(f"{rec} quality.members", q.members, last.members, "(the last evaluation's)")
    how = "re-derived (the kept members' mean)"
    f.same(f"{rec} quality.member_mean", q.member_mean, _mean(q.members, q.kept_members), how)
    # Members pruned before an evaluation are not recorded per point: curve means only then.
    kept = None if record.divergence.pruned_members else list(range(len(q.members)))
    logged = [line for _, line in run.log.evaluations()]
    for i, point in enumerate(q.curve):
        if kept is not None:
            want = _mean(point.members, kept)
            f.same(f"{rec} quality.curve[{i}].member_mean", point.member_mean, want, how)
        if i < len(logged):
            got = metadata(logged[i], "member_mean")
            where = f"{lg} eval_accuracy (evaluation {i + 1}) member_mean"
            f.same(where, got, point.member_mean, f"({rec} quality.curve[{i}])", rel=REL)
