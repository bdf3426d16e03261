"""Step-time statistics, HPC-benchmark style: warm-up excluded, min/median/max/mean reported."""

from __future__ import annotations

import dataclasses
import statistics


@dataclasses.dataclass(frozen=True)
class StepTimes:
    count: int
    min_s: float
    median_s: float
    max_s: float
    mean_s: float
    total_s: float

    @classmethod
    def of(cls, seconds: list[float]) -> StepTimes:
        if not seconds:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return cls(
            len(seconds),
            min(seconds),
            statistics.median(seconds),
            max(seconds),
            statistics.fmean(seconds),
            sum(seconds),
        )


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
