"""What guards a run's end: a preemption signal turned into a clean, agreed stop, and a hang
turned into an exit the launch scripts requeue.

Preemption: SIGTERM (SLURM's warning before the wall-time limit) or SIGINT, noted by the handlers
of run/interrupt.py, asks the run to save a checkpoint at the next agreed step boundary and exit
with errors.PREEMPTED_EXIT_CODE, so the job can be requeued and resume.

Processes receive the signal at slightly different times; all of them must stop at the same
step (saving a checkpoint is collective), so the flag is agreed across processes at check points.

The hang watchdog: a step, or a wait at the processes' periodic agreement, that lasts far
longer than the run's median step, or a checkpoint save longer than its floor, ends the process
with HUNG_EXIT_CODE and one line naming what hung and the process, so that a hung device, file
system or stopped peer does not hold thousands of devices until the job's time limit
(docs/reliability.md, Hangs and Exit codes).
"""

from __future__ import annotations

import sys
import threading
import time

import jax
import numpy as np

from hpcai_jax.distributed import allgather, end_in_order
from hpcai_jax.errors import LOST_EXIT_CODE
from hpcai_jax.run import interrupt

FAILED_EXIT_CODE = 1


class PreemptionGuard:
    """Takes the signals over from start-up (run/interrupt.py): one noted before the loop, or
    during it, stops the run at the next agreed step boundary (or an evaluation before its next
    batch: run/evaluation.py); one after the loop is noted, the final save completes and the
    final evaluation stops before its next batch. A second SIGINT ends the process at once."""

    def __init__(self):
        self._peer = False
        self._installed = interrupt.install()  # main installed them first, or a test calls
        interrupt.defer()

    @property
    def signal_name(self) -> str | None:
        return interrupt.received() or ("peer" if self._peer else None)

    def stop_now(self, at_check_point: bool) -> bool:
        """One process: as soon as signalled. Several: only at check points, where all agree."""
        if jax.process_count() == 1:
            return interrupt.received() is not None
        return at_check_point and self.agreed()

    def agreed(self) -> bool:
        """True on every process once any process has been signalled (a collective when there
        are several processes: call it at the same steps everywhere)."""
        local = interrupt.received() is not None
        if jax.process_count() == 1:
            return local
        flags = allgather(np.asarray([local], np.int32))
        if flags.any() and not local:
            self._peer = True
        return bool(flags.any())

    def restore(self) -> None:
        """The handlers before the guard, if it installed them (may run twice); under main's,
        a signal from here on is noted for the line after the record."""
        if self._installed:
            interrupt.restore()
            self._installed = False


# Hung is the lost-peer class: requeued by the launch scripts (docs/reliability.md, Exit codes).
HUNG_EXIT_CODE = LOST_EXIT_CODE


class Watchdog:
    """A daemon thread that ends the process when an armed deadline passes (`arm` before a
    stretch that may hang, `disarm` after). `exit` is the call that ends it with a code (tests
    replace it): by default after the job's other processes, so that none is aborted for
    process 0's service (distributed.end_in_order)."""

    def __init__(self, factor: float, min_s: float, process: int, exit=None):
        exit = exit or (lambda code: end_in_order("", code))
        self._factor, self._min_s, self._process, self._exit = factor, min_s, process, exit
        self._lock = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._limit = 0.0
        self._rule = ""
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)
        self._thread.start()

    def limit_s(self, median_step_s: float | None) -> float:
        """How long a stretch may take: factor × the median step, at least min_s."""
        return max(self._min_s, self._factor * (median_step_s or 0.0))

    def arm(self, what: str, median_step_s: float | None) -> None:
        """Bounds `what` by the limit at `median_step_s` (None: no median, the floor alone)."""
        with self._lock:
            self._limit = self.limit_s(median_step_s)
            self._rule = (
                "--watchdog_min_s"
                if median_step_s is None
                else "--watchdog_factor x the median step, at least --watchdog_min_s"
            )
            self._deadline = time.monotonic() + self._limit
            self._what = what
            self._lock.notify()

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None
            self._lock.notify()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        with self._lock:
            while not self._closed:
                if self._deadline is None:
                    self._lock.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._lock.wait(timeout=left)
                    continue
                print(
                    f"hpcai_jax: error: process {self._process} hung: {self._what} has not "
                    f"finished after {self._limit:.0f} s ({self._rule}); exit {HUNG_EXIT_CODE}",
                    file=sys.stderr,
                    flush=True,
                )
                self._exit(HUNG_EXIT_CODE)
                return
