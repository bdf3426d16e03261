"""Bootstrap sampling at the index level: each member's own resample of the training set.

A member's sample for an epoch is a deterministic function of (seed, member, epoch), so every
process derives the same index stream without communicating, and no copy of the data is made.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

_STREAM_TAG = 0xB0075  # separates sampler streams from any other use of the run seed


def _rng(seed: int, member: int, epoch: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_STREAM_TAG, seed, member, epoch])))


def epoch_indices(method: str, num_examples: int, seed: int, member: int, epoch: int) -> np.ndarray:
    """The member's ordered training indices for one epoch.

    with_replacement: N uniform draws from [0, N) (≈63.2% distinct, the classic bootstrap).
    poisson: each example repeated Poisson(1) times, then shuffled; the length varies around N.
    none: a permutation of [0, N), for ablations without resampling.
    """
    rng = _rng(seed, member, epoch)
    if method == "with_replacement":
        return rng.integers(0, num_examples, size=num_examples, dtype=np.int64)
    if method == "poisson":
        counts = rng.poisson(1.0, size=num_examples)
        indices = np.repeat(np.arange(num_examples, dtype=np.int64), counts)
        rng.shuffle(indices)
        return indices
    if method == "none":
        return rng.permutation(num_examples).astype(np.int64)
    raise ValueError(f"unknown bootstrap method {method!r}")


@dataclasses.dataclass(frozen=True)
class BootstrapSampler:
    """Per-member index streams cut into fixed-size steps.

    Every member takes the same number of steps per epoch, N // batch_size. A Poisson sample
    shorter than that is topped up by continuing from its own start (a wrap of < 1% of N at
    ImageNet scale); a longer one is cut. Both are recorded as a property of the method.
    """

    method: str
    num_examples: int
    batch_size: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.batch_size

    @functools.lru_cache(maxsize=64)  # noqa: B019 - a few (member, epoch) streams, reused per step
    def _epoch(self, member: int, epoch: int) -> np.ndarray:
        indices = epoch_indices(self.method, self.num_examples, self.seed, member, epoch)
        need = self.steps_per_epoch * self.batch_size
        if len(indices) < need:
            indices = np.resize(indices, need)  # np.resize repeats from the start
        return indices[:need]

    def step_indices(self, member: int, step: int) -> np.ndarray:
        """Indices of global step `step` for `member`: shape [batch_size]."""
        epoch, pos = divmod(step, self.steps_per_epoch)
        start = pos * self.batch_size
        return self._epoch(member, epoch)[start:start + self.batch_size]

    def block(self, members: range, step: int, rows: slice) -> np.ndarray:
        """The [len(members), rows] block of the global [M, B] index matrix: what one device reads."""
        return np.stack([self.step_indices(m, step)[rows] for m in members])
