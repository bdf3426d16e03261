"""The same machine code under two runtimes: where a JAX STREAM kernel loses to a C loop on a
CPU, is it the code XLA generates, or how XLA's runtime runs it?

    python benchmarks/stream_runtime.py                  # 2^25 doubles, 30 calls x 4 rounds
    python benchmarks/stream_runtime.py --kernels=copy,mul --rounds=6

XLA's own machine code for each kernel, taken from its dump and run on OpenMP threads, splits the
gap between the engine's call and gcc's loop into code and runtime. The contenders, the ratios
and the figures: `docs/stream.md`, Why each kernel is where it is (CPU). libgomp is loaded after
JAX has started its threads, or OMP_PROC_BIND would pin every XLA thread to one core.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = {"copy": 2, "mul": 2, "add": 3, "triad": 3}
# BabelStream's loops over the three arrays, by kernel: the C contender.
GCC_LOOPS = {
    "copy": "c[i] = a[i];",
    "mul": "b[i] = 0.4 * c[i];",
    "add": "c[i] = a[i] + b[i];",
    "triad": "a[i] = b[i] + 0.4 * c[i];",
}
DRIVER = r"""
#include <omp.h>
#include <stdint.h>
typedef struct { uint64_t x, y, z; } Dim;
typedef struct { void* data; uint64_t size; } Arg;
typedef struct { Dim* dims; Dim* thread; uint64_t nargs; Arg* args; } Frame;
"""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--array_size", type=int, default=1 << 25, help="float64 elements per array")
    p.add_argument("--calls", type=int, default=30, help="calls per contender per round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--kernels", default="copy,mul,add,triad", help="comma-separated")
    args = p.parse_args(argv)
    args.kernels = args.kernels.split(",")
    unknown = [k for k in args.kernels if k not in WEIGHTS]
    if unknown:
        p.error(f"--kernels: unknown {unknown}; expected some of {', '.join(WEIGHTS)}")
    return args


def _loop(dump: Path, module: str) -> tuple[str, list[str], int]:
    """The kernel's loop function name, its operands (parameter names a/b/c, in order) and its
    partition count, from XLA's optimized HLO."""
    text = next(dump.glob(f"*{module}.cpu_after_optimizations.txt")).read_text()
    entry = text[text.index("ENTRY") :]
    root = next(line for line in entry.splitlines() if "ROOT" in line)
    # One loop fusion, or (Add, compiled without the fusion emitters) one elemental instruction
    # with its own loop kernel: either way one function over the parameters.
    match = re.search(r"ROOT %([\w.\-]+) = \S+ (fusion|add|multiply)\(([^)]*)\)", root)
    if match is None:
        raise SystemExit(f"stream_runtime: {module}: the kernel is not one loop: {root}")
    operands = [o.strip().lstrip("%").split(".")[0] for o in match.group(3).split(",")]
    parts = re.search(r'"outer_dimension_partitions":\["(\d+)"\]', root)
    return match.group(1), operands, int(parts.group(1)) if parts else 1


def _object(dump: Path, module: str) -> tuple[Path, str]:
    obj = next(dump.glob(f"*{module}.obj-file.*.o"))
    symbols = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    name = next(line.split()[-1] for line in symbols.splitlines() if " T " in line)
    return obj, name


