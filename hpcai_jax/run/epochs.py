"""Eq. 6 as the paper writes it: each completed epoch's FLOPs over its wall time.

Epochs tile the training time of a segment: the first starts at run_start, each next one where
the previous ended (its last step's completion), and each ends at its own last step's
completion. So input waits and checkpoint saves fall inside an epoch (a save at an epoch
boundary in the next one), and nothing falls between two epochs but evaluations, which are cut
out. Compilation comes before run_start. An epoch interrupted by a preemption keeps the time it
had booked up to the checkpoint it resumes from (in `Progress.epoch_open_s`) and goes on from
the resumed segment's run_start: the steps lost to the interruption and the restart are in no
epoch, as they are in no step time.
"""

from __future__ import annotations

from collections.abc import Callable

from hpcai_jax.run.progress import Progress

# Called when an epoch closes: (the epoch's record entry, start reading, end reading), where
# end - start is the time this segment booked into it (all of wall_s unless it was resumed).
OnClose = Callable[[dict, float, float], None]


class EpochTimer:
    """Books clock readings into `progress.epochs`; it never reads a clock itself (the loop's
    run clock hands it the readings, run/clock.py)."""

    def __init__(
        self,
        progress: Progress,
        steps_per_epoch: int,
        start: float,
        on_close: OnClose | None = None,
    ):
        self._progress, self._steps_per_epoch = progress, steps_per_epoch
        self._since = start  # where the open epoch's unbooked time begins
        self._booked = 0.0  # what this segment booked into the open epoch
        self._on_close = on_close

    def completed(self, step: int, now: float) -> None:
        """Step `step` completed at `now`: its time joins the open epoch, which it may close."""
        progress = self._progress
        progress.epoch_open_s += now - self._since
        self._booked += now - self._since
        self._since = now
        done = step + 1
        if done % self._steps_per_epoch == 0:
            epoch = {
                "index": done // self._steps_per_epoch,  # 1-based, as MLLOG's epoch_num
                "first_step": done - self._steps_per_epoch,
                "steps": self._steps_per_epoch,
                "wall_s": progress.epoch_open_s,
            }
            progress.epochs.append(epoch)
            progress.epoch_open_s = 0.0
            if self._on_close is not None:  # the MLLOG's epoch_start/epoch_stop readings
                self._on_close(epoch, now - self._booked, now)
            self._booked = 0.0

    def excise(self, seconds: float) -> None:
        """`seconds` just spent (an evaluation) belong to no epoch."""
        self._since += seconds
