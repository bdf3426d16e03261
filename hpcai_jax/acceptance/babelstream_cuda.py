"""BabelStream's own CUDA build beside the engine's STREAM on the same device, in the acceptance
(docs/acceptance.md, BabelStream's CUDA build; docs/stream.md, Comparing with BabelStream itself).

The source is vendored, untouched, in benchmarks/accelerator/babelstream/ (its README names the
upstream commit); nothing downloads. One nvcc command builds it for the device's compute
capability; the binary is cached by its inputs, so a second try on the same machine starts at
once. Where the node cannot build it (no nvcc, or the build fails), `BABELSTREAM_CUDA` may name a
`cuda-stream` built elsewhere (`python -m hpcai_jax.acceptance.babelstream_cuda DIR --arch=sm_90`
on any machine with nvcc). The comparison runs the engine's STREAM and BabelStream in turn, in
rounds that alternate which goes first, at the same array size, precision and iteration count.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import glob
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hpcai_jax.acceptance.items import FAIL, PASS, WARN, Item
from hpcai_jax.nodecheck.rows import NA

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "benchmarks" / "accelerator" / "babelstream"
UPSTREAM = "UoB-HPC/BabelStream at 57637d5"
# The files the build reads; a change to any of them rebuilds.
SOURCES = (
    "src/main.cpp",
    "src/Stream.h",
    "src/StreamModels.h",
    "src/Unit.h",
    "src/benchmark.h",
    "src/cuda/CUDAStream.cu",
    "src/cuda/CUDAStream.h",
    "compat/nvml.h",
    "compat/nvml_stub.c",
)
CACHE = REPO / ".cache" / "babelstream"  # beside the acceptance's XLA cache
PREBUILT_ENV = "BABELSTREAM_CUDA"
BINARY = "cuda-stream"
# Upstream's CMake for -DMODEL=cuda, Release: its model.cmake's flags and definitions (MEM=DEFAULT,
# STRIDE=GRID_STRIDE, UNROLL_FACTOR=4) and -O3. Left out: -march=native for the host code, which
# is not timed, so that a binary built on one machine runs on another.
FLAGS = (
    "-O3",
    "-std=c++17",
    "--extended-lambda",
    "-DCUDA",
    "-DDEFAULT",
    "-DGRID_STRIDE",
    "-DUNROLL_FACTOR=4",
)
# Without a GPU the build is only a check that the source compiles: for Hopper, the GPUs this
# project has run on.
NO_GPU_ARCH = "sm_90"
# Where nvcc may be when it is not on PATH: the CUDA toolkit's usual home, and pip's wheels.
PLACES = ("/usr/local/cuda/bin/nvcc",)
WHEEL_GLOB = "nvidia/cu*/bin/nvcc"

KERNELS = ("Copy", "Mul", "Add", "Triad", "Dot")
WEIGHTS = {"Copy": 2, "Mul": 2, "Add": 3, "Triad": 3, "Dot": 2, "Nstream": 4}
BABELSTREAM_PRECISIONS = {"float64": [], "float32": ["--float"]}
ROUNDS = 3
# The engine within 10 % of native code on the same device passes; below, a WARN (never a FAIL:
# the node is not broken when the engine is slow).
RATIO_PASS = 0.9
BUILD_GUESS_S = 30.0  # 4-14 s on the 2-core CPU machine
ROUND_GUESS_S = 30.0
GROUP = "babelstream"
BUILD_ITEM = "babelstream cuda build"
RUN_ITEM = "babelstream cuda run"


class BuildError(RuntimeError):
    """nvcc failed: the message is its first error line; the whole log is in build.log."""


class RunError(RuntimeError):
    """cuda-stream failed or printed no table: the message is its first line on stderr."""

    def __init__(self, message: str, validation: bool = False):
        super().__init__(message)
        self.validation = validation  # BabelStream's own check of the results failed


# ---------------------------------------------------------------------------------------------
# Finding the compiler and the device


def find_nvcc(
    path: str | None = None,
    environ: dict | None = None,
    places: Sequence[str] | None = None,
    site_dirs: Sequence[str] | None = None,
) -> Path | None:
    """nvcc on PATH, else under $CUDA_HOME or $CUDA_PATH, the toolkit's usual home (PLACES), or
    a pip wheel's folder (nvidia/cu13/bin) in this Python's site directories; None if none."""
    environ = os.environ if environ is None else environ
    found = shutil.which("nvcc", path=environ.get("PATH", "") if path is None else path)
    if found:
        return Path(found)
    homes = [environ.get(k) for k in ("CUDA_HOME", "CUDA_PATH")]
    candidates = [str(Path(h) / "bin" / "nvcc") for h in homes if h]
    candidates += list(PLACES if places is None else places)
    for site in sys.path if site_dirs is None else site_dirs:
        candidates += sorted(glob.glob(os.path.join(site, WHEEL_GLOB)))
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def nvcc_version(nvcc: Path) -> str:
    """ "13.0.88" from `nvcc --version` ("... release 13.0, V13.0.88")."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60)
    match = re.search(r"\bV(\d+(?:\.\d+)+)", out.stdout)
    return match.group(1) if match else "unknown"


