"""Training reads in grain worker processes: every local device block of every step, in order.

Each grain element is one device block of one step and a pure function of (step, block), so any
number of workers, a restarted worker and a resumed run all read what the training process alone
would. The element order, restarts and shared memory: `docs/input.md` (The worker pipeline;
Faults in the input path).

This module must not import jax: grain's spawned workers unpickle what it defines.
"""

from __future__ import annotations

import atexit
import dataclasses
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from typing import Protocol

import numpy as np
from absl import logging

from hpcai_jax.data.bad_examples import BAD
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.errors import UsageError

Block = tuple[tuple[int, int], tuple[int, int]]  # ((first member, end), (first row, end))
# ~500-600 images/s per core (benchmarks/input_pipeline.py): 16 feed more than the several
# thousand images/s one GPU trains ResNet-50 at; more per device would only hold memory.
_MAX_AUTO_WORKERS_PER_DEVICE = 16
_ORPHAN_POLL_S = 1.0  # how often a worker not started by multiprocessing checks its parent


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


def leave_stops_to_the_trainer(worker_index: int, worker_count: int) -> None:
    """Run in each worker as it starts. A scheduler's preemption (SLURM's SIGTERM) and a
    terminal's Ctrl-C reach every process of the job, the workers too; they are the training
    process's to act on (it stops at a step boundary, saves, then closes its workers, which
    grain stops without signals). A worker that took them would die and be restarted for
    nothing in the seconds before the stop. One whose training process is gone ends, on such a
    signal or at once by itself: a trainer killed outright (SIGKILL, the OOM killer) left its
    workers asleep for good, holding their memory and shared-memory blocks, wherever no cgroup
    reaps a job's processes. The trainer's end shows on the pipe multiprocessing keeps from it
    to each child it starts (whatever the start method), not on Linux's PR_SET_PDEATHSIG,
    which follows the trainer's thread that started the worker and may fire long before."""
    trainer = multiprocessing.parent_process()
    if trainer is not None:
        gone, wait = (lambda: not trainer.is_alive()), trainer.join
    else:  # started some other way: its parent at start is its trainer
        ppid = os.getppid()

        def gone():
            return os.getppid() != ppid

        def wait():
            while not gone():
                time.sleep(_ORPHAN_POLL_S)

    def stop(signum, frame):
        if gone():
            os._exit(128 + signum)

    def watch():
        wait()
        # Not while the main thread creates a shared-memory block: between its shm_open and
        # its registration with the resource tracker, the block would be nobody's to unlink
        # (a test's block outlived the run so). What is left is the few bytecodes from this
        # check to the exit, in which the main thread could start one.
        while _in_shared_memory(main):
            time.sleep(0.01)
        os._exit(128 + signal.SIGTERM)

    main = threading.main_thread().ident

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    threading.Thread(target=watch, name="trainer-watch", daemon=True).start()


def _in_shared_memory(thread: int) -> bool:
    """Whether that thread is inside multiprocessing.shared_memory (creating a block)."""
    frame = sys._current_frames().get(thread)
    while frame is not None:
        if frame.f_code.co_filename.endswith("shared_memory.py"):
            return True
        frame = frame.f_back
    return False


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
        arrays = dict(self.reader(indices.reshape(-1), keys.reshape(-1, 4)))
        bad = arrays.pop(BAD, [])
        fields = {name: a.reshape(*indices.shape, *a.shape[1:]) for name, a in arrays.items()}
        return {**fields, BAD: bad}


class WorkerDied(UsageError):
    """A data worker died more often than --worker_restarts allows: one line, exit code 1."""

    exit_code = 1


# grain 0.2's message for a worker process that ended without reporting an error (a signal).
_DEATH = re.compile(r"Worker process was terminated unexpectedly with exit code (-?\d+)")


