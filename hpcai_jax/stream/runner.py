"""Times the kernels as BabelStream does: every sample blocking, on a monotonic clock.

`num_times` iterations of the run order; each kernel is timed on its own, from dispatch to
`block_until_ready`, over a burst of `burst` calls back to back (the sample is the burst's time
over its calls; 1 is BabelStream's one call). Every kernel of the run orders but Nstream
rewrites its output from inputs it does not change, so a burst leaves the arrays as one call
does; Nstream applies itself `burst` times (validation replays that). The first iteration is kept in the raw times but excluded from the
statistics (report.py). When the arrays span several processes, every call starts behind a
barrier (sync.py), so the processes' calls overlap in time, and afterwards a call's time is the
slowest process's, because the job has done the call only when every process has.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from hpcai_jax.distributed import allgather
from hpcai_jax.stream.kernels import ARRAY_NAMES, CompiledKernel


@dataclasses.dataclass(frozen=True)
class RunResult:
    times_s: dict[str, np.ndarray]  # kernel key -> seconds of each call, first iteration included
    # kernel key -> when each call started, this process's monotonic clock (perf_counter): on one
    # host, comparable across processes, which shows whether their calls overlapped
    starts_s: dict[str, np.ndarray]
    arrays: dict[str, jax.Array]  # a, b, c after the run
    dot_sum: jax.Array | None  # Dot's last result, for validation
    buffer_reused: dict[str, bool | None]  # kernel key -> the output took the donated buffer


def _buffer_pointers(array: jax.Array) -> tuple[int, ...] | None:
    """Device addresses of this process's shards; None where the backend does not expose them."""
    try:
        return tuple(s.data.unsafe_buffer_pointer() for s in array.addressable_shards)
    except Exception:  # noqa: BLE001 - not every backend/array kind supports it
        return None


def run_kernels(
    kernels: Sequence[CompiledKernel],
    arrays: dict[str, jax.Array],
    num_times: int,
    barrier: Callable[[], None] | None = None,
    burst: int = 1,
) -> RunResult:
    """Runs `num_times` iterations of `kernels` in order over (a, b, c), timing every kernel's
    burst of `burst` calls; a sample is the burst's seconds over `burst`.

    `barrier`: for arrays that span several processes (`sync.call_barrier`): called before every
    call, outside its timing, so that all processes start it together; a call's time is then the
    slowest process's (a collective at the end). None: this process's devices only.

    On the first iteration (excluded from the statistics anyway) the donated input's buffer
    addresses are compared with the output's: equal addresses prove that the call wrote in
    place and allocated nothing.
    """
    arrays = dict(arrays)
    times = {k.spec.key: np.zeros(num_times) for k in kernels}
    starts = {k.spec.key: np.zeros(num_times) for k in kernels}
    reused: dict[str, bool | None] = {k.spec.key: None for k in kernels}
    dot_sum = None
    for iteration in range(num_times):
        for kernel in kernels:
            a, b, c = (arrays[name] for name in ARRAY_NAMES)
            donated = None
            if iteration == 0 and kernel.donate_index is not None:
                donated = _buffer_pointers((a, b, c)[kernel.donate_index])
            if barrier is not None:
                barrier()
            start = time.perf_counter()
            out = kernel(a, b, c)
            for _ in range(burst - 1):  # each call takes the last one's output, donated
                if kernel.spec.writes is not None:
                    arrays[kernel.spec.writes] = out
                out = kernel(*(arrays[name] for name in ARRAY_NAMES))
            out.block_until_ready()
            times[kernel.spec.key][iteration] = (time.perf_counter() - start) / burst
            starts[kernel.spec.key][iteration] = start
            if kernel.spec.writes is None:
                dot_sum = out
            else:
                arrays[kernel.spec.writes] = out
                if iteration == 0 and donated is not None:
                    after = _buffer_pointers(out)
                    reused[kernel.spec.key] = None if after is None else after == donated
    if barrier is not None:
        times = _slowest_process(times)
    return RunResult(
        times_s=times, starts_s=starts, arrays=arrays, dot_sum=dot_sum, buffer_reused=reused
    )


def _slowest_process(times: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per call, the maximum over processes (identity in a single-process run)."""
    if jax.process_count() == 1:
        return times
    keys = sorted(times)
    # float32 keeps the all-gather free of x64 concerns; 1e-7 relative is far below timer noise.
    gathered = allgather(np.stack([times[k] for k in keys]).astype(np.float32))  # [P, K, T]
    slowest = gathered.max(axis=0)
    return {k: slowest[i] for i, k in enumerate(keys)}