def compute_capability() -> str | None:
    """The NVIDIA device's compute capability ("9.0"): JAX's device when it runs on a CUDA GPU,
    else the first GPU nvidia-smi lists; None without either."""
    try:
        import jax

        device = jax.devices()[0]
        capability = getattr(device, "compute_capability", None)
        if device.platform == "gpu" and capability:
            return str(capability)
    except Exception:  # noqa: BLE001 - no backend at all: ask nvidia-smi
        pass
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.stdout.strip().splitlines()[:1]
    return first[0].strip() if out.returncode == 0 and first else None


def arch_of(capability: str | None) -> str:
    """nvcc's -arch for a compute capability: "9.0" -> "sm_90", "10.0" -> "sm_100"; "native"
    (the GPU nvcc itself finds) when the capability is unknown."""
    if not capability or not re.fullmatch(r"\d+\.\d+", capability.strip()):
        return "native"
    major, minor = capability.strip().split(".")
    return f"sm_{major}{minor}"


# ---------------------------------------------------------------------------------------------
# The build


@dataclasses.dataclass(frozen=True)
class Build:
    binary: Path
    arch: str
    nvcc_version: str
    command: str  # the nvcc command line that built the binary
    seconds: float  # 0 when cached
    cached: bool
    header: str  # which nvml.h: the toolkit's, or compat/nvml.h
    origin: str = "built"  # or "prebuilt" ($BABELSTREAM_CUDA)

    def summary(self) -> str:
        how = "cached" if self.cached else f"built in {self.seconds:.1f} s"
        if self.origin == "prebuilt":
            how = f"prebuilt ({PREBUILT_ENV}={self.binary})"
        return f"{UPSTREAM}, -DMODEL=cuda, {self.arch}, nvcc {self.nvcc_version}, {how}"


def nvcc_command(
    nvcc: Path, arch: str, binary: Path, stub_dir: Path, compat: bool, source: Path = SOURCE
) -> list[str]:
    """The one nvcc command that builds cuda-stream (compat: the toolkit has no nvml.h)."""
    src = source / "src"
    includes = [f"-I{src}", f"-I{src / 'cuda'}"] + ([f"-I{source / 'compat'}"] if compat else [])
    return [
        str(nvcc),
        *FLAGS,
        f"-arch={arch}",
        *includes,
        str(src / "main.cpp"),
        str(src / "cuda" / "CUDAStream.cu"),
        f"-L{stub_dir}",
        "-lnvidia-ml",
        "-o",
        str(binary),
    ]


def stub_command(nvcc: Path, stub_dir: Path, source: Path = SOURCE) -> list[str]:
    """The link-time NVML stand-in (compat/nvml_stub.c), soname libnvidia-ml.so.1."""
    return [
        str(nvcc),
        "-shared",
        "--cudart=none",
        "-Xcompiler",
        "-fPIC",
        "-Xlinker",
        "-soname=libnvidia-ml.so.1",
        str(source / "compat" / "nvml_stub.c"),
        "-o",
        str(stub_dir / "libnvidia-ml.so"),
    ]


