"""The GPU settings that large JAX training codebases set, in one table, applied in one place:
before JAX starts its backend, so that XLA and the CUDA client read them (docs/gpu_settings.md).

A setting is an XLA flag (appended to `XLA_FLAGS`) or an environment variable. `--gpu_settings`
picks them by name; whatever the user already set in the environment wins. XLA stops a process
at start on a flag its build does not know, so a flag is applied only where the installed
binaries carry it (flags come and go between jaxlib releases); the others are reported, not
applied. This module imports nothing from JAX: it must run before JAX does.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import mmap
import os
import shlex
from collections.abc import Callable, Iterable, MutableMapping
from pathlib import Path

from hpcai_jax.errors import UsageError

XLA, ENV = "xla", "env"


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str  # what --gpu_settings calls it
    kind: str  # XLA (an XLA_FLAGS entry) or ENV (an environment variable)
    key: str  # the flag's name without "--", or the variable's
    value: str
    default: bool  # part of --gpu_settings=default
    what: str  # what it does, in a sentence
    source: str  # who sets it

    @property
    def text(self) -> str:
        return f"--{self.key}={self.value}" if self.kind == XLA else f"{self.key}={self.value}"


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "latency_hiding",
        XLA,
        "xla_gpu_enable_latency_hiding_scheduler",
        "true",
        True,
        "schedules asynchronous collectives (a member's gradient all-reduce over `data`) to "
        "overlap the backward pass; XLA's default is off",
        "maxtext's GPU configs (configs/gpu/a3); JAX's GPU performance tips; NVIDIA JAX-Toolbox",
    ),
    Setting(
        "collective_stream_priority",
        XLA,
        "xla_gpu_enable_highest_priority_async_stream",
        "true",
        True,
        "runs collectives on the highest-priority stream, so compute kernels do not hold them back",
        "maxtext's GPU configs; NVIDIA JAX-Toolbox",
    ),
    Setting(
        "memory_fraction",
        ENV,
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "0.90",
        True,
        "the GPU client preallocates 90 % of device memory instead of JAX's 75 %, so larger "
        "batches and more members per device fit",
        "NVIDIA JAX-Toolbox (0.9 or 0.8); JAX's GPU memory allocation notes",
    ),
    Setting(
        "all_reduce_combine_128mib",
        XLA,
        "xla_gpu_all_reduce_combine_threshold_bytes",
        str(128 << 20),
        False,
        "combines gradient all-reduces into groups of up to 128 MiB (ResNet-50's float32 "
        "gradients, 102 MB, become one): fewer launches, less overlap with the backward pass",
        "maxtext's GPU configs (128 MiB to 1 GiB)",
    ),
    Setting(
        "no_command_buffers",
        XLA,
        "xla_gpu_enable_command_buffer",
        "",
        False,
        "turns off CUDA-graph command buffers (XLA captures fusions and library calls in them "
        "by default): for comparison, and where a profiler or PGLE needs plain launches",
        "maxtext's GPU configs; JAX's GPU performance tips (PGLE, pipeline parallelism)",
    ),
    Setting(
        "no_triton_gemm",
        XLA,
        "xla_gpu_enable_triton_gemm",
        "false",
        False,
        "matrix products through cuBLAS only, not XLA's Triton emitter",
        "maxtext's GPU configs; NVIDIA JAX-Toolbox",
    ),
    Setting(
        "no_preallocate",
        ENV,
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "false",
        False,
        "allocates device memory on demand instead of preallocating: for a GPU shared with "
        "another process, at some cost in fragmentation",
        "JAX's GPU memory allocation notes",
    ),
    Setting(
        "nccl_warnings",
        ENV,
        "NCCL_DEBUG",
        "WARN",
        True,
        "NCCL prints its warnings and errors (a fallback to TCP sockets, a lost peer) into each "
        "process's log",
        "NCCL's documentation; common in SLURM job scripts",
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
DEFAULT = tuple(s.name for s in SETTINGS if s.default)
GPU_PLUGINS = ("jax-cuda12-plugin", "jax-cuda13-plugin", "jax-rocm6-plugin", "jax-rocm7-plugin")
# A flag every XLA build registers: a binary that holds it parses XLA_FLAGS.
MARKER_FLAG = "xla_backend_optimization_level"


def select(spec: str) -> tuple[Setting, ...]:
    """The settings `--gpu_settings` names: "default", "none", or a comma-separated list of
    names, where "default" adds the defaults and "-name" removes one (e.g.
    "default,-latency_hiding,no_command_buffers"). Raises UsageError naming a bad entry."""
    chosen: list[str] = []
    entries = [e.strip() for e in spec.split(",")]
    if entries == ["none"]:
        return ()
    for entry in entries:
        name = entry.removeprefix("-")
        if entry == "default":
            chosen += [n for n in DEFAULT if n not in chosen]
        elif name in BY_NAME:
            if entry.startswith("-"):
                chosen = [n for n in chosen if n != name]
            elif name not in chosen:
                chosen.append(name)
        else:
            raise UsageError(
                f"--gpu_settings={spec}: unknown entry {entry!r}; expected default, none, or "
                f"names from {', '.join(BY_NAME)} (a leading '-' removes one)"
            )
    return tuple(BY_NAME[n] for n in chosen)


def gpu_expected(env: MutableMapping[str, str] | None = None) -> bool:
    """Whether JAX will start a GPU backend: a CUDA or ROCm plugin is installed and
    JAX_PLATFORMS (if set) admits it. Decided without importing JAX."""
    env = os.environ if env is None else env
    platforms = env.get("JAX_PLATFORMS", "")
    if platforms and not any(p in platforms for p in ("cuda", "gpu", "rocm")):
        return False
    for name in GPU_PLUGINS:
        try:
            importlib.metadata.version(name)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def _xla_binaries() -> list[Path]:
    """The shared objects of jaxlib and of the installed PJRT plugins that parse XLA_FLAGS."""
    roots = []
    for package in ("jaxlib", "jax_plugins"):
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            roots += [Path(p) for p in spec.submodule_search_locations]
    found = []
    for root in roots:
        for path in root.rglob("*.so"):
            if path.stat().st_size > (8 << 20) and _holds(path, [MARKER_FLAG])[MARKER_FLAG]:
                found.append(path)
    return found


def _holds(path: Path, names: Iterable[str]) -> dict[str, bool]:
    """Which of `names` the binary registers as flags: each appears as its own C string."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return {n: m.find(b"\0" + n.encode() + b"\0") != -1 for n in names}


