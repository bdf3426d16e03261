"""The engine's STREAM against BabelStream itself, run interleaved, per-kernel ratios with spread.

    python benchmarks/stream_vs_babelstream.py --babelstream=/path/to/omp-stream
    python benchmarks/stream_vs_babelstream.py --babelstream=/path/to/BabelStream  # builds it
    python benchmarks/stream_vs_babelstream.py --babelstream=... --pairs=7 --array_size=33554432

By default both run at NERSC-10's size on this host: the smallest power of two whose one array is
at least 4x the host's last-level caches (what `--mode=stream --array_size=auto` takes), checked
against free memory first. Where BabelStream's own validation fails at that size (its Dot
tolerance does not grow with N), the script says so and goes on at the largest size BabelStream
validates, both sides. Runs alternate in pairs so that both sides see the same load drift.
BabelStream is never downloaded: without --babelstream the script says so and exits 0. How a
pair runs, how the rates are recomputed, and the figures: `docs/stream.md`, Comparing with
BabelStream itself.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ("Copy", "Mul", "Add", "Triad", "Dot")
WEIGHTS = {"Copy": 2, "Mul": 2, "Add": 3, "Triad": 3, "Dot": 2, "Nstream": 4}
SKIP_MESSAGE = (
    "stream_vs_babelstream: skipped: no BabelStream given. Pass --babelstream=PATH, a built "
    "omp-stream binary or a UoB-HPC/BabelStream source tree to build (nothing is downloaded); "
    "without it, benchmarks/stream_vs_numpy.py compares against a BabelStream-like C baseline."
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--babelstream", default="", help="omp-stream binary or BabelStream source tree")
    p.add_argument("--build_dir", default="", help="where to build a source tree (default: temp)")
    p.add_argument("--model", default="omp", help="BabelStream MODEL when building (cmake)")
    p.add_argument(
        "--array_size", type=int, default=0, help="elements per array (default 0: the rule's)"
    )
    p.add_argument("--num_times", type=int, default=100, help="iterations per run")
    p.add_argument("--pairs", type=int, default=5, help="interleaved (JAX, BabelStream) pairs")
    p.add_argument("--precision", default="float64", choices=("float64", "float32"))
    p.add_argument("--jax_args", default="", help="extra flags for hpcai_jax.main, one string")
    p.add_argument("--json", default="", help="also write every pair's figures to this file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.babelstream:
        print(SKIP_MESSAGE)
        return 0
    host = host_cpu()
    print(f"# host CPU: {host['described']}, {host['logical_cores']} logical cores", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            binary = resolve_binary(
                Path(args.babelstream), Path(args.build_dir or tmp) / "build", args.model
            )
        except RuntimeError as e:
            print(f"stream_vs_babelstream: {e}", file=sys.stderr)
            return 2
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
        env.setdefault("OMP_PROC_BIND", "true")
        try:
            args.array_size = sized(args)
            args.array_size = validated_size(binary, args, env)
        except RuntimeError as e:
            print(f"stream_vs_babelstream: {e}", file=sys.stderr)
            return 2
        print(
            f"# {args.array_size} {args.precision} elements per array, {args.num_times} "
            f"iterations, {args.pairs} pairs; BabelStream: {binary} "
            f"(OMP_NUM_THREADS={env['OMP_NUM_THREADS']}, OMP_PROC_BIND={env['OMP_PROC_BIND']}); "
            f"{os.cpu_count()} cores",
            flush=True,
        )
        pairs = []
        for i in range(args.pairs):
            runs = {}
            for side in ("jax", "babelstream") if i % 2 == 0 else ("babelstream", "jax"):
                command = (
                    jax_command(args, Path(tmp) / f"results-{i}")
                    if side == "jax"
                    else babelstream_command(binary, args)
                )
                runs[side] = run_csv(command, env)
            pairs.append(runs)
            print(f"pair {i}: " + format_pair(runs), flush=True)
    summary = summarize(pairs)
    print(format_summary(summary, host))
    if args.json:
        saved = {"args": vars(args), "host_cpu": host, "pairs": pairs, "summary": summary}
        Path(args.json).write_text(json.dumps(saved, indent=2))
    return 0


def resolve_binary(path: Path, build_dir: Path, model: str) -> Path:
    """A runnable BabelStream: `path` itself, or `<model>-stream` built from the tree at `path`."""
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"--babelstream={path}: not executable")
        return path
    if not (path / "CMakeLists.txt").is_file() or not (path / "src" / "main.cpp").is_file():
        raise RuntimeError(
            f"--babelstream={path}: expected an executable or a BabelStream source tree "
            "(CMakeLists.txt and src/main.cpp)"
        )
    if shutil.which("cmake") is None:
        raise RuntimeError(f"--babelstream={path}: building a source tree needs cmake")
    steps = (
        ["cmake", "-S", str(path), "-B", str(build_dir), f"-DMODEL={model}"]
        + ["-DCMAKE_BUILD_TYPE=Release"],
        ["cmake", "--build", str(build_dir), "-j", str(os.cpu_count())],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(step)} failed:\n{done.stdout[-2000:]}{done.stderr}")
    binary = build_dir / f"{model}-stream"
    if not binary.is_file():
        raise RuntimeError(f"built {path}, but {binary} is not there")
    print(f"# built {binary} (cmake -DMODEL={model} -DCMAKE_BUILD_TYPE=Release)")
    return binary


def host_cpu() -> dict:
    """The CPU both sides ran on (vendor, model, family/model/stepping, cores): a ratio holds
    for one chip, so the figures carry its name."""
    from hpcai_jax.stream.placement import cpu_identity

    return {**cpu_identity(), "logical_cores": os.cpu_count()}


ITEMSIZE = {"float64": 8, "float32": 4}


def sized(args: argparse.Namespace) -> int:
    """--array_size, or the rule's size on this host (said, with why); either checked against
    MemAvailable: the two sides run one after the other, three arrays each."""
    from hpcai_jax.stream.cache import SIZE_FACTOR, cpu_cache, rule_elements_per_device
    from hpcai_jax.stream.placement import mem_available_bytes

    itemsize = ITEMSIZE[args.precision]
    cache = cpu_cache()
    rule = rule_elements_per_device(cache, itemsize, 1)
    n = args.array_size or rule
    where = "given" if args.array_size else "the rule's"
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    if cache.bytes is None:
        why = f"{cache.source}: BabelStream's 2^25"
    else:
        why = f"one array >= {SIZE_FACTOR} x {mib(cache.bytes)} ({cache.source}) needs {rule}"
    print(f"# size: {n} {args.precision} elements per array ({where}; {why})", flush=True)
    free = mem_available_bytes()
    if free is not None and 3 * n * itemsize > free:
        raise RuntimeError(
            f"--array_size={n}: three arrays need {mib(3 * n * itemsize)}, more than the "
            f"{mib(free)} this host has available (MemAvailable)"
        )
    return n


def validated_size(binary: Path, args: argparse.Namespace, env: dict[str, str]) -> int:
    """The size itself where BabelStream validates its own results there; else, said, the
    largest power-of-two fraction of it that BabelStream validates (one run each, with the
    pairs' iterations: its Dot's error grows with them as with N)."""
    n = args.array_size
    while n >= 1024:
        probe = argparse.Namespace(**{**vars(args), "array_size": n})
        done = subprocess.run(
            babelstream_command(binary, probe), cwd=ROOT, env=env, capture_output=True, text=True
        )
        failed = "FAILED validation" in done.stderr + done.stdout
        if not failed:
            if n != args.array_size:
                print(
                    f"# BabelStream validates {n} elements: both sides run at that size, "
                    "below the rule where the rule asked more (JAX: --allow_small_arrays)",
                    flush=True,
                )
            return n
        why = next(x for x in (done.stderr + done.stdout).splitlines() if "FAILED" in x)
        print(f"# BabelStream's own validation fails at {n} elements: {why.strip()}", flush=True)
        n //= 2
    raise RuntimeError(f"BabelStream validates no size from {args.array_size} down to 1024")


def jax_command(args: argparse.Namespace, results_dir: Path) -> list[str]:
    """The engine's run; --allow_small_arrays where the size is below the rule (the engine
    refuses it otherwise, and marks it in its record)."""
    from hpcai_jax.stream.cache import cpu_cache, rule_elements_per_device

    rule = rule_elements_per_device(cpu_cache(), ITEMSIZE[args.precision], 1)
    return [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        "--mode=stream",
        "--csv",
        f"--array_size={args.array_size}",
        *(["--allow_small_arrays"] if args.array_size < rule else []),
        f"--num_times={args.num_times}",
        f"--precision={args.precision}",
        f"--results_dir={results_dir}",
        *args.jax_args.split(),
    ]


def babelstream_command(binary: Path, args: argparse.Namespace) -> list[str]:
    command = [str(binary), "--csv", "-s", str(args.array_size), "-n", str(args.num_times)]
    return command + (["--float"] if args.precision == "float32" else [])


def run_csv(command: list[str], env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(
            f"stream_vs_babelstream: {' '.join(command)} exited {done.returncode}:\n"
            f"{done.stderr[-3000:]}"
        )
    return rates_from_csv(done.stdout)


def rates_from_csv(text: str) -> dict[str, float]:
    """GB/s per kernel from a BabelStream CSV (ours or BabelStream's): weight x N x sizeof over
    min_runtime. Lines before the header (BabelStream may print a banner) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("function,")), None)
    if start is None:
        raise ValueError(f"no CSV header ('function,...') in:\n{text[:500]}")
    rates = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name = row["function"]
        if name in WEIGHTS:
            moved = WEIGHTS[name] * int(row["n_elements"]) * int(row["sizeof"])
            rates[name] = moved / float(row["min_runtime"]) * 1e-9
    return rates