def toolkit_has_nvml(nvcc: Path, scratch: Path) -> bool:
    """Whether nvcc's own include path holds nvml.h (a full toolkit does; pip's wheels do not)."""
    probe = scratch / "probe_nvml.cpp"
    probe.write_text("#include <nvml.h>\n")
    out = subprocess.run(
        [str(nvcc), "-E", str(probe), "-o", os.devnull], capture_output=True, timeout=120
    )
    return out.returncode == 0


def _key(version: str, arch: str, source: Path) -> str:
    digest = hashlib.sha256(f"{version} {arch} {' '.join(FLAGS)}".encode())
    for name in SOURCES:
        digest.update((source / name).read_bytes())
    return digest.hexdigest()[:16]


def _first_error(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "fatal" in line.lower()]
    return (errors or lines or ["no output"])[0][:300]


def build(nvcc: Path, arch: str, into: Path, source: Path = SOURCE, timeout_s=600.0) -> Build:
    """cuda-stream in `into` (reused when built from the same inputs), with build.json (what
    built it) and build.log (nvcc's output) beside it.

    Raises:
      BuildError: nvcc failed; its first error line is the message.
    """
    into = into.resolve()  # nvcc runs in a scratch folder: every path it is given is absolute
    version = nvcc_version(nvcc)
    key = _key(version, arch, source)
    record = into / "build.json"
    if (into / BINARY).is_file() and record.is_file():
        done = json.loads(record.read_text())
        if done.get("key") == key:
            return Build(into / BINARY, arch, version, done["command"], 0.0, True, done["header"])
    into.mkdir(parents=True, exist_ok=True)
    scratch = into / f".build-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    started = time.perf_counter()
    compat = not toolkit_has_nvml(nvcc, scratch)
    binary = scratch / BINARY
    commands = [
        stub_command(nvcc, scratch, source),
        nvcc_command(nvcc, arch, binary, scratch, compat, source),
    ]
    log = []
    for command in commands:
        out = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, cwd=scratch
        )
        log += [f"$ {shlex.join(command)}", out.stdout, out.stderr]
        if out.returncode != 0:
            (into / "build.log").write_text("\n".join(log))
            shutil.rmtree(scratch, ignore_errors=True)
            raise BuildError(_first_error(out.stderr + out.stdout))
    seconds = time.perf_counter() - started
    header = "compat/nvml.h" if compat else "the toolkit's nvml.h"
    command = shlex.join(commands[1]).replace(str(scratch), str(into))
    for name in (BINARY, "libnvidia-ml.so"):
        os.replace(scratch / name, into / name)
    shutil.rmtree(scratch, ignore_errors=True)
    (into / "build.log").write_text("\n".join(log).replace(str(scratch), str(into)))
    record.write_text(
        json.dumps(
            {
                "key": key,
                "arch": arch,
                "nvcc": version,
                "command": command,
                "header": header,
                "seconds": round(seconds, 2),
                "upstream": UPSTREAM,
            },
            indent=1,
        )
    )
    return Build(into / BINARY, arch, version, command, seconds, False, header)


def prebuilt(environ: dict | None = None) -> Build | None:
    """The cuda-stream `BABELSTREAM_CUDA` names (built elsewhere), with its build.json's facts."""
    name = (os.environ if environ is None else environ).get(PREBUILT_ENV)
    if not name or not os.access(name, os.X_OK):
        return None
    binary = Path(name)
    record = binary.parent / "build.json"
    done = json.loads(record.read_text()) if record.is_file() else {}
    return Build(
        binary,
        done.get("arch", "?"),
        done.get("nvcc", "?"),
        done.get("command", ""),
        0.0,
        True,
        done.get("header", "?"),
        origin="prebuilt",
    )


