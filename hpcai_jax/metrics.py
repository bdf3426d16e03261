"""The benchmark's arithmetic, in one place: APC (Eq. 3–4), FLOPS (Eq. 6, over epochs and over
the steady-state steps), the quality penalty and VFLOPS (Eq. 7–8), MFU and the roofline. The run
record and `--mode=flops` call these and nothing else.
"""

from __future__ import annotations

import math


def apc(train_flops_per_example: float, batch_size: int, ensemble_size: int = 1) -> float:
    """Eq. 3–4: parallel computation of one iteration, Σ over M members and |B| examples."""
    return ensemble_size * batch_size * train_flops_per_example


def per_second(per_member_step: float | None, member_steps: int, seconds: float) -> float | None:
    """Eq. 6 when the amount is FLOPs (Σ APC / T): the training FLOPs of the member-steps done
    over the wall time that did them; images/s when it is the batch size. A member-step is one
    member's training step; an ensemble step is M of them."""
    if per_member_step is None or seconds <= 0:
        return None
    return per_member_step * member_steps / seconds


def over_epochs(flops: list[float], seconds: list[float]) -> float | None:
    """Eq. 6 over completed epochs: their FLOPs over their wall time, Σ FLOPs / Σ T (the
    time-weighted mean of the per-epoch figures, docs/score.md §5); None without an epoch."""
    total_s = sum(seconds)
    if not flops or total_s <= 0:
        return None
    return sum(flops) / total_s


def penalty_undefined_why(
    achieved_quality: float, target_quality: float, exponent: float
) -> str | None:
    """Why Eq. 8's (achieved / target)^n has no real value for these figures (None: it has): a
    quality that is not a finite number, a negative one (R² can be: a member worse than the
    mean), or a target that is not > 0. A negative base to a fractional power is complex."""
    for name, value in (("achieved quality", achieved_quality), ("target", target_quality)):
        if not math.isfinite(value):
            return f"{name} {value} is not a finite number: Eq. 8 is undefined"
    if target_quality <= 0:
        return f"target {target_quality:g} is not > 0: Eq. 8 is undefined"
    if achieved_quality < 0:
        return (
            f"achieved quality {achieved_quality:.4g} < 0 (e.g. a negative R²): Eq. 8's "
            f"(quality / target)^{exponent:g} is undefined"
        )
    return None


def penalty(achieved_quality: float, target_quality: float, exponent: float) -> float | None:
    """Eq. 8: (achieved / target)^n. Above the target it rewards (> 1), as the paper defines it.
    None where it is undefined (`penalty_undefined_why` says why)."""
    if penalty_undefined_why(achieved_quality, target_quality, exponent):
        return None
    return (achieved_quality / target_quality) ** exponent


def vflops_per_s(
    flops: float | None, achieved_quality: float | None, target_quality: float, exponent: float
) -> float | None:
    """Eq. 7: FLOPS × penalty; None when either figure is unknown (e.g. synthetic data) or the
    penalty is undefined (`vflops_per_s_why`)."""
    if flops is None or achieved_quality is None:
        return None
    factor = penalty(achieved_quality, target_quality, exponent)
    return None if factor is None else flops * factor


def vflops_per_s_why(
    flops: float | None, achieved_quality: float | None, target_quality: float, exponent: float
) -> str | None:
    """Why `vflops_per_s` is None for these figures (None when it is a number)."""
    if flops is None:
        return "no FLOPS figure"
    if achieved_quality is None:
        return "no achieved quality (no held-out evaluation)"
    return penalty_undefined_why(achieved_quality, target_quality, exponent)


def mfu(flops_per_s_per_device: float | None, peak_per_device: float | None) -> float | None:
    """Model FLOPs utilisation: achieved over peak FLOP/s, both per device; None when either is
    unknown."""
    if not flops_per_s_per_device or not peak_per_device:
        return None
    return flops_per_s_per_device / peak_per_device


def attainable(
    peak: float | None, bandwidth: float | None, intensity: float | None
) -> float | None:
    """The roofline: min(peak FLOP/s, bandwidth bytes/s × arithmetic intensity FLOP/byte)."""
    if not peak or not bandwidth or not intensity:
        return None
    return min(peak, bandwidth * intensity)
