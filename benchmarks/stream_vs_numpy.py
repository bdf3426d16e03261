"""JAX STREAM against numpy's best in-place equivalents and a BabelStream-like C/OpenMP build,
measured in one run, on the same array sizes, call by call.

    python benchmarks/stream_vs_numpy.py                       # 2^25 doubles, 100 iterations
    python benchmarks/stream_vs_numpy.py --host_devices=2 --stream_devices=all
    python benchmarks/stream_vs_numpy.py --xla_flags=--xla_cpu_multi_thread_eigen=false

On a shared machine contenders measured one after another are not comparable, so here they take
turns call by call. The contenders, how each is timed, and the figures: `docs/stream.md`,
Against numpy and a BabelStream-like C build, in one process.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

C_SOURCE = r"""
#include <stdlib.h>
static double *a, *b, *c; static long n; static const double s = 0.4;
int stream_init(long size) {
  size_t bytes = ((size * sizeof(double) + (2 << 20) - 1) / (2 << 20)) * (2 << 20);
  n = size; a = aligned_alloc(2 << 20, bytes); b = aligned_alloc(2 << 20, bytes);
  c = aligned_alloc(2 << 20, bytes);
  if (!a || !b || !c) return 1;
  #pragma omp parallel for
  for (long i = 0; i < n; i++) { a[i] = 0.1; b[i] = 0.2; c[i] = 0.0; }
  return 0;
}
void stream_copy(void) {
  #pragma omp parallel for
  for (long i = 0; i < n; i++) c[i] = a[i];
}
void stream_mul(void) {
  #pragma omp parallel for
  for (long i = 0; i < n; i++) b[i] = s * c[i];
}
void stream_add(void) {
  #pragma omp parallel for
  for (long i = 0; i < n; i++) c[i] = a[i] + b[i];
}
void stream_triad(void) {
  #pragma omp parallel for
  for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
double stream_dot(void) {
  double sum = 0.0;
  #pragma omp parallel for reduction(+:sum)
  for (long i = 0; i < n; i++) sum += a[i] * b[i];
  return sum;
}
double stream_read(int which, long i) { return (which == 0 ? a : which == 1 ? b : c)[i]; }
void stream_free(void) { free(a); free(b); free(c); }
"""
KERNELS = ("copy", "mul", "add", "triad", "dot")
ROWS = (*KERNELS, "triad_avg")
WEIGHTS = {"copy": 2, "mul": 2, "add": 3, "triad": 3, "dot": 2}
SCALAR = 0.4


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--array_size", type=int, default=1 << 25, help="float64 elements per array")
    p.add_argument("--num_times", type=int, default=100, help="iterations per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--host_devices",
        type=int,
        default=0,
        help="CPU devices to force (--xla_force_host_platform_device_count); 0: leave",
    )
    p.add_argument("--stream_devices", default="one", choices=("one", "all"))
    p.add_argument("--xla_flags", default="", help="extra XLA_FLAGS for this run")
    p.add_argument("--no_c", action="store_true", help="skip the C/OpenMP baseline")
    p.add_argument("--no_loop", action="store_true", help="skip the fori_loop variant")
    p.add_argument("--json", default="", help="also write the figures to this file")
    return p.parse_args()


def too_large(args: argparse.Namespace) -> str:
    """Why the contenders' arrays, all held at once (three per contender, up to four contenders),
    would not fit in the host's MemAvailable; "" when they fit or the figure is unknown."""
    from hpcai_jax.stream.placement import mem_available_bytes

    contenders = 4 - args.no_c
    need = contenders * 3 * args.array_size * 8
    free = mem_available_bytes()
    if free is None or need <= free:
        return ""
    return (
        f"--array_size={args.array_size}: {contenders} contenders x 3 float64 arrays need "
        f"{need / 2**20:,.0f} MiB at once, more than the {free / 2**20:,.0f} MiB available "
        "(MemAvailable); give a smaller --array_size"
    )


def main() -> int:
    args = parse_args()
    flags = os.environ.get("XLA_FLAGS", "")
    if args.host_devices:
        flags += f" --xla_force_host_platform_device_count={args.host_devices}"
    os.environ["XLA_FLAGS"] = (flags + " " + args.xla_flags).strip()
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
    os.environ.setdefault("OMP_PROC_BIND", "true")
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

    import jax  # noqa: E402 - after XLA_FLAGS

    if problem := too_large(args):
        print(f"stream_vs_numpy: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        contenders = {"jax": JaxStream(args)}
        contenders["numpy"] = NumpyStream(args.array_size, blocked=False)
        contenders["numpy_blocked"] = NumpyStream(args.array_size, blocked=True)
        if not args.no_c and (lib := build_c(Path(tmp))) is not None:
            contenders["c_omp"] = CStream(lib, args.array_size)
        print(
            f"# {args.array_size} float64 elements per array "
            f"({args.array_size * 8 / 2**20:.0f} MiB), {args.num_times} iterations x "
            f"{args.rounds} rounds, jax {jax.__version__}, {len(jax.devices())} JAX device(s), "
            f"--stream_devices={args.stream_devices}, XLA_FLAGS={os.environ['XLA_FLAGS']!r}, "
            f"{os.cpu_count()} cores, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
        )
        rounds = []
        for r in range(args.rounds):
            figures = paired_round(contenders, args.num_times, args.array_size)
            if not args.no_loop:
                figures["jax_loop"] = {"triad_avg": contenders["jax"].loop_triad(args.num_times)}
            rounds.append(figures)
            print(
                f"round {r}: "
                + " | ".join(
                    f"{name} " + " ".join(f"{k}={v:.1f}" for k, v in fig.items())
                    for name, fig in figures.items()
                )
                + "  (GB/s)",
                flush=True,
            )
        failures = contenders["jax"].validate(args.num_times * args.rounds)
        for contender in contenders.values():
            contender.close()
    summary = summarize(rounds)
    print(summary["text"])
    if failures:
        print("JAX validation FAILED: " + "; ".join(failures))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"args": vars(args), "rounds": rounds, "ratios": summary["ratios"]}, indent=2
            )
        )
    return 1 if failures else 0


