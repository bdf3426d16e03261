"""Turns bootstrap indices into sharded device batches, reading only local rows, ahead of use.

The global training batch is [M, B, H, W, C], sharded P('ensemble', 'data'). Each device's block
is built by `jax.make_array_from_callback`, so a process reads exactly the rows of the members
and batch slices its own devices hold, and nothing else (multi-host included). A background
thread keeps `prefetch` batches on the devices ahead of the step.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from hpcai_jax.data.source import ImageSource, ImageSpec
from hpcai_jax.mesh import BATCH_SPEC, EVAL_SPEC
from hpcai_jax.sampler import BootstrapSampler


@dataclasses.dataclass(frozen=True)
class Batch:
    images: jax.Array  # uint8
    labels: jax.Array  # int32; -1 marks padding in held-out batches


def _bounds(index: tuple, dim: int, size: int) -> tuple[int, int]:
    start, stop, _ = index[dim].indices(size)
    return start, stop


def _global_array(shape: tuple[int, ...], sharding: NamedSharding, dtype, blocks: dict, read,
                  part: int, key_dims: int):
    """Builds one array from per-device blocks, reading each distinct block once (`blocks` caches
    the (images, labels) pair of a block, keyed by its bounds on the first key_dims axes)."""

    def callback(index):
        key = tuple(_bounds(index, d, shape[d]) for d in range(key_dims))
        if key not in blocks:
            blocks[key] = read(key)
        return blocks[key][part]

    return jax.make_array_from_callback(shape, sharding, callback, dtype=dtype)


def train_batch(source: ImageSource, sampler: BootstrapSampler, mesh: Mesh, ensemble_size: int,
                step: int) -> Batch:
    """The global batch of `step`: member m's rows are its bootstrap indices for that step."""
    spec = source.spec
    shape = (ensemble_size, sampler.batch_size)
    sharding = NamedSharding(mesh, BATCH_SPEC)

    def read(key):
        (m0, m1), (r0, r1) = key
        idx = sampler.block(range(m0, m1), step, slice(r0, r1))
        images, labels = source.read(idx.reshape(-1))
        return images.reshape(*idx.shape, *spec.image_shape), labels.reshape(idx.shape)

    blocks: dict = {}
    images = _global_array((*shape, *spec.image_shape), sharding, jnp.uint8, blocks, read, 0, 2)
    labels = _global_array(shape, sharding, jnp.int32, blocks, read, 1, 2)
    return Batch(images, labels)


def synthetic_batch(spec: ImageSpec, mesh: Mesh, ensemble_size: int, batch_size: int,
                    seed: int) -> Batch:
    """Random images and labels generated on the devices once, reused every step (throughput runs:
    no host work, no transfers)."""
    sharding = NamedSharding(mesh, BATCH_SPEC)

    def make(key):
        k1, k2 = jax.random.split(key)
        images = jax.random.randint(k1, (ensemble_size, batch_size, *spec.image_shape), 0, 256,
                                    jnp.int32).astype(jnp.uint8)
        labels = jax.random.randint(k2, (ensemble_size, batch_size), 0, spec.num_classes, jnp.int32)
        return images, labels

    images, labels = jax.jit(make, out_shardings=(sharding, sharding))(jax.random.key(seed))
    return Batch(images, labels)


def eval_batches(source: ImageSource, mesh: Mesh, batch_size: int,
                 indices: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, Batch]]:
    """Batches [E, ...] of `indices` (default: the whole source, in order) split over `data` and
    replicated over `ensemble`. Yields (rows, batch): rows holds each row's example index, -1 for
    the padding of the last batch, whose label is -1 too. E is batch_size rounded up to a
    multiple of the data-axis size."""
    data_size = mesh.shape[EVAL_SPEC[0]]
    size = -(-batch_size // data_size) * data_size
    sharding = NamedSharding(mesh, EVAL_SPEC)
    spec = source.spec
    indices = np.arange(len(source)) if indices is None else np.asarray(indices, np.int64)
    for start in range(0, len(indices), size):
        rows = np.full(size, -1, np.int64)
        chunk = indices[start:start + size]
        rows[:len(chunk)] = chunk

        def read(key, rows=rows):
            ((r0, r1),) = key
            idx = rows[r0:r1]
            valid = idx >= 0
            images, labels = source.read(np.where(valid, idx, 0))
            return images, np.where(valid, labels, -1).astype(np.int32)

        blocks: dict = {}
        yield rows, Batch(_global_array((size, *spec.image_shape), sharding, jnp.uint8, blocks,
                                        read, 0, 1),
                          _global_array((size,), sharding, jnp.int32, blocks, read, 1, 1))


class Prefetcher:
    """Produces batches for steps [first, last) on a background thread, `depth` ahead.

    `wait_s` accumulates how long the consumer waited for data: the record's data-stall figure.
    """

    _DONE = object()

    def __init__(self, make_batch, first: int, last: int, depth: int):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.wait_s = 0.0
        self._thread = threading.Thread(target=self._run, args=(make_batch, first, last),
                                        name="prefetch", daemon=True)
        self._thread.start()

    def _run(self, make_batch, first, last):
        try:
            for step in range(first, last):
                item = make_batch(step)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            self._queue.put(e)
            return
        self._queue.put(self._DONE)

    def next(self) -> Batch:
        start = time.perf_counter()
        item = self._queue.get()
        self.wait_s += time.perf_counter() - start
        if isinstance(item, BaseException):
            raise item
        if item is self._DONE:
            raise StopIteration
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
