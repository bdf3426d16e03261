"""The counting program's cost analysis, kept per compiled step (docs/members.md, "FLOPs").

A step that runs its members in a loop is counted from a second program with the loop written
out (engine/compiled.count_lowered), whose tracing and lowering grow with the members per device
(3.5 s at 64 resnet_small members on a 2-core CPU). Its figures depend only on the step itself,
so they are kept under the sha256 of the step's lowered program (without locations), JAX's
version and the backend: a later run of the same layout reads them in milliseconds. The folder is
`$HPCAI_JAX_COUNT_CACHE`, else `counted/` in `$JAX_COMPILATION_CACHE_DIR`, else
`~/.cache/hpcai_jax/counted`; a folder that cannot be written only costs the next run the
count."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax

ENV = "HPCAI_JAX_COUNT_CACHE"


class Counted:
    """A cached cost analysis, read where a Lowered counting program would be (xla_cost)."""

    def __init__(self, analysis: dict):
        self.analysis = analysis

    def cost_analysis(self) -> dict:
        return self.analysis


def folder() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(os.environ["JAX_COMPILATION_CACHE_DIR"]) / "counted"
    return Path.home() / ".cache" / "hpcai_jax" / "counted"


def key(step_lowered) -> str:
    text = step_lowered.as_text(debug_info=False)
    salt = f"{jax.__version__} {jax.default_backend()}\n"
    return hashlib.sha256((salt + text).encode()).hexdigest()


def _read(path: Path) -> dict | None:
    try:
        analysis = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return analysis if isinstance(analysis, dict) and "flops" in analysis else None


def write_json(path: Path, analysis: dict) -> None:
    """`analysis` as JSON at `path`, whole or not at all; a folder that cannot be written only
    costs the next run the figures (flops/host_cache.py keeps its entries so too)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(analysis, f)
        os.replace(tmp, path)  # whole or not at all, whichever process writes last
    except OSError:
        pass


def counted(step_lowered, count: Callable[[], object]) -> tuple[object, bool]:
    """(the counting program's analysis, whether it came from the cache): the cached figures
    of this very step, else `count()` (the counting program, lowered) analysed and kept."""
    from hpcai_jax.xla_cost import before_optimisation

    path = folder() / f"{key(step_lowered)}.json"
    cached = _read(path)
    if cached is not None:
        return Counted(cached), True
    lowered = count()
    analysis, _ = before_optimisation(lowered)
    if analysis is None:
        return lowered, False  # xla_cost says why
    figures = {k: float(v) for k, v in analysis.items() if isinstance(v, int | float)}
    write_json(path, figures)
    return Counted(figures), False
