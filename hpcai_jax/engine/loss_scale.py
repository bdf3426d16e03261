"""Dynamic loss scaling for --dtype=float16, one scale per member, kept in its state.

float16 gradients underflow below 6e-8; scaling the loss shifts them into range. The master
weights stay float32 and the gradients are unscaled (in float32) before the update. A step
whose reduced gradient holds an inf or NaN is skipped: the member's state is left as it was
(parameters, optimizer state, BatchNorm statistics, step counter), the scale halves, and the
member's skipped-step count grows. After GROWTH_INTERVAL good
steps in a row the scale doubles. These are flax's DynamicScale defaults; this small version
lives in the member state so that it is stacked, sharded and checkpointed like the rest.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

INITIAL_SCALE = 2.0**15
GROWTH_INTERVAL = 2000
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5


class LossScale(struct.PyTreeNode):
    scale: jax.Array  # float32
    good_steps: jax.Array  # int32: finite steps since the last change
    skipped: jax.Array  # int32: steps skipped on overflow, over the run
    growth_interval: int = struct.field(pytree_node=False, default=GROWTH_INTERVAL)

    @classmethod
    def create(cls, growth_interval: int = GROWTH_INTERVAL) -> LossScale:
        return cls(
            jnp.asarray(INITIAL_SCALE, jnp.float32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.int32),
            growth_interval,
        )

    def adjust(self, finite: jax.Array) -> LossScale:
        """The scale after a step whose gradient was (not) finite."""
        grow = finite & (self.good_steps + 1 >= self.growth_interval)
        scale = jnp.where(
            finite,
            jnp.where(grow, self.scale * GROWTH_FACTOR, self.scale),
            self.scale * BACKOFF_FACTOR,
        )
        good = jnp.where(finite & ~grow, self.good_steps + 1, 0)
        return self.replace(
            scale=scale, good_steps=good, skipped=self.skipped + (~finite).astype(jnp.int32)
        )


def all_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def keep_if(finite: jax.Array, new, old):
    """new where the step was finite, else old (leaf by leaf)."""
    return jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
