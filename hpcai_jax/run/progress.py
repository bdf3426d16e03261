"""What a run has done so far, beyond its device state. It travels in every checkpoint, so a
resumed run reports the time that trained it and nothing of the time lost to the interruption.

Each field has one writer: the run clock (run/clock.py) the step count and every timing field
(step times, epochs, input waits, checkpoint and evaluation time, run time); the divergence
watch below `diverged`; the evaluations (run/evaluation.py) the `curve`; a checkpoint save
(run/hooks.py) `skipped_examples`; the loop the `compile_s` of each segment and its `resumes`.
"""

from __future__ import annotations

import dataclasses
import datetime

import jax
import numpy as np
from absl import logging

from hpcai_jax.distributed import allgather
from hpcai_jax.errors import DataError
from hpcai_jax.run import checkpoint_interval, member_figures


@dataclasses.dataclass
class Progress:
    run_id: str
    step: int = 0  # completed steps
    step_s: list[float] = dataclasses.field(default_factory=list)  # timed steps only
    timed_ranges: list[list[int]] = dataclasses.field(
        default_factory=list
    )  # [first, last) per segment
    data_wait_s: float = 0.0
    compile_s: list[float] = dataclasses.field(default_factory=list)  # one per segment
    checkpoint_s: float = 0.0  # blocking part of checkpoint saves, kept out of step times
    agree_s: float = 0.0  # waits in the processes' periodic agreements, kept out of step times
    eval_s: float = 0.0  # held-out evaluations, during training and at the end
    # Eq. 6: completed epochs ({index, first_step, steps, wall_s}), and the time booked so far
    # to the open one (run/clock.py).
    epochs: list[dict] = dataclasses.field(default_factory=list)
    epoch_open_s: float = 0.0
    # Run time since run_start, over every segment up to its last checkpoint (time lost to an
    # interruption and a resume's start-up are not in it); set before each save.
    run_s: float = 0.0
    curve: list[dict] = dataclasses.field(default_factory=list)  # one point per evaluation
    resumes: list[dict] = dataclasses.field(default_factory=list)
    # Member → its first step with a non-finite loss or parameter. Under --on_divergence=prune
    # these members are pruned from the ensemble; under stop, the first one ends the run.
    diverged: dict[int, int] = dataclasses.field(default_factory=dict)
    # Split → records replaced under --bad_example_policy=skip, every process's, up to the last
    # save (data/bad_examples.py): a resumed run's record still lists the earlier ones.
    skipped_examples: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    # Members a --resume_members=fit resume left behind: {"member", "step", "why"}, each with
    # the step it stopped at (run/resume.py); their member-steps before it still count.
    dropped: list[dict] = dataclasses.field(default_factory=list)
    # The MLLOG's lines at the last save (process 0's): a segment that died without its
    # segment_stop is cut back to them on resume (telemetry/mllog.py).
    mllog_lines: int = 0

    def to_meta(self) -> dict:
        meta = dataclasses.asdict(self)
        meta["diverged"] = {str(k): v for k, v in self.diverged.items()}
        return meta

    @classmethod
    def from_meta(cls, meta: dict) -> Progress:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in meta.items() if k in fields}
        values["diverged"] = {int(k): v for k, v in meta.get("diverged", {}).items()}
        return cls(**values)

    def recent_median_s(self) -> float | None:
        """What the watchdog scales with: the median of the last 101 timed steps
        (run/checkpoint_interval.py); None before the first."""
        return checkpoint_interval.median_step(self.step_s)

    def note_resume(self, mesh: dict) -> None:
        """A segment starts at `self.step` on `mesh` (the layout's fields): it may be another
        machine shape than the one that wrote the checkpoint."""
        self.resumes.append(
            {
                "at_step": self.step,
                "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "mesh": mesh,
            }
        )

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

    def timed_member_steps(self, ensemble_size: int) -> int:
        """Timed member-steps, a dropped member's up to the step it stopped at."""
        stopped = {d["member"]: d["step"] for d in self.dropped}
        return sum(
            max(0, min(last, stopped.get(member, last)) - first)
            for first, last in self.timed_ranges
            for member in set(range(ensemble_size)) | set(stopped)
        )

    def useful_member_steps(self, ensemble_size: int) -> int:
        """Timed member-steps of healthy members: a member's steps from its first non-finite
        step on are wasted work and are not counted in FLOPS."""
        return sum(
            self.healthy_member_steps(first, last, ensemble_size)
            for first, last in self.timed_ranges
        )

    def healthy_member_steps(self, first: int, last: int, ensemble_size: int) -> int:
        """Member-steps of steps [first, last) before each member's first non-finite step, and
        of a dropped member before the step it stopped at."""
        stopped = {d["member"]: d["step"] for d in self.dropped}
        total = 0
        for member in sorted(set(range(ensemble_size)) | set(stopped)):
            end = min(last, self.diverged.get(member, last), stopped.get(member, last))
            total += max(0, end - first)
        return total

    def drop(self, members: tuple[int, ...], why: str) -> list[int]:
        """Members that stop at this step (a fit resume); returns those newly dropped."""
        known = {d["member"] for d in self.dropped}
        new = [m for m in members if m not in known]
        self.dropped += [{"member": m, "step": self.step, "why": why} for m in new]
        return new


