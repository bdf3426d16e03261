"""Bootstrap sampling at the index level: each member's own resample of the training set.

Bagging draws ONE sample per member for the whole run: a member's multiset of training indices
is a function of (seed, member) only, so about 36.8% of the examples are never seen by that
member, whatever the number of epochs (that is what makes the members differ; a sample redrawn
every epoch would show a member 1 − e^−E of the data after E epochs). Each epoch only reshuffles
the member's fixed sample, with a seed from (seed, member, epoch). Every process derives the
same streams without communicating, and no copy of the data is made.
"""

from __future__ import annotations

import dataclasses

import numpy as np

_STREAM_TAG = 0xB0075  # separates sampler streams from any other use of the run seed
_SAMPLE, _ORDER = 0, 1  # the draw of a member's sample, and its per-epoch orders


def _rng(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_STREAM_TAG, *key])))


def member_counts(method: str, num_examples: int, seed: int, member: int) -> np.ndarray:
    """How many times each example is in the member's sample: int64 [N], fixed for the run.

    with_replacement: N uniform draws from [0, N) (≈63.2% distinct, the classic bootstrap).
    poisson: Poisson(1) counts per example (the same limit; the sample's length varies around N).
    none: every example once, for ablations without resampling.
    """
    if method == "none":
        return np.ones(num_examples, np.int64)
    rng = _rng(_SAMPLE, seed, member)
    if method == "with_replacement":
        draws = rng.integers(0, num_examples, size=num_examples, dtype=np.int64)
        return np.bincount(draws, minlength=num_examples).astype(np.int64)
    if method == "poisson":
        return rng.poisson(1.0, size=num_examples).astype(np.int64)
    raise ValueError(f"unknown bootstrap method {method!r}")


def _shuffled(counts: np.ndarray, seed: int, member: int, epoch: int) -> np.ndarray:
    indices = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    _rng(_ORDER, seed, member, epoch).shuffle(indices)
    return indices


def epoch_indices(method: str, num_examples: int, seed: int, member: int, epoch: int) -> np.ndarray:
    """The member's ordered training indices for one epoch: its fixed sample, reshuffled."""
    return _shuffled(member_counts(method, num_examples, seed, member), seed, member, epoch)


# Epoch orders a sampler keeps per member: the current one, and the one before it for reads
# that straddle an epoch boundary (prefetching threads). One order is 8 bytes per example:
# 10 MB a member at ImageNet size.
ORDERS_KEPT = 2


@dataclasses.dataclass(frozen=True)
class BootstrapSampler:
    """Per-member index streams cut into fixed-size steps.

    Every member takes the same number of steps per epoch, N // batch_size. A Poisson sample
    shorter than that is topped up by continuing from the start of the epoch's order (a wrap of
    < 1% of N at ImageNet scale); a longer one is cut. Both are a property of the method.

    Memory: each instance keeps its members' samples (2 bytes per example and member) and at
    most ORDERS_KEPT epoch orders per member (8 bytes per example), on the instance: nothing
    is shared between equal samplers (two runs in one process), and nothing is pickled to a
    data worker, which rebuilds what it reads (benchmarks/sampler_memory.py).
    """

    method: str
    num_examples: int
    batch_size: int
    seed: int
    # member → counts; member → [(epoch, order)], newest last. Not fields of the comparison.
    _counts: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)
    _orders: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_counts", {})
        object.__setattr__(self, "_orders", {})

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.batch_size

    def counts(self, member: int) -> np.ndarray:
        """The member's sample as counts per example (see `member_counts`)."""
        counts = self._counts.get(member)
        if counts is None:
            # uint16: a count never nears 65,535; 1.28 M ImageNet counts take 2.5 MB a member.
            counts = member_counts(self.method, self.num_examples, self.seed, member)
            counts = counts.astype(np.uint16)
            counts.flags.writeable = False
            self._counts[member] = counts
        return counts

    def distinct_fraction(self, member: int) -> float:
        """Share of the training set the member ever sees (≈ 0.632 with replacement)."""
        return float(np.count_nonzero(self.counts(member))) / self.num_examples

    def out_of_bag(self, member: int, indices: np.ndarray) -> np.ndarray:
        """bool per index: the member never trains on that example."""
        return self.counts(member)[indices] == 0

    def _epoch(self, member: int, epoch: int) -> np.ndarray:
        kept = self._orders.get(member, [])
        for e, order in kept:
            if e == epoch:
                return order
        indices = _shuffled(self.counts(member), self.seed, member, epoch)
        need = self.steps_per_epoch * self.batch_size
        if len(indices) < need:
            indices = np.resize(indices, need)  # np.resize repeats from the start
        order = indices[:need]
        order.flags.writeable = False
        # A new list, not an append: a reader in another thread iterates the old one.
        self._orders[member] = [*kept, (epoch, order)][-ORDERS_KEPT:]
        return order

    def step_indices(self, member: int, step: int) -> np.ndarray:
        """Indices of global step `step` for `member`: shape [batch_size]."""
        epoch, pos = divmod(step, self.steps_per_epoch)
        start = pos * self.batch_size
        return self._epoch(member, epoch)[start : start + self.batch_size]

    def block(self, members: range, step: int, rows: slice) -> np.ndarray:
        """The [len(members), rows] block of the global [M, B] index matrix: what one device reads."""
        return np.stack([self.step_indices(m, step)[rows] for m in members])