def known_xla_flags(names: Iterable[str]) -> dict[str, bool | None]:
    """For each flag name, whether every installed XLA binary knows it (None: no binary found,
    so unknown)."""
    names = list(names)
    binaries = _xla_binaries()
    if not binaries:
        return dict.fromkeys(names)
    known = dict.fromkeys(names, True)
    for path in binaries:
        for name, held in _holds(path, names).items():
            known[name] = known[name] and held
    return known


@dataclasses.dataclass(frozen=True)
class Applied:
    """What `apply` did: settings applied, and those left out with why."""

    applied: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (name, why)

    def summary(self) -> str:
        parts = [f"applied {', '.join(self.applied) or 'none'}"]
        parts += [f"{name} not applied ({why})" for name, why in self.left_out]
        return "GPU settings: " + "; ".join(parts)


def _xla_flag_names(xla_flags: str) -> set[str]:
    try:
        tokens = shlex.split(xla_flags)
    except ValueError:  # unbalanced quotes: XLA will say so itself
        tokens = xla_flags.split()
    return {t[2:].split("=", 1)[0] for t in tokens if t.startswith("--")}


def apply(
    settings: Iterable[Setting],
    env: MutableMapping[str, str] | None = None,
    on_gpu: bool | None = None,
    known: Callable[[Iterable[str]], dict[str, bool | None]] = known_xla_flags,
) -> Applied:
    """Puts `settings` into `env` (the process environment by default) before JAX starts.

    Nothing is applied off GPUs. An XLA flag or variable already set there is the user's and
    stays. An XLA flag the installed binaries do not carry is left out."""
    env = os.environ if env is None else env
    settings = list(settings)
    if not settings:
        return Applied((), ())
    if not (gpu_expected(env) if on_gpu is None else on_gpu):
        return Applied((), tuple((s.name, "no GPU backend") for s in settings))
    applied, left_out = [], []
    present = _xla_flag_names(env.get("XLA_FLAGS", ""))
    flags = [s for s in settings if s.kind == XLA and s.key not in present]
    carried = known([s.key for s in flags]) if flags else {}
    added = []
    for s in settings:
        if s.kind == ENV:
            if s.key in env:
                left_out.append((s.name, f"{s.key} already set to {env[s.key]!r}"))
            else:
                env[s.key] = s.value
                applied.append(s.name)
        elif s.key in present:
            left_out.append((s.name, f"--{s.key} already in XLA_FLAGS"))
        elif carried.get(s.key) is None:
            left_out.append((s.name, "no XLA binary found to check the flag against"))
        elif not carried[s.key]:
            left_out.append((s.name, f"this jaxlib has no --{s.key}"))
        else:
            added.append(s.text)
            applied.append(s.name)
    if added:
        env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", "").strip(), *added]).strip()
    return Applied(tuple(applied), tuple(left_out))


def compiler_options(settings: Iterable[Setting]) -> dict[str, bool | int | str]:
    """The XLA-flag settings as per-compile options (`.compile(compiler_options=...)`), for
    measuring one against another in a single process."""
    return {s.key: _typed(s.value) for s in settings if s.kind == XLA}


def _typed(value: str) -> bool | int | str:
    """A flag's text as the typed value a compile option must be (XLA checks the type)."""
    if value in ("true", "false"):
        return value == "true"
    return int(value) if value.isdigit() else value


# What a record states of the environment the backend started with.
RECORDED_PREFIXES = ("XLA_PYTHON_CLIENT_", "NCCL_", "CUDA_")
RECORDED_NAMES = ("XLA_FLAGS", "JAX_PLATFORMS", "TF_GPU_ALLOCATOR")


def environment(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The variables that set XLA, the GPU client and NCCL, as they are now."""
    env = os.environ if env is None else env
    return {
        k: env[k] for k in sorted(env) if k in RECORDED_NAMES or k.startswith(RECORDED_PREFIXES)
    }


def markdown_table() -> str:
    """The settings as docs/gpu_settings.md lists them (a test keeps the page in step)."""
    lines = [
        "| name | default | sets | what it does | who sets it |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in SETTINGS:
        lines.append(
            f"| `{s.name}` | {'on' if s.default else 'off'} | `{s.text}` | {s.what} | {s.source} |"
        )
    return "\n".join(lines)
