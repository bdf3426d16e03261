"""Every headline figure of a packed run, re-derived from its MLLOG lines and its record, never
compared with a stored copy of itself: each function returns one line per figure that does not
follow (empty: all do). docs/submission.md lists what is derived from what."""

from __future__ import annotations

import math

from hpcai_jax import metrics
from hpcai_jax.records import TrainRecord

# Every MLLOG time is a clock reading truncated to the millisecond: a difference of two is off
# by under 1 ms, so 3 ms per epoch (or per time to target) is generous and still tight.
MS_SLACK_S = 0.003
REL = 1e-9  # the same float arithmetic done again: only rounding may differ


class Findings:
    """One run's failure lines: `run ID: FILE FIELD GOT != WANT HOW`."""

    def __init__(self, run: str):
        self.run, self.lines = run, []

    def fail(self, text: str) -> None:
        self.lines.append(f"run {self.run}: {text}")

    def same(self, where: str, got, want, how: str, rel: float = REL, abs_: float = 0.0) -> bool:
        """Fails unless `got` equals `want` (numbers: within rel/abs tolerance)."""
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            ok = isinstance(got, (int, float)) and math.isclose(
                got, want, rel_tol=rel, abs_tol=abs_
            )
            text = f"{_g(got)} != {_g(want)}"
        else:
            ok = got == want
            text = f"{got!r} != {want!r}"
        if not ok:
            self.fail(f"{where} {text} {how}")
        return ok


def _g(x) -> str:
    return f"{x:.6g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else repr(x)


def _healthy(record: TrainRecord, first: int, steps: int) -> int:
    """Member-steps of steps [first, first + steps) before each member's first non-finite
    step (the record's divergence section), as FLOPS counts them (docs/score.md §5)."""
    m = record.mesh.ensemble_size
    bad = {int(k): v for k, v in record.divergence.nonfinite_first_step.items()}
    stopped = {d.member: d.step for d in (record.members.dropped if record.members else [])}
    last = first + steps
    return sum(
        max(0, min(last, bad.get(member, last), stopped.get(member, last)) - first)
        for member in sorted(set(range(m)) | set(stopped))
    )


def _process_walls(record: TrainRecord, i: int, wall: float) -> tuple[float, float | None]:
    """(the epoch wall time process 0 logged, the slowest process's or None). Process 0 writes
    the log as its epochs end; the record's epoch is the slowest process's (docs/scale.md).
    Records without per-process timing logged and kept the same figure."""
    per = record.timing.per_process if record.timing else None
    if not per or len(per) == 1 or any(i >= len(p.epoch_wall_s) for p in per):
        return wall, None
    return per[0].epoch_wall_s[i], max(p.epoch_wall_s[i] for p in per)


def scores(f: Findings, record: TrainRecord, log, target, rec: str, lg: str) -> None:
    """Eq. 6 per epoch, the penalty, VFLOPS and time to target; `target` is the packed
    configuration's QualityTarget (or None), `rec` and `lg` the files' names."""
    per_step, m = record.flops.per_step, record.mesh.ensemble_size
    f.same(f"{lg} flops_per_step", log.value("flops_per_step"), per_step, f"(record {rec})")
    f.same(f"{lg} number_of_models", log.value("number_of_models"), m, f"(record {rec} M)")
    flops, walls, log_walls = _epochs(f, record, log, rec, lg)
    eq6 = metrics.over_epochs(flops, walls)
    if eq6 is None:
        f.fail(f"{rec} has no completed epoch: no Eq. 6 figure")
        return
    _flops_per_s(f, record, log, eq6, (flops, walls, log_walls), rec, lg)
    _quality(f, record, log, target, eq6, rec, lg)


