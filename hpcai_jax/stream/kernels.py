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
from absl import logging
from jax.sharding import PartitionSpec as P

from hpcai_jax.stream.placement import STREAM_AXIS, Placement
from hpcai_jax.xla_cost import XlaCost, xla_cost

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
    return jax.lax.platform_dependent(a, cpu=_copy_in_a_loop, default=jnp.copy)


def _copy_in_a_loop(a):
    """c = a as one loop fusion, the way the other kernels run: XLA:CPU turns every plain copy
    into a `copy` thunk of parallel memcpys, which reached about 0.73 of a C loop's bandwidth
    where this loop reached 0.95 (docs/stream.md). Rounding to the dtype's own exponent and
    mantissa widths is the identity, and XLA keeps it as a loop."""
    info = jnp.finfo(a.dtype)
    return jax.lax.reduce_precision(a, exponent_bits=info.nexp, mantissa_bits=info.nmant)


def _mul(a, b, c, scalar):
    return scalar * c


def _add(a, b, c, scalar):
    return a + b


def _triad(a, b, c, scalar):
    return b + scalar * c


# On CPUs, Dot sums DOT_ROWS partial sums per device, each over a contiguous row of its shard:
# XLA fuses the multiply into the row reduction and splits the rows over the cores (one loop,
# like the other kernels'), where a plain dot becomes a YNNPACK fusion that measured 10-20 %
# slower here (docs/stream.md). Other platforms keep the plain dot.
DOT_ROWS = 16
# Bytes per device that Dot moves beyond BabelStream's count: its partial sums, their halves and
# its scalar (XLA's "bytes accessed": 264 for float64 on one device, 280 per device sharded).
DOT_EXTRA_BYTES = 4 * DOT_ROWS * 8 + 32
# On CPUs, XLA's tree-reduction rewriter would materialise the products before reducing them
# (4 arrays' traffic instead of 2), and the YNNPACK fusion would take the reduction over.
# Add: XLA:CPU's fusion emitter writes `a + b` (a loop fusion of one op) with 512-bit vectors
# that LLVM splits through the stack on a target that prefers 256-bit ones (two stack stores and
# loads per 8 elements); the classic elemental emitter, which the other kernels' fusions get
# (they hold a broadcast scalar), writes the plain unrolled AVX loop: docs/stream.md, Add.
CPU_COMPILER_OPTIONS = {
    "dot": {
        "xla_cpu_experimental_ynn_fusion_type": "",
        "xla_disable_hlo_passes": "tree_reduction_rewriter",
    },
    "add": {"xla_cpu_use_fusion_emitters": False},
}


def _dot(a, b, c, scalar):
    return jax.lax.platform_dependent(a, b, cpu=_dot_in_rows, default=_dot_plain)


def _accumulator(dtype):
    # bfloat16 accumulates in float32 (the same bytes move; a bf16 sum of 2^25 terms is noise).
    return jnp.float32 if dtype == jnp.bfloat16 else dtype


def _dot_plain(a, b):
    return jnp.dot(a, b, preferred_element_type=_accumulator(a.dtype))


def _dot_in_rows(a, b):
    acc = _accumulator(a.dtype)
    rows = DOT_ROWS if a.shape[0] % DOT_ROWS == 0 else 1
    partial = jnp.sum((a.astype(acc) * b.astype(acc)).reshape(rows, -1), axis=1)
    # Halves added before the last sum: XLA would merge a sum of sums into one reduction of
    # every element, which it runs on one core.
    if rows > 1:
        partial = partial[: rows // 2] + partial[rows // 2 :]
    return jnp.sum(partial)


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
    fn = functools.partial(spec.fn, scalar=scalar)
    if spec.writes is None and placement.num_devices > 1:
        fn = _summed_over_devices(fn, placement)
    jitted = jax.jit(
        fn,
        in_shardings=(placement.sharded,) * 3,
        out_shardings=placement.replicated if spec.writes is None else placement.sharded,
        donate_argnums=donate,
        keep_unused=True,
    )
    arg = jax.ShapeDtypeStruct((elements,), dtype, sharding=placement.sharded)
    options = CPU_COMPILER_OPTIONS.get(spec.key, {}) if placement.platform == "cpu" else {}
    compiled = _compile(jitted.lower(arg, arg, arg), options)
    return CompiledKernel(
        spec=spec,
        compiled=compiled,
        donate_index=donate[0] if donate else None,
        cost=xla_cost(compiled, placement.num_devices),
        allocation=_allocation_check(compiled),
    )


def _compile(lowered, options: dict):
    """`lowered` compiled with `options`; where this XLA no longer knows one of them, without
    it (logged: the kernel may then run slower, and docs/stream.md says why)."""
    try:
        return lowered.compile(compiler_options=options)
    except Exception as e:  # noqa: BLE001 - XLA's own error type
        if not options or "No such compile option" not in str(e):
            raise
        logging.warning("STREAM: compiled without %s (%s)", options, str(e).splitlines()[0])
        return lowered.compile()


def _summed_over_devices(fn: Callable, placement: Placement) -> Callable:
    """A reduction kernel run on each device's shard, then one all-reduce of the scalars (the
    reduction's own layout per device stays what `fn` says, whatever the sharding)."""
    return jax.shard_map(
        lambda a, b, c: jax.lax.psum(fn(a, b, c), STREAM_AXIS),
        mesh=placement.mesh,
        in_specs=(P(STREAM_AXIS),) * 3,
        out_specs=P(),
    )