# ---------------------------------------------------------------------------------------------
# Running it


@dataclasses.dataclass(frozen=True)
class KernelRun:
    """One line of BabelStream's --csv table."""

    function: str
    num_times: int
    n_elements: int
    sizeof: int
    min_s: float
    max_s: float
    avg_s: float

    @property
    def bytes_per_s(self) -> float:
        """BabelStream's figure, recomputed: byte weight x N x sizeof over the fastest call."""
        return WEIGHTS[self.function] * self.n_elements * self.sizeof / self.min_s


def parse_csv(text: str) -> dict[str, KernelRun]:
    """BabelStream's --csv output by kernel. The CUDA model prints its device lines ("CUDA
    Driver: ...") before the table even under --csv; they are skipped.

    Raises:
      ValueError: no table, or a row that is not BabelStream's.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("function,")), None)
    if start is None:
        raise ValueError("no BabelStream CSV table (a line starting 'function,')")
    runs = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        try:
            run = KernelRun(
                row["function"],
                int(row["num_times"]),
                int(row["n_elements"]),
                int(row["sizeof"]),
                float(row["min_runtime"]),
                float(row["max_runtime"]),
                float(row["avg_runtime"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a BabelStream CSV row: {row} ({e})") from None
        if run.function not in WEIGHTS or run.min_s <= 0:
            raise ValueError(f"not a BabelStream CSV row: {row}")
        runs[run.function] = run
    if not runs:
        raise ValueError("a BabelStream CSV header with no rows")
    return runs


def babelstream_command(binary: Path, elements: int, num_times: int, precision: str) -> list[str]:
    return [
        str(binary),
        "--arraysize",
        str(elements),
        "--numtimes",
        str(num_times),
        *BABELSTREAM_PRECISIONS[precision],
        "--csv",
    ]


def run_babelstream(command: list[str], timeout_s: float) -> tuple[dict[str, KernelRun], str]:
    """One cuda-stream run: its kernels and its stdout.

    Raises:
      RunError: a non-zero exit (validation failures flagged), a time-out or no table.
    """
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RunError(f"cuda-stream did not end within {timeout_s:.0f} s") from None
    if out.returncode != 0:
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        first = (lines or [f"exit {out.returncode}, nothing on stderr"])[0][:300]
        raise RunError(f"cuda-stream exit {out.returncode}: {first}", "FAILED validation" in first)
    try:
        return parse_csv(out.stdout), out.stdout
    except ValueError as e:
        raise RunError(str(e)) from None


# ---------------------------------------------------------------------------------------------
# The comparison


@dataclasses.dataclass(frozen=True)
class Round:
    engine_first: bool
    elements: int  # per array, both sides
    engine: dict[str, float]  # B/s by kernel label
    babelstream: dict[str, float]
    engine_valid: bool = True


@dataclasses.dataclass(frozen=True)
class Comparison:
    kernel: str
    engine: float  # B/s, median over the rounds
    babelstream: float
    per_round: tuple[float, ...]  # engine / BabelStream in each round

    @property
    def ratio(self) -> float:
        return self.engine / self.babelstream


def compare(rounds: Sequence[Round]) -> list[Comparison]:
    """Per kernel that both sides ran: the medians over the rounds, and each round's ratio."""
    out = []
    for kernel in KERNELS:
        pairs = [
            (r.engine[kernel], r.babelstream[kernel])
            for r in rounds
            if kernel in r.engine and kernel in r.babelstream
        ]
        if pairs:
            out.append(
                Comparison(
                    kernel,
                    statistics.median(e for e, _ in pairs),
                    statistics.median(b for _, b in pairs),
                    tuple(e / b for e, b in pairs),
                )
            )
    return out


