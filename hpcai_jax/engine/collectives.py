"""The explicit gradient reduction over `data` (paper's Table 2: communication precision and
communication mode), chosen by --grad_allreduce_dtype and --allreduce.

The step computes each device's local gradient (parameters cast device-varying over `data`,
engine/step.py) and this module sums them over a member's P_degree devices:

- flat: one all-reduce over `data` per gradient leaf (XLA may combine leaves);
- hierarchical: the data axis viewed as nodes × devices per node: reduce-scatter inside a node,
  all-reduce across nodes, all-gather inside a node, on the gradients flattened into one buffer;
- 2d_torus: the same three collectives on the data axis factored into two sides (the inner side
  contiguous), the squarest factoring unless --allreduce_group_size sets the inner side.

Sub-axis collectives are `axis_index_groups` over `data`: jax 0.10 supports them in a shard_map
that does not check replication (a grouped psum raises NotImplementedError under check_vma), so
the reduction runs in its own shard_map with check_vma=False (engine/step.py).

The gradient is cast to the communication dtype before the collectives and back to float32
after. int8 cannot be summed in int8 (it overflows): each device quantizes its gradient with a
per-member, per-tensor scale (max |g| / 127), all-gathers the int8 values and the float32
scales, and sums the dequantized values in float32. That moves P_degree × S bytes per device
instead of a ring all-reduce's 2 (P − 1) / P × 4 S, so it wins on the wire only for P_degree < 8;
the alternative, a reduce-scatter in a wider type, would move int32, no less than float32.

A non-finite local gradient on any device comes out non-finite on every device of its member, in
every mode and dtype (a float sum keeps inf/NaN; int8 carries it in the scale), and no other
member's sum is touched: tests/test_collectives.py.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax.axes import DATA
from hpcai_jax.config import MeshConfig
from hpcai_jax.errors import UsageError

_COMM_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
INT8_MAX = 127.0


@dataclasses.dataclass(frozen=True)
class AllreducePlan:
    """How a member's gradient is summed over its `data` devices."""

    mode: str  # flat | hierarchical | 2d_torus
    dtype: str  # the collectives' element type: float32 | bfloat16 | float16 | int8
    parallel_degree: int
    inner: int  # devices per inner group (a node; the torus's first side); P_degree for flat

    @property
    def outer(self) -> int:
        return self.parallel_degree // self.inner

    def inner_groups(self) -> list[list[int]]:
        """Positions on `data` of each node: contiguous runs of `inner`."""
        return [[o * self.inner + i for i in range(self.inner)] for o in range(self.outer)]

    def outer_groups(self) -> list[list[int]]:
        """Positions on `data` with the same place inside their node, one per node."""
        return [[o * self.inner + i for o in range(self.outer)] for i in range(self.inner)]

    def to_dict(self) -> dict:
        return {
            "allreduce": self.mode,
            "grad_allreduce_dtype": self.dtype,
            "inner_group_size": self.inner,
            "outer_group_size": self.outer,
        }


def _squarest_side(p: int) -> int:
    """The largest divisor of p not above √p (1 for a prime)."""
    return max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)


def resolve_plan(config: MeshConfig, parallel_degree: int, local_device_count: int):
    """The plan for a member's P_degree devices; raises UsageError for impossible groupings."""
    p, mode, size = parallel_degree, config.allreduce, config.allreduce_group_size
    if config.grad_allreduce_dtype == "int8" and mode != "flat":
        raise UsageError(
            f"--grad_allreduce_dtype=int8 works with --allreduce=flat only, not {mode} "
            "(int8 is all-gathered with its scales, not reduce-scattered)"
        )
    if mode == "flat":
        return AllreducePlan(mode, config.grad_allreduce_dtype, p, p)
    if mode == "hierarchical":
        inner = size or local_device_count
        source = "--allreduce_group_size" if size else "devices per process"
    else:
        inner = size or _squarest_side(p)
        source = "--allreduce_group_size" if size else "the squarest factoring"
        if inner == 1:
            raise UsageError(
                f"--allreduce=2d_torus: P_degree={p} does not factor into two sides > 1"
            )
    if p % inner or not 1 < inner < p:
        raise UsageError(
            f"--allreduce={mode}: inner group of {inner} ({source}) must divide "
            f"P_degree={p} and leave at least 2 groups of at least 2 devices"
        )
    return AllreducePlan(mode, config.grad_allreduce_dtype, p, inner)


def _int8_sum(g: jax.Array) -> jax.Array:
    """Σ over `data` of a [m_local, ...] float32 array via int8 values and per-member scales."""
    axes = tuple(range(1, g.ndim))
    scale = jnp.max(jnp.abs(g), axis=axes, keepdims=True) / INT8_MAX
    # Only an all-zero tensor gets scale 1. A tensor holding an inf or NaN keeps its non-finite
    # scale (max|g| is inf or NaN): every device's dequantized sum of that member's tensor is
    # then NaN, so the fault reaches the float16 skip and the divergence flags instead of being
    # quantized into finite, wrong int8 values.
    scale = jnp.where(scale == 0, 1.0, scale)
    q = jnp.clip(jnp.round(g / scale), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    qs = lax.all_gather(q, DATA)  # [P, m_local, ...] int8
    scales = lax.all_gather(scale, DATA)
    return jnp.sum(qs.astype(jnp.float32) * scales, axis=0)


def _grouped_sum(plan: AllreducePlan, flat: jax.Array) -> jax.Array:
    """Reduce-scatter inside, all-reduce across, all-gather inside, on a 1-D buffer."""
    pad = -flat.shape[0] % plan.inner
    x = jnp.pad(flat, (0, pad))
    x = lax.psum_scatter(x, DATA, tiled=True, axis_index_groups=plan.inner_groups())
    x = lax.psum(x, DATA, axis_index_groups=plan.outer_groups())
    x = lax.all_gather(x, DATA, tiled=True, axis_index_groups=plan.inner_groups())
    return x[: flat.shape[0]]


def reduce_gradients(plan: AllreducePlan, grads):
    """Σ over `data` of every device's local gradients (a float32 tree); inside a shard_map with
    check_vma=False. The result is float32 and the same on every device of a member."""
    if plan.dtype == "int8":
        return jax.tree.map(_int8_sum, grads)
    comm = _COMM_DTYPES[plan.dtype]
    if plan.mode == "flat":
        return jax.tree.map(lambda g: lax.psum(g.astype(comm), DATA).astype(g.dtype), grads)
    leaves, treedef = jax.tree.flatten(grads)
    flat = jnp.concatenate([leaf.astype(comm).ravel() for leaf in leaves])
    summed = _grouped_sum(plan, flat).astype(jnp.float32)
    out, offset = [], 0
    for leaf in leaves:
        out.append(summed[offset : offset + leaf.size].reshape(leaf.shape).astype(leaf.dtype))
        offset += leaf.size
    return jax.tree.unflatten(treedef, out)
