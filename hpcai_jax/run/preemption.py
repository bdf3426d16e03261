"""Preemption: SIGTERM (SLURM's warning before the wall-time limit) or SIGINT asks the run to save a
checkpoint at the next agreed step boundary and exit with PREEMPTED_EXIT_CODE, so the job can be
requeued and resume.

Processes receive the signal at slightly different times; all of them must stop at the same
step (saving a checkpoint is collective), so the flag is agreed across processes at check points.
"""

from __future__ import annotations

import signal

import jax
import numpy as np

from hpcai_jax.distributed import allgather

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: "try again later" - the launch scripts requeue on it
FAILED_EXIT_CODE = 1


class PreemptionGuard:
    def __init__(self):
        self._requested: str | None = None
        self._previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self._requested = signal.Signals(signum).name

    @property
    def signal_name(self) -> str | None:
        return self._requested

    def stop_now(self, at_check_point: bool) -> bool:
        """One process: as soon as signalled. Several: only at check points, where all agree."""
        if jax.process_count() == 1:
            return self._requested is not None
        return at_check_point and self.agreed()

    def agreed(self) -> bool:
        """True on every process once any process has been signalled (a collective when there
        are several processes: call it at the same steps everywhere)."""
        local = self._requested is not None
        if jax.process_count() == 1:
            return local
        flags = allgather(np.asarray([local], np.int32))
        if flags.any() and self._requested is None:
            self._requested = "peer"
        return bool(flags.any())

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
