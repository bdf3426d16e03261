"""`--checkpoint_every=auto`: the checkpoint interval from the failure rate (Young 1974, Daly
2006), √(2 × save time × MTBF), from a save measured in this run and the job's mean time between
failures (docs/reliability.md, "Checkpoint interval").
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

# Interruptions per device-hour: Llama 3's 16,384-GPU pre-training saw 419 unexpected
# interruptions in 54 days (Dubey et al. 2024, §3.3.4): 419 / (54 × 24 × 16,384) = 1.97e-5.
INTERRUPTIONS_PER_DEVICE_HOUR = 2e-5
# Timed steps before the probe save, so that the interval scales with a steady step.
PROBE_STEPS = 5


def mtbf_hours(configured: float, devices: int) -> tuple[float, str]:
    """The job's MTBF in hours and where it comes from: --mtbf_hours, or (None: auto) the devices at
    INTERRUPTIONS_PER_DEVICE_HOUR each."""
    if configured is not None:
        return configured, "--mtbf_hours"
    return 1.0 / (INTERRUPTIONS_PER_DEVICE_HOUR * devices), (
        f"{devices} devices at {INTERRUPTIONS_PER_DEVICE_HOUR:g} interruptions per device-hour"
    )


@dataclasses.dataclass(frozen=True)
class Interval:
    """The interval chosen (None: saves only at the end and on preemption) and why, in words."""

    steps: int | None
    why: str
    mtbf_hours: float | None = None


def young_daly(
    save_s: float, write_s: float, step_s: float, mtbf_h: float, mtbf_why: str, left: int
) -> Interval:
    """Steps between saves: √(2 × save_s × MTBF) over the median step, at least the steps a save
    takes to reach the disk (`write_s`: an asynchronous save must end before the next begins).
    `save_s` is what the run pays per save (the copy off the devices); `left`: steps still to
    run (an interval past them means the end's save alone)."""
    tau = math.sqrt(2.0 * save_s * mtbf_h * 3600.0)
    step_s = max(step_s, 1e-9)
    steps = max(1, round(tau / step_s))
    floor = math.ceil(write_s / step_s)
    why = (
        f"auto: sqrt(2 x {save_s:.3g} s per save x {mtbf_h:.4g} h MTBF ({mtbf_why})) = "
        f"{tau:.4g} s = {steps} steps of {step_s:.3g} s"
    )
    if floor > steps:
        steps = floor
        why += f", raised to the {floor} steps a save takes to write ({write_s:.3g} s)"
    if steps >= left:
        why += f"; beyond the {left} steps left: saves at the end and on preemption only"
    return Interval(steps, why, mtbf_h)


def median_step(step_s: list[float]) -> float | None:
    """The median of the last 101 timed steps, None before any."""
    recent = step_s[-101:]
    return float(np.median(recent)) if recent else None


def not_probed(probe_at: int, mtbf_h: float) -> Interval:
    return Interval(
        None,
        f"auto: the run ended before its probe save at step {probe_at}: saves at the end and "
        "on preemption only",
        mtbf_h,
    )


def fixed(every: int) -> Interval:
    if every == 0:
        return Interval(None, "--checkpoint_every=0: saves at the end and on preemption only")
    return Interval(every, f"--checkpoint_every={every}")