def paired_round(contenders: dict, num_times: int, n: int) -> dict[str, dict[str, float]]:
    """num_times iterations; per kernel, every contender's call in turn. GB/s from best calls."""
    names = list(contenders)
    times = {name: {k: [] for k in KERNELS if k in contenders[name].kernels} for name in names}
    for it in range(num_times):
        for kernel in KERNELS:
            shift = (it + KERNELS.index(kernel)) % len(names)
            for name in names[shift:] + names[:shift]:
                call = contenders[name].kernels.get(kernel)
                if call is None:
                    continue
                start = time.perf_counter()
                call()
                times[name][kernel].append(time.perf_counter() - start)
    figures = {
        name: {k: WEIGHTS[k] * n * 8 / min(ts[1:]) * 1e-9 for k, ts in per.items()}
        for name, per in times.items()
    }
    for name, per in times.items():  # the average call, to set beside jax_loop's average
        if "triad" in per:
            figures[name]["triad_avg"] = (
                3 * n * 8 / (sum(per["triad"][1:]) / (num_times - 1)) * 1e-9
            )
    return figures


class JaxStream:
    """The engine's kernels and arrays, called and blocked on as the engine's runner does."""

    def __init__(self, args):
        import jax

        from hpcai_jax.dtypes import dtype as jnp_dtype
        from hpcai_jax.stream.kernels import KERNELS as SPECS
        from hpcai_jax.stream.kernels import compile_kernel
        from hpcai_jax.stream.layout import init_arrays
        from hpcai_jax.stream.placement import make_placement

        self._x64 = jax.enable_x64(True)
        self._x64.__enter__()
        self.placement = make_placement(args.stream_devices)
        self.n = args.array_size
        dtype = jnp_dtype("float64")
        self.compiled = {
            k: compile_kernel(SPECS[k], self.placement, self.n, dtype) for k in KERNELS
        }
        self.arrays, _ = init_arrays(self.placement, self.n, dtype, spaced=True)
        self.dot_sum = None
        self.kernels = {k: (lambda k=k: self._call(k)) for k in KERNELS}

    def _call(self, key):
        kernel = self.compiled[key]
        out = kernel(self.arrays["a"], self.arrays["b"], self.arrays["c"])
        out.block_until_ready()
        if kernel.spec.writes is None:
            self.dot_sum = out
        else:
            self.arrays[kernel.spec.writes] = out

    def loop_triad(self, num_times: int) -> float:
        """Triad num_times over in one jitted fori_loop: average GB/s. The scalar is
        s * (1 + 1e-30 i), numerically s, but iteration-dependent so XLA cannot hoist the
        loop-invariant triad; the body stays one fused pass (3 arrays per iteration)."""
        import jax

        def loop(a, b, c):
            return jax.lax.fori_loop(
                0, num_times, lambda i, a: b + (SCALAR * (1.0 + 1e-30 * i)) * c, a
            )

        from hpcai_jax.stream.layout import init_arrays

        sharding = self.placement.sharded
        a, b, c = init_arrays(self.placement, self.n, self.arrays["a"].dtype, spaced=True)[
            0
        ].values()
        run = jax.jit(loop, donate_argnums=(0,), keep_unused=True, out_shardings=sharding)
        compiled = run.lower(a, b, c).compile()
        a = jax.block_until_ready(compiled(a, b, c))  # warm-up, as the first iteration
        start = time.perf_counter()
        a = jax.block_until_ready(compiled(a, b, c))
        seconds = time.perf_counter() - start
        del a, b, c
        return 3 * self.n * 8 * num_times / seconds * 1e-9

    def validate(self, iterations: int) -> list[str]:
        from hpcai_jax.stream.validate import validate

        result = validate(self.arrays, self.dot_sum, "all", iterations, "float64", self.placement)
        return result.failures()

    def close(self):
        self.arrays = None
        self._x64.__exit__(None, None, None)