def _epochs(f: Findings, record: TrainRecord, log, rec: str, lg: str):
    """Each record epoch's FLOPs against its re-derivation and its times against its MLLOG
    epoch; returns what Eq. 6 is re-derived from: (FLOPs, record wall times, logged wall times)."""
    per_step, m = record.flops.per_step, record.mesh.ensemble_size
    log_epochs = log.epochs()
    flops, walls, log_walls = [], [], []
    for i, epoch in enumerate(record.epochs):
        at = f"{rec} epochs[{i}]"
        amount = per_step / m * _healthy(record, epoch.first_step, epoch.steps)
        f.same(
            f"{at}.flops",
            epoch.flops,
            amount,
            "re-derived (flops.per_step ÷ M × healthy member-steps)",
        )
        f.same(
            f"{at}.flops_per_s",
            epoch.flops_per_s,
            amount / epoch.wall_s,
            "re-derived (its FLOPs ÷ its wall_s)",
        )
        flops.append(amount)
        walls.append(epoch.wall_s)
        pair = log_epochs.pop(epoch.index, None)
        if pair is None:
            f.fail(f"{lg} has no epoch_start/epoch_stop of epoch {epoch.index} ({at})")
            continue
        log_walls.append(_logged_epoch(f, record, i, pair, at, lg))
    for index in sorted(log_epochs):
        f.fail(f"{lg} epoch {index} is not in {rec} epochs")
    return flops, walls, log_walls


def _logged_epoch(f: Findings, record: TrainRecord, i: int, pair, at: str, lg: str) -> float:
    """Checks record epoch `i` against its MLLOG epoch_start/epoch_stop `pair`; returns the
    logged wall time."""
    epoch = record.epochs[i]
    start, stop = pair
    meta = stop.get("metadata") or {}
    f.same(
        f"{lg} epoch_stop (epoch {epoch.index}) first_step",
        meta.get("first_step"),
        epoch.first_step,
        f"({at})",
    )
    f.same(
        f"{lg} epoch_stop (epoch {epoch.index}) steps", meta.get("steps"), epoch.steps, f"({at})"
    )
    # An epoch a preemption cut in two has its earlier segments' time in epoch_stop.
    wall = (stop["time_ms"] - start["time_ms"]) / 1e3 + meta.get("earlier_segments_s", 0.0)
    logged, slowest = _process_walls(record, i, epoch.wall_s)
    f.same(
        f"{at}.wall_s",
        logged,
        wall,
        f"from {lg} epoch_stop − epoch_start (+ earlier_segments_s; ± 3 ms)"
        + ("" if slowest is None else "; process 0's, timing.per_process[0]"),
        rel=0,
        abs_=MS_SLACK_S,
    )
    if slowest is not None:
        f.same(f"{at}.wall_s", epoch.wall_s, slowest, "the slowest process's (timing)")
    return wall


def _flops_per_s(f: Findings, record: TrainRecord, log, eq6: float, epochs, rec: str, lg: str):
    """The record's and the MLLOG's FLOPS against Eq. 6 re-derived from the record's epochs,
    and against the MLLOG's epoch times; `epochs` is what `_epochs` returned."""
    flops, walls, log_walls = epochs
    got = record.metrics.flops_per_s
    f.same(
        f"{rec} metrics.flops_per_s",
        got,
        eq6,
        "re-derived from epochs (FLOPs per step ÷ M × healthy member-steps ÷ record epochs' wall_s)",
    )
    if len(log_walls) == len(walls) and sum(log_walls) > 0:
        from_log = sum(flops) / sum(log_walls)
        slack = MS_SLACK_S * len(log_walls) / sum(log_walls)
        f.same(
            f"{rec} metrics.flops_per_s",
            got,
            from_log,
            "re-derived from epochs (FLOPs per step × steps ÷ MLLOG epoch times)",
            rel=slack + REL,
        )
    f.same(
        f"{lg} flops_per_s",
        log.value("flops_per_s"),
        eq6,
        "re-derived from epochs (record epochs, flops.per_step)",
    )
    line = log.one("flops_per_s") or {}
    f.same(
        f"{lg} flops_per_s epochs",
        (line.get("metadata") or {}).get("epochs"),
        len(walls),
        f"({rec} epochs)",
    )
    f.same(
        f"{lg} flops_per_s per_step",
        (line.get("metadata") or {}).get("per_step"),
        record.flops.per_step,
        f"({rec} flops.per_step)",
    )


