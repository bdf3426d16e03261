"""The benchmark's arithmetic, in one place: APC (Eq. 3–4), FLOPS (Eq. 6, over epochs and over
the steady-state steps), the quality penalty and VFLOPS (Eq. 7–8), MFU and the roofline. The run
record and `--mode=flops` call these and nothing else.
"""

from __future__ import annotations


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


def penalty(achieved_quality: float, target_quality: float, exponent: float) -> float:
    """Eq. 8: (achieved / target)^n. Above the target it rewards (> 1), as the paper defines it."""
    return (achieved_quality / target_quality) ** exponent


def vflops_per_s(
    flops: float | None, achieved_quality: float | None, target_quality: float, exponent: float
) -> float | None:
    """Eq. 7: FLOPS × penalty; None when either figure is unknown (e.g. synthetic data)."""
    if flops is None or achieved_quality is None:
        return None
    return flops * penalty(achieved_quality, target_quality, exponent)


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