class NumpyStream:
    BLOCK = 1 << 16

    def __init__(self, n: int, blocked: bool):
        import numpy as np

        self.np = np
        self.a, self.b, self.c = np.full(n, 0.1), np.full(n, 0.2), np.zeros(n)
        if blocked:
            self.kernels = {"triad": self._triad_blocked}
        else:
            self.kernels = {
                "copy": lambda: np.copyto(self.c, self.a),
                "mul": lambda: np.multiply(self.c, SCALAR, out=self.b),
                "add": lambda: np.add(self.a, self.b, out=self.c),
                "triad": self._triad,
                "dot": lambda: np.dot(self.a, self.b),
            }

    def _triad(self):
        self.np.multiply(self.c, SCALAR, out=self.a)
        self.np.add(self.a, self.b, out=self.a)

    def _triad_blocked(self):
        np, a, b, c = self.np, self.a, self.b, self.c
        for i in range(0, len(a), self.BLOCK):
            j = i + self.BLOCK
            np.multiply(c[i:j], SCALAR, out=a[i:j])
            np.add(a[i:j], b[i:j], out=a[i:j])

    def close(self):
        self.a = self.b = self.c = None


def build_c(tmp: Path) -> ctypes.CDLL | None:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        print("# no C compiler: skipping the C/OpenMP baseline")
        return None
    src, lib = tmp / "stream.c", tmp / "libstream.so"
    src.write_text(C_SOURCE)
    cmd = [
        compiler,
        "-O3",
        "-march=native",
        "-fopenmp",
        "-shared",
        "-fPIC",
        str(src),
        "-o",
        str(lib),
    ]
    built = subprocess.run(cmd, capture_output=True, text=True)
    if built.returncode:
        print(f"# C/OpenMP baseline did not build: {built.stderr.strip()}")
        return None
    print(
        f"# C/OpenMP baseline: {Path(compiler).name} -O3 -march=native -fopenmp; "
        f"OMP_PROC_BIND={os.environ['OMP_PROC_BIND']}, "
        f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
    )
    return ctypes.CDLL(str(lib))


class CStream:
    def __init__(self, lib: ctypes.CDLL, n: int):
        lib.stream_dot.restype = ctypes.c_double
        lib.stream_read.restype = ctypes.c_double
        lib.stream_read.argtypes = (ctypes.c_int, ctypes.c_long)
        if lib.stream_init(ctypes.c_long(n)):
            raise MemoryError("C baseline: aligned_alloc failed")
        self.lib = lib
        self.kernels = {k: getattr(lib, f"stream_{k}") for k in KERNELS}

    def close(self):
        self.lib.stream_free()


def summarize(rounds: list[dict]) -> dict:
    names = list(rounds[0])
    lines = ["", "best round, GB/s:", "".join(h.ljust(15) for h in ["kernel", *names])]
    for k in ROWS:
        cells = [max((r[n][k] for r in rounds if k in r[n]), default=None) for n in names]
        lines.append(
            "".join(s.ljust(15) for s in [k, *("-" if c is None else f"{c:.1f}" for c in cells)])
        )
    ratios = {}
    pairs = [
        ("jax", "c_omp", "triad"),
        ("jax", "c_omp", "copy"),
        ("jax", "numpy", "triad"),
        ("jax", "numpy_blocked", "triad"),
        ("jax", "numpy", "copy"),
        ("jax_loop", "jax", "triad_avg"),
    ]
    lines.append("")
    for num, den, k in pairs:
        if num not in names or den not in names:
            continue
        per_round = [r[num][k] / r[den][k] for r in rounds]
        ratios[f"{num}/{den} {k}"] = per_round
        lines.append(
            f"{num}/{den} {k}: " + ", ".join(f"{x:.2f}" for x in per_round) + "  (per round)"
        )
    return {"text": "\n".join(lines), "ratios": ratios}


if __name__ == "__main__":
    sys.exit(main())