def _quality(f: Findings, record: TrainRecord, log, target, eq6: float, rec: str, lg: str) -> None:
    """The record's target and quality against the packed flagfile and the MLLOG's
    evaluations, then what follows from them: VFLOPS and time to target."""
    q = record.quality
    if target is None:
        f.same(
            f"{rec} quality.target",
            q.target,
            None,
            "(the packed configuration has no target)",
        )
        return
    f.same(
        f"{rec} quality.target",
        q.target,
        target.target,
        "from the packed flagfile (--target_quality)",
    )
    f.same(
        f"{rec} quality.exponent",
        q.exponent,
        target.exponent,
        "from the packed flagfile (--quality_exponent)",
    )
    evals = log.evaluations()
    if not evals:
        f.fail(f"{lg} has no eval_accuracy line")
        return
    last = evals[-1][1]["value"]
    f.same(f"{rec} quality.ensemble", q.ensemble, last, f"(the last eval_accuracy of {lg})")
    curve = [p.ensemble for p in q.curve]
    f.same(
        f"{rec} quality.curve",
        curve,
        [a["value"] for _, a in evals],
        f"(the eval_accuracy lines of {lg})",
    )
    if not isinstance(q.ensemble, (int, float)):
        return
    _vflops(f, record, log, target, eq6, rec, lg)
    _time_to_target(f, record, log, evals, target.target, rec, lg)


def _vflops(f: Findings, record: TrainRecord, log, target, eq6: float, rec: str, lg: str) -> None:
    """The penalty and VFLOPS (Eq. 8) of the record and the MLLOG, re-derived from the record's
    quality, the packed target and Eq. 6."""
    penalty = metrics.penalty(record.quality.ensemble, target.target, target.exponent)
    f.same(
        f"{rec} metrics.penalty",
        record.metrics.penalty,
        penalty,
        "re-derived ((quality ÷ target)^n)",
    )
    vline = log.one("vflops_per_s") or {}
    vmeta = vline.get("metadata") or {}
    f.same(
        f"{lg} vflops_per_s penalty",
        vmeta.get("penalty"),
        penalty,
        "re-derived ((quality ÷ target)^n)",
    )
    f.same(f"{lg} vflops_per_s target", vmeta.get("target"), target.target, "(the packed flagfile)")
    f.same(
        f"{lg} vflops_per_s exponent",
        vmeta.get("exponent"),
        target.exponent,
        "(the packed flagfile)",
    )
    vflops = None if penalty is None else eq6 * penalty  # None: Eq. 8 undefined
    f.same(
        f"{rec} metrics.vflops_per_s",
        record.metrics.vflops_per_s,
        vflops,
        "re-derived (Eq. 6 FLOPS × penalty)",
    )
    f.same(f"{lg} vflops_per_s", vline.get("value"), vflops, "re-derived (Eq. 6 FLOPS × penalty)")


def _time_to_target(f: Findings, record: TrainRecord, log, evals, target: float, rec: str, lg: str):
    start = log.one("run_start")
    reached = next((stop for stop, acc in evals if acc["value"] >= target), None)
    got = record.time_to_target_s
    if got is None:
        resumed = start is not None and (start.get("metadata") or {}).get("first_step", 0) > 0
        if reached is not None and start is not None and not resumed and not record.resumes:
            seconds = (reached["time_ms"] - start["time_ms"]) / 1e3
            f.fail(
                f"{rec} time_to_target_s None != {seconds:.6g} from {lg} (the first eval_stop at the target − run_start)"
            )
        return
    if reached is None or start is None:
        f.fail(
            f"{rec} time_to_target_s {got:.6g}, but no evaluation in {lg} reached the target {target:g}"
        )
        return
    seconds = (reached["time_ms"] - start["time_ms"]) / 1e3
    f.same(
        f"{rec} time_to_target_s",
        got,
        seconds,
        f"from {lg} (the first eval_stop at the target − run_start, ± 3 ms)",
        rel=0,
        abs_=MS_SLACK_S,
    )
