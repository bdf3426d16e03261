"""Turns bootstrap indices into sharded device batches, reading only local rows, ahead of use.

A batch is a dict of the workload's fields; the training batch has a leading [M, B] on every
field, sharded P('ensemble', 'data'). Each device's block is built by
`jax.make_array_from_callback`, so a process reads exactly the rows of the members and batch
slices its own devices hold, and nothing else (multi-host included). A source that offers a
`train_reader` (tfds images: decoding and augmentation) has those blocks made in worker
processes (`workers.py`); the others (in-memory sets) are read here. A background thread keeps
`prefetch` batches on the devices ahead of the step.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from hpcai_jax.axes import BATCH_SPEC, DATA, ENSEMBLE
from hpcai_jax.data.bad_examples import BAD
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.data.source import Fields, Source
from hpcai_jax.data.workers import Block, BlockStream, ReadBlock, TrainReader, default_workers

Batch = dict[str, jax.Array]  # a workload's fields, each with a leading [M, B] or [E] shape
_VALID = "__valid__"  # the padding mask travels with the fields, then leaves the batch
# The most member groups that share one eval block's reads: the eval step gathers the slices
# with split - 1 collective permutes.
MAX_READ_SPLIT = 64
# The wait for the step's batch, as a profiler trace names it (docs/observe.md).
INPUT_WAIT = "input_wait"


@dataclasses.dataclass(frozen=True)
class EvalBatch:
    """One eval batch of E examples as read: every field laid out [ensemble, E / split]
    (BATCH_SPEC), so that a device holds one slice of its data block, and the eval step gathers
    a block's `split` slices from the neighbouring members that read them (engine/step.py)."""

    rows: np.ndarray  # [E] each row's example index in the batch's order; -1: padding
    batch: Batch  # per field [ensemble, E / split, ...], sharded BATCH_SPEC
    valid: jax.Array  # bool [ensemble, E / split]: rows >= 0, laid out like the batch
    split: int  # member groups that share the reading of one data block
    data_size: int  # P_degree: the data blocks of the batch

    def host(self, values: jax.Array) -> np.ndarray:
        """A field read back in the batch's order, [E, ...] (one process: tests, diagnostics)."""
        a = np.asarray(values)[: self.split]
        block = a.shape[1] // self.data_size
        a = a.reshape(self.split, self.data_size, block, *a.shape[2:])
        return a.swapaxes(0, 1).reshape(len(self.rows), *a.shape[3:])


def _bounds(index: tuple, dim: int, size: int) -> tuple[int, int]:
    start, stop, _ = index[dim].indices(size)
    return start, stop


def _block_key(index: tuple, lead: tuple[int, ...]) -> tuple:
    return tuple(_bounds(index, d, lead[d]) for d in range(len(lead)))


def local_blocks(lead: tuple[int, ...], sharding: NamedSharding) -> tuple[Block, ...]:
    """The distinct blocks (bounds on the leading axes) this process's devices hold, sorted."""
    indices = sharding.addressable_devices_indices_map(lead).values()
    return tuple(sorted({_block_key(index, lead) for index in indices}))


def _global_batch(lead: tuple[int, ...], fields: Fields, sharding: NamedSharding, read) -> Batch:
    """One global array per field from per-device blocks; read(bounds) returns every field of the
    block whose bounds on the leading axes are `bounds`, and is called once per distinct block."""
    blocks: dict = {}

    def callback(name):
        def fill(index):
            key = _block_key(index, lead)
            if key not in blocks:
                blocks[key] = read(key)
            return blocks[key][name]

        return fill

    return {
        name: jax.make_array_from_callback(
            (*lead, *shape), sharding, callback(name), dtype=np.dtype(dtype)
        )
        for name, (shape, dtype) in fields.items()
    }


def train_batch(
    source: Source, sampler: BootstrapSampler, mesh: Mesh, ensemble_size: int, step: int
) -> Batch:
    """The global batch of `step`: member m's rows are its bootstrap indices for that step."""

    def read(key):
        (m0, m1), (r0, r1) = key
        idx = sampler.block(range(m0, m1), step, slice(r0, r1))
        arrays = source.read(idx.reshape(-1))
        return {name: a.reshape(*idx.shape, *a.shape[1:]) for name, a in arrays.items()}

    return _global_batch(
        (ensemble_size, sampler.batch_size),
        source.spec.fields,
        NamedSharding(mesh, BATCH_SPEC),
        read,
    )


