"""The benchmark's headline figures: FLOPS (Eq. 6) and VFLOPS (Eq. 7–8)."""

from __future__ import annotations


def flops_per_s(flops_per_step: float | None, steps: int, seconds: float) -> float | None:
    """Eq. 6: all members' training FLOPs over the wall time that trained them."""
    if flops_per_step is None or seconds <= 0:
        return None
    return flops_per_step * steps / seconds


def penalty(achieved_quality: float, target_quality: float, exponent: float) -> float:
    """Eq. 8: (achieved / target)^n."""
    return (achieved_quality / target_quality) ** exponent


def vflops_per_s(flops: float | None, achieved_quality: float | None, target_quality: float,
                 exponent: float) -> float | None:
    """Eq. 7: FLOPS × penalty; None when either figure is unknown (e.g. synthetic data)."""
    if flops is None or achieved_quality is None:
        return None
    return flops * penalty(achieved_quality, target_quality, exponent)
