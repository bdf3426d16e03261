"""How far apart STREAM's arrays sit, and what it costs: the engine's kernels on arrays set apart
by spacers (what `--mode=stream` does on CPUs) against the same kernels on arrays packed as
glibc maps them (4 KiB apart beyond their size), in one process, call by call.

    python benchmarks/stream_layout.py                 # 2^24 doubles, 6 rounds x 20 calls
    python benchmarks/stream_layout.py --c_loops       # the same question asked of gcc's loops

Each round is a fresh process (fresh pages), which makes both sets of arrays and then calls
every kernel on each in turn; rounds alternate which set is made first. The packed set gets
no spacers, and the holes the spaced set's freed spacers leave are filled first, so that it
stays packed; every round prints both sets' smallest gap, measured. The figure is spaced /
packed per kernel (fastest call each, BabelStream's figure), median and range over rounds.
`--c_loops` runs BabelStream's OpenMP loops (gcc -O3 -march=native -fopenmp) instead, on
arrays carved from one mapping at gaps of 4 KiB (JAX's), 16 KiB, 2 MiB (about BabelStream's)
and one array, rotating which is made first; ratios against 4 KiB. docs/stream.md, Arrays set
apart, has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ("copy", "mul", "add", "triad")
WEIGHTS = {"copy": 2, "mul": 2, "add": 3, "triad": 3}
C_GAPS_KIB = (4, 16, 2048)  # and one array's size, added at run time
C_PROGRAM = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
typedef struct { double *a, *b, *c; } Set;
int main(int argc, char** argv) {
  long n = atol(argv[1]); int calls = atoi(argv[2]), rot = atoi(argv[3]), ns = argc - 4;
  Set s[16]; long gap[16];
  for (int q = 0; q < ns; q++) {
    int k = (q + rot) % ns; gap[k] = atol(argv[4 + k]);
    size_t stride = n * 8 + gap[k];
    char* m = mmap(NULL, 3 * stride + (4 << 20), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* base = (char*)(((unsigned long)m + (2 << 20) - 1) & ~((2UL << 20) - 1)) + 64;
    s[k].c = (double*)base; s[k].b = (double*)(base + stride); s[k].a = (double*)(base + 2 * stride);
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) { s[k].a[i] = 0.1; s[k].b[i] = 0.2; s[k].c[i] = 0.0; }
  }
  for (int j = 0; j < 4; j++) {
    double best[16];
    for (int k = 0; k < ns; k++) best[k] = 1e30;
    for (int i = 0; i < calls; i++)
      for (int q = 0; q < ns; q++) {
        int k = (q + i) % ns;
        double* restrict a = s[k].a; double* restrict b = s[k].b; double* restrict c = s[k].c;
        double t = omp_get_wtime();
        if (j == 0) {
          #pragma omp parallel for schedule(static)
          for (long x = 0; x < n; x++) c[x] = a[x];
        } else if (j == 1) {
          #pragma omp parallel for schedule(static)
          for (long x = 0; x < n; x++) b[x] = 0.4 * c[x];
        } else if (j == 2) {
          #pragma omp parallel for schedule(static)
          for (long x = 0; x < n; x++) c[x] = a[x] + b[x];
        } else {
          #pragma omp parallel for schedule(static)
          for (long x = 0; x < n; x++) a[x] = b[x] + 0.4 * c[x];
        }
        t = omp_get_wtime() - t;
        if (i && t < best[k]) best[k] = t;
      }
    for (int k = 0; k < ns; k++) printf("%d %ld %.9f\n", j, gap[k], best[k]);
  }
  return 0;
}
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--array_size", type=int, default=1 << 24, help="float64 elements per array")
    p.add_argument("--calls", type=int, default=20, help="calls per kernel per set per round")
    p.add_argument("--rounds", type=int, default=6, help="rounds, each a fresh process")
    p.add_argument("--c_loops", action="store_true", help="gcc's loops instead of the engine's")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)  # "spaced" or "packed" first
    return p.parse_args(argv)


def child(args) -> dict:
    """One round in this process: both sets made (`args.child` first), every kernel called on
    each in turn; {set: {kernel: seconds of the fastest call}, "gaps": {set: bytes}}."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(ROOT))
    from hpcai_jax.stream.kernels import KERNELS as SPECS
    from hpcai_jax.stream.kernels import compile_kernel
    from hpcai_jax.stream.layout import init_arrays, smallest_gap
    from hpcai_jax.stream.placement import make_placement

    with jax.enable_x64(True):
        placement, n = make_placement("one"), args.array_size
        compiled = {k: compile_kernel(SPECS[k], placement, n, jnp.float64) for k in KERNELS}
        order = ["spaced", "packed"] if args.child == "spaced" else ["packed", "spaced"]
        sets, fillers = {}, []
        for name in order:
            sets[name], _ = init_arrays(placement, n, jnp.float64, spaced=name == "spaced")
            if name == "spaced":  # fill the holes its spacers left, or the packed set takes them
                fillers = [jnp.zeros(n, jnp.float64).block_until_ready() for _ in range(2)]
        best = {name: dict.fromkeys(KERNELS, float("inf")) for name in sets}
        for k in KERNELS:
            for i in range(args.calls):
                for name in order if i % 2 else order[::-1]:
                    arrays = sets[name]
                    start = time.perf_counter()
                    out = compiled[k](arrays["a"], arrays["b"], arrays["c"])
                    out.block_until_ready()
                    elapsed = time.perf_counter() - start
                    arrays[compiled[k].spec.writes] = out
                    if i:
                        best[name][k] = min(best[name][k], elapsed)
        del fillers
        best["gaps"] = {name: smallest_gap(arrays)[0] for name, arrays in sets.items()}
    return best


