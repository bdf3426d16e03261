"""The open files a run's tfds readers hold, and the per-process limit that must allow them.

array_record keeps every shard a process has read from open, so a process reading ImageNet
holds about 1,024 files, past the common soft limit of 1,024: the limit is raised before the
data workers start (they inherit it), or the run ends naming what it needs. The rule, the
figures behind it and how array_record keeps its files: `docs/reliability.md`, Data at scale.
Pure Python: the node check imports it too.
"""

from __future__ import annotations

import math
import os
import resource

from hpcai_jax.errors import UsageError

# What a training process holds besides its shards: the accelerator runtime's devices and
# sockets, logs, checkpoint writes in flight.
BASE = 512
# What it holds for each data worker: pipes, queues, shared-memory blocks (twice what was
# measured: docs/reliability.md).
PER_WORKER = 16


def files_needed(train_shards: int, eval_shards: int, workers: int = -1) -> int:
    """Open files the most demanding process of a tfds run needs: the training process reads
    both splits (the out-of-bag estimate reads training examples, evaluation the held-out
    ones), and with `workers` = 0 (--data_workers=0) the training reads too, through a second
    reader of the training split; each worker reads the training split only. -1 workers (the
    default) counts one per core this process may use, what the default never exceeds."""
    count = workers if workers >= 0 else _cores()
    return train_shards * (2 if workers == 0 else 1) + eval_shards + BASE + PER_WORKER * count


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def open_file_limits() -> tuple[float, float]:
    """This process's (soft, hard) limit on open files (RLIMIT_NOFILE); math.inf: unlimited."""
    return tuple(math.inf if v == resource.RLIM_INFINITY else v for v in _raw_limits())


def _raw_limits() -> tuple[int, int]:
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def ensure_open_file_limit(needed: int, what: str) -> float:
    """Raises the soft limit to `needed` where it is lower (processes started afterwards, the
    data workers, inherit it); the soft limit now. UsageError naming `what` needs them, the
    hard limit and how to raise it, when the hard limit is lower than `needed`."""
    soft, hard = open_file_limits()
    if soft >= needed:
        return soft
    if hard < needed:
        raise UsageError(
            f"{what} keeps up to {needed} files open in one process, but the hard limit on "
            f"open files is {hard:.0f} (ulimit -Hn): raise it to at least {needed} (nofile in "
            "/etc/security/limits.conf; under SLURM, LimitNOFILE= of the slurmd service)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, _raw_limits()[1]))
    return needed