class WorkerBatches:
    """step → Batch for a source with a `train_reader`: worker processes decode and augment this
    process's blocks; this one only assembles the global arrays from ready blocks, and hands
    the records the workers replaced to `note_bad` (the source's --bad_example_policy)."""

    def __init__(
        self,
        reader: TrainReader,
        fields: Fields,
        sampler: BootstrapSampler,
        mesh: Mesh,
        ensemble_size: int,
        last: int,
        workers: int,
        restarts: int = 3,
        note_bad: Callable[[list], None] | None = None,
    ):
        self._fields = fields
        self._note_bad = note_bad
        self._lead = (ensemble_size, sampler.batch_size)
        self._sharding = NamedSharding(mesh, BATCH_SPEC)
        read = ReadBlock(reader, sampler, local_blocks(self._lead, self._sharding))
        self._stream = BlockStream(read, last, workers, restarts)

    def __call__(self, step: int) -> Batch:
        blocks = self._stream.step(step)
        bad = [b for fields in blocks.values() for b in fields.pop(BAD, [])]
        if bad and self._note_bad is not None:
            self._note_bad(bad)
        return _global_batch(self._lead, self._fields, self._sharding, blocks.__getitem__)

    def close(self) -> None:
        self._stream.close()


def train_batches(
    source: Source,
    sampler: BootstrapSampler,
    mesh: Mesh,
    ensemble_size: int,
    last: int,
    workers: int = -1,
    restarts: int = 3,
) -> Callable[[int], Batch]:
    """step → the global batch of that step, for steps below `last`: through worker processes
    (`workers`; -1: `default_workers`, 0: none; a dead one restarted up to `restarts` times)
    where the source offers a `train_reader` (its training transform differs from `read`'s),
    else `train_batch`. Close it with Prefetcher.close, or its own `close` where it has one."""
    train_reader = getattr(source, "train_reader", None)
    if train_reader is None:
        return functools.partial(train_batch, source, sampler, mesh, ensemble_size)
    reader = train_reader()
    if workers < 0:  # an in-memory set's read is indexing: workers would only copy it
        in_memory = getattr(reader, "in_memory", False)
        workers = 0 if in_memory else default_workers(len(mesh.local_devices))
    bad_examples = getattr(source, "bad_examples", None)
    return WorkerBatches(
        reader,
        source.spec.fields,
        sampler,
        mesh,
        ensemble_size,
        last,
        workers,
        restarts,
        bad_examples.note if bad_examples else None,
    )


def synthetic_batch(make, mesh: Mesh, ensemble_size: int, batch_size: int, seed: int) -> Batch:
    """make(key, (M, B)) → a batch, generated on the devices once and reused every step
    (throughput runs: no host work, no transfers)."""
    sharding = NamedSharding(mesh, BATCH_SPEC)
    lead = (ensemble_size, batch_size)
    return jax.jit(lambda key: make(key, lead), out_shardings=sharding)(jax.random.key(seed))


class ReadCache:
    """What a process has read of a held-out source, kept across evaluations up to `limit_bytes`
    (--eval_cache_mib): every evaluation reads the same blocks in the same order, and at
    thousands of processes each re-read is the whole set again from the shared file system
    (docs/scale.md). Blocks that do not fit are read as before; `hits`, `misses` and `bytes`
    say what it did."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._blocks: dict[bytes, dict] = {}
        self.bytes = self.hits = self.misses = 0

    def read(self, source: Source, idx: np.ndarray) -> dict:
        key = np.ascontiguousarray(idx, np.int64).tobytes()
        if (found := self._blocks.get(key)) is not None:
            self.hits += 1
            return found
        self.misses += 1
        arrays = source.read(idx)
        size = sum(np.asarray(a).nbytes for a in arrays.values())
        if self.bytes + size <= self.limit_bytes:
            self._blocks[key] = arrays
            self.bytes += size
        return arrays


def read_split(block: int, ensemble: int, limit: int = MAX_READ_SPLIT) -> int:
    """How many member groups share the reading of one data block of an eval batch: the largest
    count up to `limit` that divides both the block's rows and the ensemble axis."""
    return max(g for g in range(1, min(block, ensemble, limit) + 1) if not block % g + ensemble % g)