def run_jax(args) -> list[dict[str, float]]:
    ratios = []
    for r in range(args.rounds):
        first = "packed" if r % 2 == 0 else "spaced"
        argv = [sys.executable, __file__, f"--child={first}", f"--array_size={args.array_size}"]
        done = subprocess.run(
            [*argv, f"--calls={args.calls}"], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise SystemExit(f"stream_layout: round {r} failed:\n{done.stderr[-2000:]}")
        best = json.loads(done.stdout.strip().splitlines()[-1])
        ratios.append({k: best["packed"][k] / best["spaced"][k] for k in KERNELS})
        print(
            f"round {r} ({first} first; gaps: spaced {best['gaps']['spaced']} B, packed "
            f"{best['gaps']['packed']} B): "
            + ", ".join(
                f"{k} {WEIGHTS[k] * args.array_size * 8 / best['spaced'][k] / 1e9:.1f} / "
                f"{WEIGHTS[k] * args.array_size * 8 / best['packed'][k] / 1e9:.1f} GB/s"
                for k in KERNELS
            ),
            flush=True,
        )
    return ratios


def run_c(args) -> list[dict[str, float]]:
    if shutil.which("gcc") is None:
        raise SystemExit("stream_layout: --c_loops needs gcc")
    gaps = [g * 1024 for g in C_GAPS_KIB] + [args.array_size * 8]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
    env.setdefault("OMP_PROC_BIND", "true")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "layout.c", Path(tmp) / "layout"
        src.write_text(C_PROGRAM)
        subprocess.run(
            ["gcc", "-O3", "-march=native", "-fopenmp", str(src), "-o", str(exe)], check=True
        )
        for r in range(args.rounds):
            argv = [str(exe), str(args.array_size), str(args.calls), str(r % len(gaps))]
            out = subprocess.run(
                [*argv, *map(str, gaps)], capture_output=True, text=True, check=True, env=env
            ).stdout
            best = {}
            for line in out.split("\n"):
                if line:
                    j, gap, seconds = line.split()
                    best[(KERNELS[int(j)], int(gap))] = float(seconds)
            ratios.append(
                {
                    f"{k} gap {g}": best[(k, gaps[0])] / best[(k, g)]
                    for k in KERNELS
                    for g in gaps[1:]
                }
            )
            print(
                f"round {r}: "
                + ", ".join(f"{key} {v:.3f}" for key, v in ratios[-1].items())
                + f"  (against a gap of {gaps[0]} B)",
                flush=True,
            )
    return ratios


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    print(
        f"# {args.array_size} doubles per array, {args.rounds} rounds x {args.calls} calls, "
        f"{os.cpu_count()} cores, {'gcc loops' if args.c_loops else 'the engine kernels'}",
        flush=True,
    )
    ratios = run_c(args) if args.c_loops else run_jax(args)
    what = "faster than at a 4 KiB gap" if args.c_loops else "spaced / packed"
    print(f"\n| {'case' if args.c_loops else 'kernel'} | {what}, median (range) |\n| --- | --- |")
    for key in ratios[0]:
        values = [r[key] for r in ratios]
        print(f"| {key} | {statistics.median(values):.3f} ({min(values):.2f}–{max(values):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
