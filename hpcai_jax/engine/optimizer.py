"""Every member's optimizer: the paper's Table 2 default (SGD with momentum) and its alternatives
(Adam, AdaGrad, LARS, LAMB), on the learning-rate schedule of `schedules.py`.

The engine applies the update per member, under vmap or an unrolled loop inside shard_map
(engine/step.py: member_train_step), so every per-layer figure (LARS/LAMB trust ratios, Adam's
moments) is each member's own and never mixes members. docs/optimizers.md has the update rules.

Below them, float16's dynamic loss scaling (`LossScale`, one scale per member): dynamic loss scaling for --dtype=float16, one scale per member, kept in its state.

float16 gradients underflow below 6e-8; scaling the loss shifts them into range. The master
weights stay float32 and the gradients are unscaled (in float32) before the update. A step
whose reduced gradient holds an inf or NaN is skipped: the member's state is left as it was
(parameters, optimizer state, BatchNorm statistics, step counter), the scale halves, and the
member's skipped-step count grows. After GROWTH_INTERVAL good
steps in a row the scale doubles. These are flax's DynamicScale defaults; this small version
lives in the member state so that it is stacked, sharded and checkpointed like the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax

from hpcai_jax.config import OptimConfig
from hpcai_jax.engine.schedules import make_schedule

# Parameters that get neither weight decay nor a trust ratio, by leaf name: biases and the
# normalisation layers' scales (flax's BatchNorm, LayerNorm and GroupNorm name theirs "scale" and
# "bias"). MLPerf's LARS recipe excludes the same.
EXEMPT_NAMES = ("bias", "scale")

# AdaGrad's epsilon inside the square root: optax's default, not a flag (it only guards 0 / 0).
_ADAGRAD_EPS = 1e-7


def kernel_mask(params):
    """True for the parameters that are decayed and trust-ratio scaled: a leaf not named in
    EXEMPT_NAMES, and never a vector (ndim ≤ 1), so that a normalisation parameter under another
    name is exempt too. Per member: under the ensemble transform a leaf has no member axis."""

    def is_kernel(path, leaf) -> bool:
        name = getattr(path[-1], "key", None) if path else None
        return leaf.ndim > 1 and name not in EXEMPT_NAMES

    return jax.tree_util.tree_map_with_path(is_kernel, params)


def make_optimizer(
    config: OptimConfig,
    batch_size: int,
    steps_per_epoch: int,
    total_steps: int,
    model_axis: str | None = None,
) -> optax.GradientTransformation:
    """`config.optimizer` on the schedule (linear scaling rule, warm-up), weight decay and trust
    ratios on kernels only. With `model_axis` every parameter is split over that mesh axis
    (--model_parallel), so a layer's norm sums its squares over the axis."""
    schedule = make_schedule(config, batch_size, steps_per_epoch, total_steps)
    return _OPTIMIZERS[config.optimizer](config, schedule, model_axis)


def _trust_ratio(
    model_axis: str | None, trust_coefficient: float = 1.0, eps: float = 0.0
) -> optax.GradientTransformation:
    """optax.scale_by_trust_ratio, or the same with whole-layer norms of split layers."""
    if model_axis is None:
        return optax.scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps)

    def norm(x):
        return jnp.sqrt(lax.psum(jnp.sum(jnp.square(x)), model_axis))

    def update(updates, state, params):
        def scale(u, p):
            p_norm, u_norm = norm(p), norm(u)
            ratio = trust_coefficient * p_norm / (u_norm + eps)
            # optax's rule: a ratio of 1 where either norm is 0.
            return u * jnp.where((p_norm == 0.0) | (u_norm == 0.0), 1.0, ratio).astype(u.dtype)

        return jax.tree.map(scale, updates, params), state

    return optax.GradientTransformation(optax.init_empty_state, update)


def _decay(config: OptimConfig) -> optax.GradientTransformation:
    return optax.add_decayed_weights(config.weight_decay, mask=kernel_mask)


def _sgd(config, schedule, model_axis):
    # L2 added to the gradient before momentum (the ResNet recipes' weight decay). The engine's
    # first optimizer, unchanged: the same updates and the same layout of its state.
    momentum = config.momentum or None
    return optax.chain(
        _decay(config), optax.sgd(schedule, momentum=momentum, nesterov=config.nesterov)
    )


def _adam(config, schedule, model_axis):
    # AdamW: the decay is added after Adam's scaling (decoupled), then scaled by the schedule.
    return optax.adamw(
        schedule,
        b1=config.adam_b1,
        b2=config.adam_b2,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        mask=kernel_mask,
    )


def _adagrad(config, schedule, model_axis):
    # optax.adagrad has no weight decay: its two parts with the decoupled decay between them.
    return optax.chain(
        optax.scale_by_rss(config.adagrad_initial_accumulator, eps=_ADAGRAD_EPS),
        _decay(config),
        optax.scale_by_learning_rate(schedule),
    )


def _lars(config, schedule, model_axis):
    # optax.lars's chain: g + wd·w on kernels, × eta‖w‖/‖g + wd·w‖ on kernels, × learning rate,
    # momentum. eps 0 as in MLPerf's reference; a ratio of 1 where either norm is 0.
    return optax.chain(
        optax.add_decayed_weights(config.weight_decay, mask=kernel_mask),
        optax.masked(_trust_ratio(model_axis, config.lars_trust_coefficient, eps=0.0), kernel_mask),
        optax.scale_by_learning_rate(schedule),
        optax.trace(decay=config.momentum, nesterov=config.nesterov),
    )


def _lamb(config, schedule, model_axis):
    # optax.lamb's chain, with the trust ratio masked too: optax.lamb's `mask` masks only the
    # weight decay and applies the trust ratio to every parameter.
    return optax.chain(
        optax.scale_by_adam(b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps),
        _decay(config),
        optax.masked(_trust_ratio(model_axis), kernel_mask),
        optax.scale_by_learning_rate(schedule),
    )


_OPTIMIZERS: dict[
    str, Callable[[OptimConfig, optax.Schedule, str | None], optax.GradientTransformation]
] = {
    "sgd": _sgd,
    "adam": _adam,
    "adagrad": _adagrad,
    "lars": _lars,
    "lamb": _lamb,
}


# float16's dynamic loss scaling (the module docstring).
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
