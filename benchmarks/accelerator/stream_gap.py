"""Where STREAM's GPU figures lose against the memory's ceiling: the engine's kernels as it times
them (one host-timed, synchronised call each, as BabelStream times), the same kernels called many
times back to back with one synchronisation (dispatch hidden behind the device's work), and
CuPy's kernels timed with CUDA events (the baseline, measured in the same run), at several array
sizes.

    python benchmarks/accelerator/stream_gap.py [--mib=256,1024,4096] [--times=30] [--reps=20]

Prints one row per size and kernel: GB/s of each way, and the engine's and the enqueued calls'
ratios against CuPy's (what per-call dispatch and synchronisation cost, and what XLA's kernel
costs against CuPy's). Why this exists, and the figures: `docs/stream.md`, What this means on
GPUs.
"""

from __future__ import annotations

import argparse
import os
import time

# JAX takes memory as it needs it, leaving room for CuPy's arrays beside its own.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from hpcai_jax.stream import measure_bandwidth  # noqa: E402
from hpcai_jax.stream.config import StreamConfig  # noqa: E402

SCALAR = 0.4
# BabelStream's arrays touched per kernel: bytes moved = this x array bytes.
ARRAYS = {"copy": 2, "mul": 2, "add": 3, "triad": 3}


def engine_rates(mib: float, times: int) -> dict[str, float]:
    """The engine's best rate per kernel (GB/s), as --mode=stream measures it."""
    config = StreamConfig(
        array_mib=mib, num_times=times, precision="float64", kernels="all", devices="one"
    )
    config.validate()
    result = measure_bandwidth(config)
    return {f.key: f.bytes_per_s / 1e9 for f in result.figures}


def enqueued_rates(mib: float, reps: int) -> dict[str, float]:
    """Each kernel called `reps` times back to back with one synchronisation at the end (GB/s):
    the device's time per kernel once dispatch overlaps the previous call's work."""
    n = int(mib * 2**20) // 8
    a = jnp.full((n,), 0.1, jnp.float64)
    b = jnp.full((n,), 0.2, jnp.float64)
    c = jnp.zeros((n,), jnp.float64)
    kernels = {  # (function of the inputs, which argument is the donated output)
        "copy": (lambda a, c: jnp.copy(a), ("a", "c")),
        "mul": (lambda c, b: SCALAR * c, ("c", "b")),
        "add": (lambda a, b, c: a + b, ("a", "b", "c")),
        "triad": (lambda b, c, a: b + SCALAR * c, ("b", "c", "a")),
    }
    arrays = {"a": a, "b": b, "c": c}
    rates = {}
    for key, (fn, names) in kernels.items():
        call = jax.jit(fn, donate_argnums=len(names) - 1)
        out = names[-1]
        arrays[out] = jax.block_until_ready(call(*(arrays[k] for k in names)))  # compile
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(reps):
                arrays[out] = call(*(arrays[k] for k in names))
            jax.block_until_ready(arrays[out])
            best = min(best, (time.perf_counter() - start) / reps)
        rates[key] = ARRAYS[key] * n * 8 / best / 1e9
    return rates


def cupy_rates(mib: float, times: int) -> dict[str, float] | str:
    """CuPy's four kernels, each timed with CUDA events, best of `times` (GB/s); or why not."""
    try:
        import cupy as cp
    except ImportError as e:
        return f"no CuPy: {e}"
    n = int(mib * 2**20) // 8
    a = cp.full((n,), 0.1, cp.float64)
    b = cp.full((n,), 0.2, cp.float64)
    c = cp.zeros((n,), cp.float64)
    triad = cp.ElementwiseKernel("T b, T c, T s", "T a", "a = b + s * c", "stream_triad")
    ops = {
        "copy": lambda: cp.copyto(c, a),
        "mul": lambda: cp.multiply(c, SCALAR, out=b),
        "add": lambda: cp.add(a, b, out=c),
        "triad": lambda: triad(b, c, SCALAR, a),
    }
    start, end = cp.cuda.Event(), cp.cuda.Event()
    rates = {}
    for key, op in ops.items():
        op()  # compile and warm up
        best = float("inf")
        for _ in range(times):
            start.record()
            op()
            end.record()
            end.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3)
        rates[key] = ARRAYS[key] * n * 8 / best / 1e9
    return rates


def _free_cupy() -> None:
    try:
        import cupy as cp
    except ImportError:
        return
    cp.get_default_memory_pool().free_all_blocks()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", default="256,1024,4096", help="MiB per array, comma-separated")
    parser.add_argument("--times", type=int, default=30)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    device = jax.devices()[0]
    print(f"stream_gap: {device.device_kind} ({jax.default_backend()}), float64")
    print(
        f"{'MiB':>6} {'kernel':<6} {'engine':>8} {'enqueued':>9} {'CuPy':>8}"
        f" {'engine/CuPy':>12} {'enqueued/CuPy':>14}   (GB/s)"
    )
    for mib in (float(m) for m in args.mib.split(",")):
        engine = engine_rates(mib, args.times)
        enqueued = enqueued_rates(mib, args.reps)
        baseline = cupy_rates(mib, args.times)
        _free_cupy()
        for key in ARRAYS:
            base = baseline.get(key) if isinstance(baseline, dict) else None
            cells = [f"{engine[key]:8.0f}", f"{enqueued[key]:9.0f}"]
            if base:
                cells += [
                    f"{base:8.0f}",
                    f"{engine[key] / base:12.3f}",
                    f"{enqueued[key] / base:14.3f}",
                ]
            else:
                cells += [f"{'-':>8}", f"{'-':>12}", f"{'-':>14}"]
            print(f"{mib:6.0f} {key:<6} " + " ".join(cells))
        if isinstance(baseline, str):
            print(f"{mib:6.0f} baseline unavailable: {baseline}")


if __name__ == "__main__":
    main()