def table(comparisons: Sequence[Comparison], heading: str) -> str:
    """The per-kernel ratios in one fixed-width table (the log and babelstream/comparison.txt)."""
    lines = [
        heading,
        f"{'kernel':<8}{'engine GB/s':>14}{'BabelStream GB/s':>18}{'engine / BS':>13}  per round",
    ]
    for c in comparisons:
        rounds = " ".join(f"{r:.3f}" for r in c.per_round)
        lines.append(
            f"{c.kernel:<8}{c.engine / 1e9:>14.1f}{c.babelstream / 1e9:>18.1f}{c.ratio:>13.3f}  "
            f"{rounds}"
        )
    return "\n".join(lines)


def comparison_items(comparisons: Sequence[Comparison], what: str, note: str) -> list[Item]:
    """One item per kernel: the engine's rate against BabelStream's on the same device."""
    items = []
    for c in comparisons:
        rounds = ", ".join(f"{r:.3f}" for r in c.per_round)
        items.append(
            Item(
                GROUP,
                f"babelstream {c.kernel.lower()}: engine / BabelStream",
                c.engine,
                "B/s",
                f"{c.babelstream / 1e9:.4g} GB/s ({what})",
                PASS if c.ratio >= RATIO_PASS else WARN,
                f"medians of {len(c.per_round)} rounds; per round {rounds}; {note}",
                c.babelstream,
            )
        )
    return items


def build_item(verdict: str, value: float | None, note: str, name: str = BUILD_ITEM) -> Item:
    """The build's row (its seconds, 0 when cached), or a run's that ended without figures."""
    return Item(GROUP, name, value, "s" if value is not None else "", "", verdict, note)


def _engine_rates(result) -> tuple[dict[str, float], int, bool]:
    return (
        {f.label: f.gb_per_s * 1e9 for f in result.figures},
        result.elements,
        result.validation.passed,
    )


def measure_rounds(
    engine: Callable[[], tuple[dict[str, float], int, bool]],
    babelstream: Callable[[int], dict[str, KernelRun]],
    claim: Callable[[float], bool],
    rounds: int = ROUNDS,
) -> list[Round]:
    """Up to `rounds` rounds, the engine first in the even ones, each round started only when
    `claim` grants its estimate (the first round's time, once known). The engine goes first in
    round 0, which fixes the element count BabelStream is given."""
    out, elements, estimate = [], None, ROUND_GUESS_S
    for i in range(rounds):
        if not claim(estimate):
            break
        started = time.perf_counter()
        engine_first = i % 2 == 0 or elements is None
        sides = {}
        for side in ("engine", "babelstream") if engine_first else ("babelstream", "engine"):
            if side == "engine":
                sides["engine"] = engine()
                elements = sides["engine"][1]
            else:
                sides["babelstream"] = {k: r.bytes_per_s for k, r in babelstream(elements).items()}
        rates, _, valid = sides["engine"]
        out.append(Round(engine_first, elements, rates, sides["babelstream"], valid))
        estimate = time.perf_counter() - started
    return out


# ---------------------------------------------------------------------------------------------
# The acceptance group


def obtain(arch: str, cache: Path) -> tuple[Build | None, str]:
    """A cuda-stream for `arch`: built with this node's nvcc, else `BABELSTREAM_CUDA`'s; and
    why there is none (or why the build was not used)."""
    nvcc = find_nvcc()
    why = ""
    if nvcc is None:
        why = (
            "no nvcc (PATH, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, pip's nvidia/cu*/bin): "
            "BabelStream's CUDA build needs the CUDA toolkit's compiler"
        )
    else:
        try:
            return build(nvcc, arch, cache / arch), ""
        except (BuildError, OSError, subprocess.TimeoutExpired) as e:
            why = f"the build failed: {e} (log: {cache / arch / 'build.log'})"
    found = prebuilt()
    if found is not None:
        return found, why
    return None, why + f"; or set {PREBUILT_ENV} to a cuda-stream built elsewhere"


def _cache_root(ctx) -> Path:
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        return CACHE
    except OSError:  # a read-only checkout: the run's own folder
        return Path(ctx.out_dir or ".") / GROUP / "build"


