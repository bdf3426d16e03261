"""The hang watchdog: a step, or a wait at the processes' periodic agreement, that lasts far
longer than the run's median step, or a checkpoint save longer than its floor, ends the process
with HUNG_EXIT_CODE and one line naming what hung and the process, so that a hung device, file
system or stopped peer does not hold thousands of devices until the job's time limit
(docs/reliability.md, Hangs and Exit codes).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from hpcai_jax.errors import LOST_EXIT_CODE

# Hung is the lost-peer class: requeued by the launch scripts (docs/reliability.md, Exit codes).
HUNG_EXIT_CODE = LOST_EXIT_CODE


class Watchdog:
    """A daemon thread that ends the process when an armed deadline passes (`arm` before a
    stretch that may hang, `disarm` after). `exit` is the call that ends it (tests replace it)."""

    def __init__(self, factor: float, min_s: float, process: int, exit=os._exit):
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
