"""Every member's optimizer (the paper's Table 2 default: SGD with momentum, warm-up and the
linear scaling rule). Applied per member under the ensemble transform, so per-member transforms
never mix members."""

from __future__ import annotations

import jax
import optax

from hpcai_jax.config import OptimConfig


def make_optimizer(
    config: OptimConfig, batch_size: int, steps_per_epoch: int, total_steps: int
) -> optax.GradientTransformation:
    """SGD with momentum, the linear scaling rule, optional warm-up + cosine decay, and weight
    decay on kernels only (not on BatchNorm scales and biases)."""
    peak = config.learning_rate * batch_size / config.lr_reference_batch
    if config.lr_schedule == "constant":
        schedule = optax.constant_schedule(peak)
    else:
        warmup = int(round(config.warmup_epochs * steps_per_epoch))
        if warmup:
            schedule = optax.warmup_cosine_decay_schedule(
                init_value=0.0,
                peak_value=peak,
                warmup_steps=warmup,
                decay_steps=max(total_steps, warmup + 1),
                end_value=0.0,
            )
        else:
            schedule = optax.cosine_decay_schedule(peak, decay_steps=max(total_steps, 1))
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)  # noqa: E731
    return optax.chain(
        optax.add_decayed_weights(config.weight_decay, mask=decay_mask),
        optax.sgd(schedule, momentum=config.momentum or None),
    )
