"""What a run has done so far, beyond its device state: timing accumulators, resumes, pruned
members. It travels in every checkpoint, so a resumed run reports the time that trained it and
nothing of the time lost to the interruption."""

from __future__ import annotations

import dataclasses
import datetime


@dataclasses.dataclass
class Progress:
    run_id: str
    step: int = 0  # completed steps
    step_s: list[float] = dataclasses.field(default_factory=list)  # timed steps only
    timed_ranges: list[list[int]] = dataclasses.field(default_factory=list)  # [first, last) per segment
    data_wait_s: float = 0.0
    compile_s: list[float] = dataclasses.field(default_factory=list)  # one per segment
    checkpoint_s: float = 0.0  # blocking part of checkpoint saves, kept out of step times
    resumes: list[dict] = dataclasses.field(default_factory=list)
    pruned: dict[int, int] = dataclasses.field(default_factory=dict)  # member -> first bad step

    def to_meta(self) -> dict:
        meta = dataclasses.asdict(self)
        meta["pruned"] = {str(k): v for k, v in self.pruned.items()}
        return meta

    @classmethod
    def from_meta(cls, meta: dict) -> Progress:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in meta.items() if k in fields}
        values["pruned"] = {int(k): v for k, v in meta.get("pruned", {}).items()}
        return cls(**values)

    def note_resume(self) -> None:
        self.resumes.append({"at_step": self.step,
                             "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")})

    def time_step(self, step: int, seconds: float) -> None:
        if self.timed_ranges and self.timed_ranges[-1][1] == step:
            self.timed_ranges[-1][1] = step + 1
        else:
            self.timed_ranges.append([step, step + 1])
        self.step_s.append(seconds)

    @property
    def train_wall_s(self) -> float:
        """Timed steps follow each other without gaps inside a segment: their sum is the wall time."""
        return float(sum(self.step_s))

    def useful_member_steps(self, ensemble_size: int) -> int:
        """Timed member-steps of healthy members: a member's steps from its first non-finite
        step on are wasted work and are not counted in FLOPS."""
        total = 0
        for first, last in self.timed_ranges:
            for member in range(ensemble_size):
                end = min(last, self.pruned.get(member, last))
                total += max(0, end - first)
        return total
