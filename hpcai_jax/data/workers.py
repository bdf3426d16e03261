"""Training reads in grain worker processes: every local device block of every step, in order.

A source whose training examples need heavy per-example work (JPEG decoding and augmentation)
offers a `TrainReader`; one grain element is one device block of one step (the [members, rows]
slice of the global [M, B] batch that one local device holds), so a step's decoding spreads
over the workers and the memory in flight stays a few blocks per worker. grain hands worker k
the elements k, k + K, k + 2K, … and reads them back round-robin: the order is the step order
whatever K, and each element is a pure function of (step, block), so K workers give exactly what
the training process alone (K = 0) gives, and a run resumed at step s reads what it read first.

This module must not import jax: grain's spawned workers unpickle what it defines.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Protocol

import numpy as np

from hpcai_jax.data.sampler import BootstrapSampler

Block = tuple[tuple[int, int], tuple[int, int]]  # ((first member, end), (first row, end))
# ~300 images/s per core (benchmarks/input_pipeline.py): 16 feed several thousand images/s, what
# one GPU trains ResNet-50 at; more per device would only hold memory.
_MAX_AUTO_WORKERS_PER_DEVICE = 16


class TrainReader(Protocol):
    """Reads training examples with their augmentation. Picklable: it runs in the workers."""

    def __call__(self, indices: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
        """The examples at `indices` (int64 [n]), example i transformed with the augmentation
        key keys[i] = (seed, member, epoch, slot) (int64 [n, 4]); every field with a leading [n].
        """


def default_workers(local_devices: int) -> int:
    """One worker per core this process may run on (the training process keeps one), at most
    16 per local device: the cores a launcher binds to the process (SLURM's --cpus-per-task),
    not the node's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(_MAX_AUTO_WORKERS_PER_DEVICE * local_devices, (cores or 2) - 1))


def augment_keys(sampler: BootstrapSampler, step: int, block: Block) -> np.ndarray:
    """int64 [members, rows, 4]: each example's (seed, member, epoch, slot) in the block."""
    (m0, m1), (r0, r1) = block
    epoch, pos = divmod(step, sampler.steps_per_epoch)
    members = np.arange(m0, m1, dtype=np.int64)[:, None]
    slots = pos * sampler.batch_size + np.arange(r0, r1, dtype=np.int64)[None]
    return np.stack(
        np.broadcast_arrays(np.int64(sampler.seed), members, np.int64(epoch), slots), -1
    )


@dataclasses.dataclass(frozen=True)
class ReadBlock:
    """Element i → the fields of block i % len(blocks) of step i // len(blocks)."""

    reader: TrainReader
    sampler: BootstrapSampler
    blocks: tuple[Block, ...]  # this process's device blocks, in a fixed order

    def __call__(self, element: int) -> dict[str, np.ndarray]:
        step, which = divmod(int(element), len(self.blocks))
        block = self.blocks[which]
        (m0, m1), (r0, r1) = block
        indices = self.sampler.block(range(m0, m1), step, slice(r0, r1))
        keys = augment_keys(self.sampler, step, block)
        arrays = self.reader(indices.reshape(-1), keys.reshape(-1, 4))
        return {name: a.reshape(*indices.shape, *a.shape[1:]) for name, a in arrays.items()}


class BlockStream:
    """The local blocks of steps [first, last), step after step, made by `workers` processes
    (0: in this process, for debugging). Asking for a step other than the next one restarts
    the workers there, so any first step works (resume)."""

    def __init__(self, read: ReadBlock, last: int, workers: int):
        self._read, self._last, self._workers = read, last, workers
        self._iterator = None
        self._next: int | None = None

    def _open(self, first: int) -> None:
        import grain  # only where worker reads are used
        from absl import flags

        if not flags.FLAGS.is_parsed():
            # grain reads this absl flag where JAX is loaded, and raises when the program did not
            # parse flags (a library user, pytest; google/grain#1355): its default, explicitly.
            flags.FLAGS["grain_enable_multiprocess_worker_profiling"].present = True
        self.close()
        n = len(self._read.blocks)
        dataset = grain.MapDataset.range(first * n, self._last * n).map(self._read)
        # No reader threads inside a worker: the workers are the parallelism, and a thread
        # pool's 500-element read-ahead would hold hundreds of blocks per worker.
        iterable = dataset.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        self._iterator = iter(
            iterable.mp_prefetch(grain.MultiprocessingOptions(num_workers=self._workers))
        )
        self._next = first

    def step(self, step: int) -> dict[Block, dict[str, np.ndarray]]:
        """Every local block of `step`, keyed by its bounds."""
        blocks = self._read.blocks
        if self._workers == 0:
            n = len(blocks)
            return {b: self._read(step * n + i) for i, b in enumerate(blocks)}
        if step != self._next:
            self._open(step)
        out = {b: next(self._iterator) for b in blocks}
        self._next = step + 1
        return out

    def close(self) -> None:
        """Stops the workers (idempotent)."""
        if self._iterator is not None:
            self._iterator.close()
        self._iterator, self._next = None, None
