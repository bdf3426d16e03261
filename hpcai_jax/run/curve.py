"""Quality against training: one point per held-out evaluation, and the time to target.

Time to target is MLPerf's measure: from run_start to the end of the first evaluation at which
the ensemble reaches the target, on the run's one clock (the MLLOG's run_start and eval_stop
lines carry the same readings). It is defined for an uninterrupted run only: a target first
reached after a resume has no time to target.
"""

from __future__ import annotations

from hpcai_jax.engine.evaluate import EnsembleQuality


def point(quality: EnsembleQuality, step: int, steps_per_epoch: int, wall_s: float) -> dict:
    """A curve point: epochs trained, the step, seconds since run_start, and the qualities."""
    return {
        "epoch": step / steps_per_epoch,
        "step": step,
        "wall_s": wall_s,
        "ensemble": quality.ensemble,
        "member_mean": quality.member_mean,
        "members": quality.members,
    }


def reached(quality: EnsembleQuality | None, target: float | None) -> bool:
    return quality is not None and target is not None and quality.ensemble >= target


def time_to_target(
    curve: list[dict], target: float | None, resumes: list[dict], status: str
) -> tuple[float | None, str | None]:
    """(seconds, None), or (None, why)."""
    if target is None:
        return None, "no quality target (no held-out quality)"
    if status == "invalid":
        return None, "the run is invalid"
    first = next((p for p in curve if p["ensemble"] >= target), None)
    if first is None:
        if not curve:
            return None, "no evaluation"
        best = max(p["ensemble"] for p in curve)
        return None, (
            f"the ensemble never reached the target {target:g}: best {best:.4f} in "
            f"{len(curve)} evaluation(s)"
        )
    resumed = [r["at_step"] for r in resumes if r["at_step"] < first["step"]]
    if resumed:
        return None, (
            f"the target was first reached at step {first['step']}, after a resume at step "
            f"{resumed[0]}: time to target is defined for an uninterrupted run"
        )
    return first["wall_s"], None