def build(tmp: Path, dump: Path, kernels: list[str], n: int) -> tuple[ctypes.CDLL, dict]:
    """The C library: xla_<k> (XLA's code on OpenMP threads) and gcc_<k> for every kernel."""
    source, objects, layout = [DRIVER, f"#define N {n}L"], [], {}
    for k in kernels:
        _, operands, parts = _loop(dump, f"jit__{k}")
        obj, name = _object(dump, f"jit__{k}")
        objects.append(obj)
        layout[k] = (operands, parts)
        args = ", ".join(f"{{{op}, N * 8}}" for op in operands)
        source.append(
            f'extern void* xla_code_{k}(Frame*) __asm__("\\"{name}\\"");\n'
            f"void xla_{k}(double* a, double* b, double* c, double* out) {{\n"
            f"  Dim dims = {{{parts}, 1, 1}};\n"
            f"  #pragma omp parallel num_threads({parts})\n"
            f"  {{ Dim t = {{omp_get_thread_num(), 0, 0}}; Arg args[] = {{{args}, {{out, N * 8}}}};\n"
            f"    Frame f = {{&dims, &t, {len(operands) + 1}, args}}; xla_code_{k}(&f); }}\n}}\n"
            f"void gcc_{k}(double* restrict a, double* restrict b, double* restrict c) {{\n"
            f"  #pragma omp parallel for schedule(static)\n"
            f"  for (long i = 0; i < N; i++) {GCC_LOOPS[k]}\n}}\n"
        )
    src, lib = tmp / "runtime.c", tmp / "libruntime.so"
    src.write_text("\n".join(source))
    cmd = ["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src)]
    built = subprocess.run(
        [*cmd, *map(str, objects), "-o", str(lib)], capture_output=True, text=True
    )
    if built.returncode:
        raise SystemExit(f"stream_runtime: the C library did not build:\n{built.stderr[-2000:]}")
    return ctypes.CDLL(str(lib)), layout


def main(argv=None) -> int:
    args = parse_args(argv)
    if shutil.which("gcc") is None or shutil.which("nm") is None:
        print("stream_runtime: skipped: needs gcc and nm")
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
    os.environ.setdefault("OMP_PROC_BIND", "true")
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}"
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax

        sys.path.insert(0, str(ROOT))
        from hpcai_jax.stream.kernels import KERNELS, compile_kernel
        from hpcai_jax.stream.layout import init_arrays
        from hpcai_jax.stream.placement import make_placement

        with jax.enable_x64(True):
            placement = make_placement("one")
            dtype = jax.numpy.float64
            compiled = {
                k: compile_kernel(KERNELS[k], placement, args.array_size, dtype)
                for k in args.kernels
            }
            arrays, _ = init_arrays(placement, args.array_size, dtype, spaced=True)
            lib, layout = build(Path(tmp), dump, args.kernels, args.array_size)
            print(
                f"# {args.array_size} doubles per array, {args.calls} calls x {args.rounds} "
                f"rounds, jax {jax.__version__}, OMP_PROC_BIND={os.environ['OMP_PROC_BIND']}, "
                f"{os.cpu_count()} cores; partitions: "
                + ", ".join(f"{k} {parts}" for k, (_, parts) in layout.items()),
                flush=True,
            )
            ratios = run_rounds(args, compiled, arrays, lib)
    print(summary(ratios))
    return 0


def run_rounds(args, compiled, arrays, lib) -> dict[str, dict[str, list[float]]]:
    """Every round, every kernel: the three contenders call by call, rotating who goes first."""

    def pointers():
        return [ctypes.c_void_p(arrays[x].unsafe_buffer_pointer()) for x in "abc"]

    def jax_call(k):
        kernel = compiled[k]
        out = kernel(arrays["a"], arrays["b"], arrays["c"])
        out.block_until_ready()
        arrays[kernel.spec.writes] = out

    def xla_call(k):
        a, b, c = pointers()
        getattr(lib, f"xla_{k}")(a, b, c, {"a": a, "b": b, "c": c}[compiled[k].spec.writes])

    def gcc_call(k):
        getattr(lib, f"gcc_{k}")(*pointers())

    contenders = {"jax": jax_call, "xla_omp": xla_call, "gcc_omp": gcc_call}
    ratios = {k: {"jax": [], "xla_omp": []} for k in args.kernels}
    for r in range(args.rounds):
        line = []
        for k in args.kernels:
            times = {name: [] for name in contenders}
            names = list(contenders)
            for i in range(args.calls):
                for name in names[i % 3 :] + names[: i % 3]:
                    start = time.perf_counter()
                    contenders[name](k)
                    times[name].append(time.perf_counter() - start)
            rate = {
                n: WEIGHTS[k] * args.array_size * 8 / min(t[1:]) / 1e9 for n, t in times.items()
            }
            for name in ("jax", "xla_omp"):
                ratios[k][name].append(rate[name] / rate["gcc_omp"])
            line.append(
                f"{k} jax {rate['jax']:.1f} xla_omp {rate['xla_omp']:.1f} "
                f"gcc_omp {rate['gcc_omp']:.1f}"
            )
        print(f"round {r}: " + " | ".join(line) + "  (GB/s)", flush=True)
    return ratios


def summary(ratios: dict[str, dict[str, list[float]]]) -> str:
    lines = [
        "",
        "| kernel | jax / gcc_omp, median (range) | xla_omp / gcc_omp, median (range) |",
        "| --- | --- | --- |",
    ]
    for k, per in ratios.items():
        cells = [
            f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"
            for v in (per["jax"], per["xla_omp"])
        ]
        lines.append(f"| {k} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