def _death(error: BaseException) -> str | None:
    """'SIGKILL' (or 'exit code 3') where `error` is grain's report of a dead worker, else None."""
    match = _DEATH.search(str(error))
    if match is None:
        return None
    code = int(match.group(1))
    try:
        return signal.Signals(-code).name if code < 0 else f"exit code {code}"
    except ValueError:
        return f"signal {-code}"


def _detach(element: dict) -> dict:
    """The element's arrays as ordinary ones, their shared-memory blocks unlinked now."""
    out = {}
    for name, value in element.items():
        shm = getattr(value, "shm", None)
        if shm is None:
            out[name] = value
            continue
        out[name] = np.array(value)  # a copy in this process's memory
        # grain's SharedMemoryArray unlinks on deletion, from a thread pool, where this flag is
        # set: the block is unlinked here instead, and its deletion only closes the mapping.
        value._unlink_on_del = False
        shm.unlink()
    return out


class BlockStream:
    """The local blocks of steps [first, last), step after step, made by `workers` processes
    (0: in this process, for debugging). Asking for a step other than the next one restarts
    the workers there, so any first step works (resume); a worker that dies is replaced the
    same way, at the element it owed, up to `restarts` times."""

    def __init__(self, read: ReadBlock, last: int, workers: int, restarts: int = 3):
        self._read, self._last, self._workers = read, last, workers
        self._restarts_left = restarts
        self._iterator = None
        self._first = 0  # the element the open stream started at
        self._element: int | None = None  # the element it delivers next

    def _open(self, first: int) -> None:
        """Starts the workers at element `first`."""
        import grain  # only where worker reads are used
        from absl import flags

        if not flags.FLAGS.is_parsed():
            # grain reads this absl flag where JAX is loaded, and raises when the program did not
            # parse flags (a library user, pytest; google/grain#1355): its default, explicitly.
            flags.FLAGS["grain_enable_multiprocess_worker_profiling"].present = True
        self.close()
        n = len(self._read.blocks)
        dataset = grain.MapDataset.range(first, self._last * n).map(self._read)
        # No reader threads inside a worker: the workers are the parallelism, and a thread
        # pool's 500-element read-ahead would hold hundreds of blocks per worker.
        iterable = dataset.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        self._iterator = iter(
            iterable.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=self._workers),
                worker_init_fn=leave_stops_to_the_trainer,
            )
        )
        # A process that exits with the stream open stops its workers here, as `close` does,
        # before multiprocessing's exit hooks (atexit runs the latest first): grain's finalizer
        # would stop them too, but leave the blocks in flight to the resource tracker.
        atexit.register(self.close)
        self._first = self._element = first

    def _next_element(self) -> dict[str, np.ndarray]:
        while True:
            try:
                element = next(self._iterator)
                break
            except RuntimeError as e:
                how = _death(e)
                if how is None:
                    raise
                worker = (self._element - self._first) % self._workers
                if self._restarts_left == 0:
                    self.close()
                    raise WorkerDied(
                        f"data worker {worker} of {self._workers} died ({how}) with no "
                        "--worker_restarts left"
                    ) from None
                self._restarts_left -= 1
                logging.warning(
                    "data worker %d died (%s): the workers restart at element %d (%d restarts "
                    "left)",
                    worker,
                    how,
                    self._element,
                    self._restarts_left,
                )
                self._open(self._element)
        self._element += 1
        return _detach(element)

    def step(self, step: int) -> dict[Block, dict[str, np.ndarray]]:
        """Every local block of `step`, keyed by its bounds; each block's fields hold, under
        `bad_examples.BAD`, the records its reader replaced."""
        blocks = self._read.blocks
        n = len(blocks)
        if self._workers == 0:
            return {b: self._read(step * n + i) for i, b in enumerate(blocks)}
        if step * n != self._element:
            self._open(step * n)
        return {b: self._next_element() for b in blocks}

    def close(self) -> None:
        """Stops the workers (idempotent)."""
        atexit.unregister(self.close)
        if self._iterator is not None:
            self._iterator.close()
        self._iterator, self._element = None, None