def format_pair(runs: dict[str, dict[str, float]]) -> str:
    jax, ref = runs["jax"], runs["babelstream"]
    return (
        " ".join(
            f"{k} {jax[k]:.1f}/{ref[k]:.1f}={jax[k] / ref[k]:.2f}" for k in KERNELS if k in jax
        )
        + "  (JAX/BabelStream GB/s)"
    )


def summarize(pairs: list[dict[str, dict[str, float]]]) -> dict[str, dict]:
    """Per kernel: median GB/s of each side, and the per-pair ratios' median, min and max."""
    out = {}
    for k in KERNELS:
        if not all(k in p["jax"] and k in p["babelstream"] for p in pairs):
            continue
        ratios = [p["jax"][k] / p["babelstream"][k] for p in pairs]
        out[k] = {
            "jax_gb_per_s": statistics.median(p["jax"][k] for p in pairs),
            "babelstream_gb_per_s": statistics.median(p["babelstream"][k] for p in pairs),
            "ratios": ratios,
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return out


def format_summary(summary: dict[str, dict], host: dict | None = None) -> str:
    rows = [
        "",
        *(
            [f"JAX / BabelStream on {host['described']}, {host['logical_cores']} logical cores", ""]
            if host
            else []
        ),
        "| kernel | JAX GB/s (median) | BabelStream GB/s (median) | JAX / BabelStream, median "
        "| range | per pair |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for k, s in summary.items():
        rows.append(
            f"| {k} | {s['jax_gb_per_s']:.1f} | {s['babelstream_gb_per_s']:.1f} | "
            f"{s['ratio_median']:.2f} | {s['ratio_min']:.2f}–{s['ratio_max']:.2f} | "
            + ", ".join(f"{r:.2f}" for r in s["ratios"])
            + " |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
