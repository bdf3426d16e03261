"""Every member's learning-rate schedule (the paper's Table 2: warm-up and the linear scaling rule).

All schedules share the same first part: a linear warm-up from 0 to the peak over --warmup_epochs,
the peak being learning_rate × batch_size / lr_reference_batch (Goyal et al.'s linear scaling
rule). What follows is the schedule's own: constant, cosine or polynomial decay over the steps left
(to --lr_end_value), or steps down by --lr_step_factor at the epochs --lr_step_epochs, counted from
the start of training as in Goyal et al.'s 30,60,80. docs/optimizers.md has the formulas.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import optax

from hpcai_jax.config import OptimConfig


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