def babelstream_items(ctx, allotment) -> list[Item]:
    """The group: build (or reuse) cuda-stream, then the interleaved rounds on a CUDA GPU."""
    from hpcai_jax.acceptance import measure

    capability = compute_capability() if ctx.backend == "gpu" else None
    on_gpu = ctx.backend == "gpu" and capability is not None
    arch = arch_of(capability) if on_gpu else NO_GPU_ARCH
    # Not judged without a CUDA GPU: nothing to compare, the build is a check of the source.
    missing = WARN if on_gpu else NA
    if find_nvcc() is not None and not allotment.claim(BUILD_GUESS_S):
        return [build_item(WARN, None, "skipped: the budget cannot hold the build")]
    binary, why = obtain(arch, _cache_root(ctx))
    if binary is None:
        return [build_item(missing, None, f"skipped: {why}")]
    summary = binary.summary() + (f" ({why})" if why else "")
    if not on_gpu:
        reason = f"not run: no NVIDIA GPU (backend {ctx.backend})"
        return [build_item(NA, binary.seconds, f"{summary}; {reason}")]
    config = measure.stream_config(ctx)
    if config.precision not in BABELSTREAM_PRECISIONS:
        note = f"{summary}; not run: BabelStream has no {config.precision}"
        return [build_item(WARN, binary.seconds, note)]
    return _compare(ctx, allotment, binary, config, summary)


def _compare(ctx, allotment, binary: Build, config, summary: str) -> list[Item]:
    from hpcai_jax.stream import measure_bandwidth

    files = Path(ctx.out_dir or ".") / GROUP
    files.mkdir(parents=True, exist_ok=True)
    outputs = []

    def engine():
        return _engine_rates(measure_bandwidth(config))

    def babelstream(elements: int):
        command = babelstream_command(binary.binary, elements, config.num_times, config.precision)
        runs, stdout = run_babelstream(command, max(60.0, allotment.left_s()))
        outputs.append((command, stdout))
        (files / f"round-{len(outputs)}.csv").write_text(stdout)
        return runs

    items = [build_item(PASS, binary.seconds, summary)]
    try:
        rounds = measure_rounds(engine, babelstream, allotment.claim)
    except RunError as e:
        return items + [build_item(FAIL if e.validation else WARN, None, str(e), RUN_ITEM)]
    if not rounds:
        return items + [build_item(WARN, None, "no round: the budget cannot hold one", RUN_ITEM)]
    elements = rounds[0].elements
    what = f"BabelStream CUDA, same device, {elements} {config.precision} elements"
    note = f"{config.num_times} iterations; command {shlex.join(outputs[0][0])}"
    if not all(r.engine_valid for r in rounds):
        note += "; the engine's validation failed in a round"
    comparisons = compare(rounds)
    heading = (
        f"babelstream: engine / BabelStream CUDA ({binary.arch}), {elements} {config.precision} "
        f"elements per array, {config.num_times} iterations, {len(rounds)} interleaved rounds"
    )
    text = table(comparisons, heading)
    print(text, flush=True)
    (files / "comparison.txt").write_text(text + "\n")
    return items + comparison_items(comparisons, what, note)


# ---------------------------------------------------------------------------------------------
# Building ahead, on a machine with nvcc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m hpcai_jax.acceptance.babelstream_cuda",
        description="Build BabelStream's CUDA model (cuda-stream) from the vendored source.",
    )
    p.add_argument("out_dir", help="where cuda-stream, build.json and build.log go")
    p.add_argument("--arch", default="", help="nvcc -arch (default: the GPU's, else sm_90)")
    args = p.parse_args(argv)
    nvcc = find_nvcc()
    if nvcc is None:
        print("babelstream_cuda: skipped: no nvcc found", file=sys.stderr)
        return 1
    arch = args.arch or (arch_of(cap) if (cap := compute_capability()) else NO_GPU_ARCH)
    try:
        built = build(nvcc, arch, Path(args.out_dir))
    except BuildError as e:
        print(f"babelstream_cuda: build failed: {e}", file=sys.stderr)
        return 1
    print(built.command)
    print(f"{built.binary}: {built.summary()}, nvml.h: {built.header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
