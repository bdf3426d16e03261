"""The check's time budget: --check_budget_s for the whole command, compilation included.

Each item gets a share of what is left when it starts (its weight over the weights of the items
still to run), so time an item does not use flows to the ones after it. An item cuts itself down
to its allotment (fewer sizes, calls or steps). What cannot be cut is one compilation, so the
items that compile estimate it first (a compile already timed in this run is the estimate of the
next) and `claim` it: an item whose share is smaller than its smallest form may borrow up to
LEND_FRACTION of the budget left when it started, and is skipped, as a WARN row saying so, only
when even that cannot hold it. Without the loan a plan of many items starves its largest ones
while the budget ends unspent (the first H200 acceptance skipped its flagship step with 108 s of
300 left over).

With several processes every decision that changes which collectives run (skip an item, one more
message size, how many steps) must be the same everywhere, or a process waits in a collective
its peers never start: `agree` takes the smallest figure over the processes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from hpcai_jax.distributed import allgather


def agree(seconds: float) -> float:
    """The smallest of every process's figure (a collective when there are several)."""
    return float(allgather(np.asarray([seconds], np.float64)).min())


# The most of the budget left that one item may take when its share cannot hold its smallest form.
LEND_FRACTION = 0.5


@dataclasses.dataclass
class Allotment:
    item: str
    seconds: float
    started_at: float
    clock: Callable[[], float]
    ceiling_s: float | None = None  # the most `claim` may raise `seconds` to; None: `seconds`

    def left_s(self) -> float:
        """This item's seconds still unused (this process's clock)."""
        return self.seconds - (self.clock() - self.started_at)

    def agreed_left_s(self) -> float:
        """`left_s`, the same on every process (a collective)."""
        return agree(self.left_s())

    def claim(self, need_s: float) -> bool:
        """Whether `need_s` more seconds fit, borrowing up to the ceiling when the share falls
        short (`seconds` grows by what is borrowed); the same answer on every process."""
        deficit = need_s - self.agreed_left_s()
        if deficit <= 0:
            return True
        ceiling = self.seconds if self.ceiling_s is None else self.ceiling_s
        if self.seconds + deficit > ceiling:
            return False
        self.seconds += deficit
        return True


class Budget:
    """Shares of `total_s` seconds, counted from construction, for the items in `weights`."""

    def __init__(
        self,
        total_s: float,
        weights: dict[str, float],
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.total_s, self._weights, self._clock = total_s, dict(weights), clock
        self._start = clock()
        self._pending = list(weights)
        self.used_s: dict[str, float] = {}

    def left_s(self) -> float:
        return self.total_s - (self._clock() - self._start)

    def start(self, item: str) -> Allotment:
        """The item's allotment: its weight's share of the budget left, agreed by every process,
        which `claim` may raise to LEND_FRACTION of that budget."""
        self._pending.remove(item)
        weight = self._weights[item]
        total = weight + sum(self._weights[i] for i in self._pending)
        left = max(0.0, agree(self.left_s()))
        seconds = left * (weight / total if total else 1.0)
        ceiling = left if not self._pending else max(seconds, LEND_FRACTION * left)
        return Allotment(item, seconds, self._clock(), self._clock, ceiling)

    def finish(self, allotment: Allotment) -> None:
        self.used_s[allotment.item] = self._clock() - allotment.started_at
