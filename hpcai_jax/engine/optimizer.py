"""Every member's optimizer: the paper's Table 2 default (SGD with momentum) and its alternatives
(Adam, AdaGrad, LARS, LAMB), on its learning-rate schedule; and float16's loss scale.

The engine applies the update per member, under vmap or an unrolled loop inside shard_map
(engine/step.py: member_train_step), so every per-layer figure (LARS/LAMB trust ratios, Adam's
moments) is each member's own and never mixes members. docs/optimizers.md has the update rules.

The learning-rate schedule (the paper's Table 2: warm-up and the linear scaling rule): every
schedule starts with a linear warm-up from 0 to the peak over --warmup_epochs, the peak being
learning_rate × batch_size / lr_reference_batch (Goyal et al.'s linear scaling rule). What follows
is the schedule's own: constant, cosine or polynomial decay over the steps left (to
--lr_end_value), or steps down by --lr_step_factor at the epochs --lr_step_epochs, counted from
the start of training as in Goyal et al.'s 30,60,80. docs/optimizers.md has the formulas.

float16's dynamic loss scaling (`LossScale`): one scale per member, kept in its state.
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


# The learning-rate schedule (the module docstring).


def peak_learning_rate(config: OptimConfig, batch_size: int) -> float:
    """The linear scaling rule: the rate the warm-up reaches, for a member's batch."""
    return config.learning_rate * batch_size / config.lr_reference_batch


def make_schedule(
    config: OptimConfig, batch_size: int, steps_per_epoch: int, total_steps: int
) -> optax.Schedule:
    """The learning rate as a function of the step count (0 for the first step)."""
    peak = peak_learning_rate(config, batch_size)
    warmup = int(round(config.warmup_epochs * steps_per_epoch))
    # Steps left after the warm-up (at least one, so that a run shorter than its warm-up still
    # has a well-defined decay).
    decay_steps = max(total_steps - warmup, 1)
    after = _AFTER_WARMUP[config.lr_schedule](config, peak, decay_steps, warmup, steps_per_epoch)
    if not warmup:
        return after
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])


# Each takes (config, peak, decay_steps, warmup, steps_per_epoch) and returns a schedule of the
# steps since the warm-up ended.
_Builder = Callable[[OptimConfig, float, int, int, int], optax.Schedule]


def _constant(config, peak, decay_steps, warmup, steps_per_epoch):
    return optax.constant_schedule(peak)


def _cosine(config, peak, decay_steps, warmup, steps_per_epoch):
    # alpha is the end value as a fraction of the peak: peak → lr_end_value.
    alpha = config.lr_end_value / peak
    return optax.cosine_decay_schedule(peak, decay_steps=decay_steps, alpha=alpha)


def _polynomial(config, peak, decay_steps, warmup, steps_per_epoch):
    return optax.polynomial_schedule(
        init_value=peak,
        end_value=config.lr_end_value,
        power=config.lr_decay_power,
        transition_steps=decay_steps,
    )


def _step(config, peak, decay_steps, warmup, steps_per_epoch):
    boundaries = jnp.asarray([round(e * steps_per_epoch) for e in config.step_epochs])
    factor = config.lr_step_factor

    def schedule(count):
        # Boundaries count from the start of training, the schedule from the end of the warm-up.
        passed = jnp.sum(count + warmup >= boundaries)
        return peak * factor**passed

    return schedule


_AFTER_WARMUP: dict[str, _Builder] = {
    "constant": _constant,
    "warmup_cosine": _cosine,
    "warmup_polynomial": _polynomial,
    "step": _step,
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