def eval_layout(mesh: Mesh, batch_size: int) -> tuple[int, int]:
    """(E, split): the eval batch rounded up to a multiple of the data axis, and its read split."""
    data_size = mesh.shape[DATA]
    size = -(-batch_size // data_size) * data_size
    return size, read_split(size // data_size, mesh.shape[ENSEMBLE])


def eval_batches(
    source: Source,
    mesh: Mesh,
    batch_size: int,
    indices: np.ndarray | None = None,
    cache: ReadCache | None = None,
) -> Iterator[EvalBatch]:
    """Batches of E examples of `indices` (default: the whole source), the last ones padded with
    example 0, marked not valid; E is batch_size rounded up to a multiple of the data-axis size.

    Each of a batch's data blocks is read in `split` slices by as many neighbouring member
    groups (the rest of the groups read the same slices again), and every slice position reads
    its own contiguous stretch of `indices` from batch to batch: at any moment the groups read
    P_degree × split distant parts of the set (different shard files), not all the same one
    (docs/scale.md, Evaluation). Which examples share a batch does not change a figure: the
    counts are sums over examples. `cache`: reads kept across calls."""
    data_size = mesh.shape[DATA]
    size, split = eval_layout(mesh, batch_size)
    block = size // data_size // split  # rows of one slice
    indices = np.arange(len(source)) if indices is None else np.asarray(indices, np.int64)
    batches = -(-len(indices) // size)
    padded = np.full(batches * size, -1, np.int64)
    padded[: len(indices)] = indices
    stretches = padded.reshape(data_size * split, batches, block)  # slice position × batch
    lead = (mesh.shape[ENSEMBLE], data_size * block)
    sharding = NamedSharding(mesh, BATCH_SPEC)
    fields = {**source.spec.fields, _VALID: ((), "bool")}
    for t in range(batches):
        slices = stretches[:, t].reshape(data_size, split, block)
        read_now: dict = {}

        def read(key, slices=slices, read_now=read_now):
            (e0, _), (c0, _) = key
            where = (c0 // block, e0 % split)  # (data block, slice): groups e and e+split agree
            if where not in read_now:
                idx = slices[where]
                safe = np.where(idx >= 0, idx, 0)
                arrays = source.read(safe) if cache is None else cache.read(source, safe)
                read_now[where] = {**arrays, _VALID: idx >= 0}
            return {name: a[None] for name, a in read_now[where].items()}

        batch = _global_batch(lead, fields, sharding, read)
        valid = batch.pop(_VALID)
        yield EvalBatch(slices.reshape(size), batch, valid, split, data_size)


class Prefetcher:
    """Produces batches for steps [first, last) on a background thread, `depth` ahead.

    `wait_s` accumulates how long the consumer waited for data: the record's data-stall figure.
    With worker reads, the thread waits on the workers, so the figure counts their lag too.
    """

    _DONE = object()

    def __init__(self, make_batch, first: int, last: int, depth: int, clock=time.perf_counter):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._make_batch = make_batch
        self._clock = clock  # a test's fake one makes the wait exact
        self.wait_s = 0.0
        self._thread = threading.Thread(
            target=self._run, args=(make_batch, first, last), name="prefetch", daemon=True
        )
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
        """The next step's batch, its wait `wait_s`'s and a profiler trace's `input_wait`."""
        with jax.profiler.TraceAnnotation(INPUT_WAIT):
            start = self._clock()
            item = self._queue.get()
            self.wait_s += self._clock() - start
        if isinstance(item, BaseException):
            raise item
        if item is self._DONE:
            raise StopIteration
        return item

    def close(self) -> None:
        """Stops the thread, then whatever make_batch holds (worker processes); once."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        close = getattr(self._make_batch, "close", None)
        if close is not None:
            close()