def _gathered(ready: list) -> list:
    """The steps' flags with every process's members (one all-gather for all of them: every
    process checks the same steps, so each calls it alike)."""
    if not ready:
        return []
    inputs = [i for _, _, i in ready if i is not None]
    table = member_figures.gather([f for _, f, _ in ready] + inputs)
    n = len(ready)
    return [
        (step, table[j], table[n + j] if inputs else None) for j, (step, _, _) in enumerate(ready)
    ]


class DivergenceWatch:
    """Reads the on-device finite flags of completed steps a few steps at a time (no host sync
    per step) and records each member's first non-finite step in `progress.diverged`.

    A member whose batch held a NaN/inf (the step's input flag) is bad input, not divergence:
    the run stops in one line (DataError, exit 65) naming the data set, split and examples, which
    `name_examples(member, step)` finds on the host."""

    def __init__(self, progress: Progress, policy: str, name_examples=None):
        self._pending: list[tuple[int, jax.Array, jax.Array | None]] = []
        self._progress = progress
        self._policy = policy
        self._name_examples = name_examples or (lambda member, step: "")

    def add(self, step: int, finite: jax.Array, input_finite: jax.Array | None = None) -> None:
        self._pending.append((step, finite, input_finite))

    def check(self, keep_last: bool) -> str:
        """Reads the pending flags (all but the newest when keep_last, whose step may still run)
        and returns why the run must stop under --on_divergence=stop ('' to go on)."""
        diverged = self._progress.diverged
        ready = self._pending[:-1] if keep_last else self._pending
        self._pending = self._pending[-1:] if keep_last else []
        for step, finite, input_finite in _gathered(ready):
            if input_finite is not None and not np.all(bad := np.asarray(input_finite)):
                member = int(np.flatnonzero(~bad)[0])
                raise DataError(
                    f"member {member}'s training batch at step {step} holds non-finite input "
                    f"values{self._name_examples(member, step)}: bad input data, not divergence"
                )
            for member in map(int, np.flatnonzero(~np.asarray(finite))):
                if member not in diverged:
                    diverged[member] = step
                    logging.error(
                        "member %d diverged: non-finite loss or parameters at step %d", member, step
                    )
        if not diverged or self._policy != "stop":
            return ""
        member = min(diverged, key=diverged.get)
        return (
            f"member {member} diverged at step {diverged[member]} (non-finite loss or parameters)"
        )


def skipped_examples(setup, progress: Progress) -> dict[str, list[int]]:
    """Split → sorted indices of the records every process replaced so far (those of earlier
    segments from `progress`), for the record and the checkpoint. A collective."""
    found = {split: set(indices) for split, indices in progress.skipped_examples.items()}
    sources = [] if setup.datasets is None else [setup.datasets.train, setup.datasets.eval]
    tallies = [getattr(s, "bad_examples", None) for s in sources]
    for tally in filter(None, tallies):
        found.setdefault(tally.split, set()).update(tally.skipped())
    out = {}
    for split in sorted({t.split for t in filter(None, tallies)} | set(found)):
        mine = np.asarray(sorted(found.get(split, ())), np.int64)
        width = int(allgather(np.int64(len(mine))).max())
        if width == 0:
            continue
        padded = np.full(width, -1, np.int64)
        padded[: len(mine)] = mine
        every = allgather(padded)
        out[split] = sorted({int(i) for i in every.flat if i >= 0})
    return {split: indices for split, indices in out.items() if indices}


def bad_examples(setup, member: int, step: int) -> str:
    """': --dataset=D, split 'train', examples [i, ...]': the examples of the member's batch at
    that step with a non-finite value, re-read on the host ('' where the data is generated on
    the devices or cannot be re-read)."""
    source = getattr(setup.datasets, "train", None)
    if source is None or not hasattr(source, "read"):
        return ""
    try:
        indices = np.asarray(setup.sampler.step_indices(member, step))
        fields = source.read(indices)
    except Exception as e:  # naming the examples must not hide the fault itself
        logging.warning("could not re-read member %d's batch at step %d: %s", member, step, e)
        return ""
    bad = np.zeros(len(indices), bool)
    for x in fields.values():
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.inexact):
            bad |= ~np.isfinite(x.reshape(len(indices), -1)).all(axis=1)
    names = sorted({int(i) for i in indices[bad]})
    return f": --dataset={setup.config.data.dataset}, split 'train', examples {names}"
