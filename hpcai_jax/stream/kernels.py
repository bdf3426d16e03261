"""BabelStream's kernels as compiled, donated JAX programs, and its start values and byte weights.

Each kernel takes all three arrays (a, b, c) and returns the one it overwrites. That argument is
donated and kept with `keep_unused=True`: Copy, Mul, Add and Triad never read the array they
write, and without `keep_unused` JAX prunes the unused argument, the donation silently does
nothing, and every call allocates (and page-faults) a fresh output: docs/design.md, fact 4 measured
~8 GB/s that way instead of ~31 GB/s. With both, XLA aliases the output to the donated buffer
and a call allocates nothing (`compile_kernel` records the proof).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from hpcai_jax.flops.xla import XlaCost, xla_cost
from hpcai_jax.stream.placement import Placement

# BabelStream's start values and scalar.
START_A = 0.1
START_B = 0.2
START_C = 0.0
START_SCALAR = 0.4

ARRAY_NAMES = ("a", "b", "c")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    name: str  # as BabelStream labels it
    arrays_moved: int  # BabelStream's byte weight: arrays read + arrays written
    writes: str | None  # the array it overwrites (donated); None for Dot
    fn: Callable  # (a, b, c, scalar) -> new value of `writes`, or Dot's sum

    @property
    def key(self) -> str:
        return self.name.lower()


def _copy(a, b, c, scalar):
    return jnp.copy(a)


def _mul(a, b, c, scalar):
    return scalar * c


def _add(a, b, c, scalar):
    return a + b


def _triad(a, b, c, scalar):
    return b + scalar * c


def _dot(a, b, c, scalar):
    # bfloat16 accumulates in float32 (the same bytes move; a bf16 sum of 2^25 terms is noise).
    acc = jnp.float32 if a.dtype == jnp.bfloat16 else a.dtype
    return jnp.dot(a, b, preferred_element_type=acc)


def _nstream(a, b, c, scalar):
    return a + b + scalar * c


KERNELS: dict[str, KernelSpec] = {
    k.key: k
    for k in (
        KernelSpec("Copy", 2, "c", _copy),  # c = a
        KernelSpec("Mul", 2, "b", _mul),  # b = scalar * c
        KernelSpec("Add", 3, "c", _add),  # c = a + b
        KernelSpec("Triad", 3, "a", _triad),  # a = b + scalar * c
        KernelSpec("Dot", 2, None, _dot),  # sum(a * b)
        KernelSpec("Nstream", 4, "a", _nstream),  # a += b + scalar * c
    )
}

# BabelStream's run orders: the five classic kernels in sequence, or one kernel alone.
RUN_ORDERS: dict[str, tuple[str, ...]] = {
    "all": ("copy", "mul", "add", "triad", "dot"),
    "triad": ("triad",),
    "nstream": ("nstream",),
}


@dataclasses.dataclass(frozen=True)
class AllocationCheck:
    """Static evidence that a call allocates nothing: XLA's memory analysis of the executable.

    `aliased`: every output byte is aliased to a donated input (None: not reported);
    `temp_bytes`: scratch the executable allocates per call.
    """

    output_bytes: int | None
    alias_bytes: int | None
    temp_bytes: int | None
    note: str = ""

    @property
    def aliased(self) -> bool | None:
        if self.output_bytes is None or self.alias_bytes is None:
            return None
        return self.alias_bytes >= self.output_bytes


@dataclasses.dataclass(frozen=True)
class CompiledKernel:
    spec: KernelSpec
    compiled: jax.stages.Compiled
    donate_index: int | None  # position of the donated array in (a, b, c)
    cost: XlaCost
    allocation: AllocationCheck

    def __call__(self, a, b, c):
        return self.compiled(a, b, c)


def _allocation_check(compiled: jax.stages.Compiled) -> AllocationCheck:
    try:
        stats = compiled.memory_analysis()
    except Exception as e:  # noqa: BLE001 - unimplemented on some backends
        return AllocationCheck(None, None, None, f"memory analysis unavailable: {type(e).__name__}")
    if stats is None:
        return AllocationCheck(None, None, None, "memory analysis returned nothing on this backend")
    return AllocationCheck(
        int(stats.output_size_in_bytes),
        int(stats.alias_size_in_bytes),
        int(stats.temp_size_in_bytes),
    )


def compile_kernel(
    spec: KernelSpec, placement: Placement, elements: int, dtype, scalar: float = START_SCALAR
) -> CompiledKernel:
    """Lowers and compiles one kernel ahead of timing, for arrays of `elements` in `placement`."""
    donate = () if spec.writes is None else (ARRAY_NAMES.index(spec.writes),)
    out_sharding = placement.replicated if spec.writes is None else placement.sharded
    jitted = jax.jit(
        functools.partial(spec.fn, scalar=scalar),
        in_shardings=(placement.sharded,) * 3,
        out_shardings=out_sharding,
        donate_argnums=donate,
        keep_unused=True,
    )
    arg = jax.ShapeDtypeStruct((elements,), dtype, sharding=placement.sharded)
    compiled = jitted.lower(arg, arg, arg).compile()
    return CompiledKernel(
        spec=spec,
        compiled=compiled,
        donate_index=donate[0] if donate else None,
        cost=xla_cost(compiled, placement.num_devices),
        allocation=_allocation_check(compiled),
    )


def init_arrays(placement: Placement, elements: int, dtype) -> dict[str, jax.Array]:
    """a, b, c filled with BabelStream's start values, created directly in their shards."""

    def fill():
        return tuple(jnp.full((elements,), value, dtype) for value in (START_A, START_B, START_C))

    made = jax.jit(fill, out_shardings=(placement.sharded,) * 3)()
    return dict(zip(ARRAY_NAMES, made, strict=True))
