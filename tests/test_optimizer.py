"""Fast numerical tests of hpcai_jax/ensemble.py::make_optimizer: weight decay on kernels only,
and the linear scaling rule for the peak learning rate. Learning rates and decays are powers of
two, so every expected value is exact in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hpcai_jax.config import OptimConfig
from hpcai_jax.engine.optimizer import make_optimizer


def _params():
    return {
        "conv": {"kernel": jnp.ones((3, 3, 1, 2)), "bias": jnp.ones(2)},
        "bn": {"scale": jnp.ones(2)},
        "dense": {"kernel": jnp.full((4, 2), 2.0)},
    }


# Peak 0.5 (batch = reference batch), decay 0.25, no momentum: exact in float32.
DECAY = OptimConfig(
    learning_rate=0.5,
    lr_reference_batch=128,
    momentum=0.0,
    weight_decay=0.25,
    lr_schedule="constant",
)


def _step(tx, params, grads):
    updates, _ = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates)


def test_weight_decay_moves_kernels_only():
    # Peak 0.5 (batch = reference batch), decay 0.25, no momentum, zero gradients: one step
    # moves a kernel weight w by -0.5 * 0.25 * w and leaves biases and BatchNorm scales alone.
    tx = make_optimizer(DECAY, batch_size=128, steps_per_epoch=10, total_steps=10)
    params = _params()
    new = _step(tx, params, jax.tree.map(jnp.zeros_like, params))
    np.testing.assert_array_equal(new["conv"]["kernel"], np.full((3, 3, 1, 2), 0.875, np.float32))
    np.testing.assert_array_equal(new["dense"]["kernel"], np.full((4, 2), 1.75, np.float32))
    np.testing.assert_array_equal(new["conv"]["bias"], np.ones(2, np.float32))
    np.testing.assert_array_equal(new["bn"]["scale"], np.ones(2, np.float32))


def test_no_weight_decay_leaves_every_parameter_with_zero_gradients():
    config = OptimConfig(learning_rate=0.5, momentum=0.0, weight_decay=0.0, lr_schedule="constant")
    tx = make_optimizer(config, batch_size=256, steps_per_epoch=10, total_steps=10)
    params = _params()
    new = _step(tx, params, jax.tree.map(jnp.zeros_like, params))
    jax.tree.map(np.testing.assert_array_equal, new, params)


def test_weight_decay_adds_to_the_gradient_of_kernels():
    # gradient 1 everywhere: kernel w -> w - lr * (1 + wd * w); bias, scale -> 1 - lr * 1.
    tx = make_optimizer(DECAY, batch_size=128, steps_per_epoch=10, total_steps=10)
    params = _params()
    new = _step(tx, params, jax.tree.map(jnp.ones_like, params))
    np.testing.assert_array_equal(new["conv"]["kernel"], np.full((3, 3, 1, 2), 0.375, np.float32))
    np.testing.assert_array_equal(new["dense"]["kernel"], np.full((4, 2), 1.25, np.float32))
    np.testing.assert_array_equal(new["conv"]["bias"], np.full(2, 0.5, np.float32))
    np.testing.assert_array_equal(new["bn"]["scale"], np.full(2, 0.5, np.float32))


@pytest.mark.parametrize(
    ("learning_rate", "batch_size", "reference", "peak"),
    [
        (0.5, 256, 256, 0.5),
        (0.5, 64, 256, 0.125),
        (0.5, 1024, 256, 2.0),
        (0.25, 16, 128, 0.03125),
        (1.0, 3, 4, 0.75),
    ],
)
def test_peak_learning_rate_follows_the_linear_scaling_rule(
    learning_rate, batch_size, reference, peak
):
    # Constant schedule, no momentum, no decay, gradient 1: every step moves each weight by -peak.
    config = OptimConfig(
        learning_rate=learning_rate,
        lr_reference_batch=reference,
        momentum=0.0,
        weight_decay=0.0,
        lr_schedule="constant",
    )
    tx = make_optimizer(config, batch_size=batch_size, steps_per_epoch=5, total_steps=5)
    params = {"w": jnp.zeros(3)}
    grads = {"w": jnp.ones(3)}
    state = tx.init(params)
    for _ in range(3):  # constant: the same step every time
        updates, state = tx.update(grads, state, params)
        np.testing.assert_array_equal(updates["w"], np.full(3, -peak, np.float32))


def test_warmup_starts_from_zero_and_cosine_without_warmup_starts_at_the_peak():
    grads = {"w": jnp.ones(1)}
    params = {"w": jnp.zeros(1)}
    common = {"learning_rate": 0.5, "lr_reference_batch": 128, "momentum": 0.0, "weight_decay": 0.0}
    warm = make_optimizer(
        OptimConfig(lr_schedule="warmup_cosine", warmup_epochs=1.0, **common),
        batch_size=256,
        steps_per_epoch=4,
        total_steps=100,
    )
    updates, state = warm.update(grads, warm.init(params), params)
    np.testing.assert_array_equal(updates["w"], [0.0])
    updates, _ = warm.update(grads, state, params)
    np.testing.assert_array_equal(updates["w"], [-0.25])  # peak 1.0, step 1 of 4 of warm-up
    cold = make_optimizer(
        OptimConfig(lr_schedule="warmup_cosine", warmup_epochs=0.0, **common),
        batch_size=256,
        steps_per_epoch=4,
        total_steps=100,
    )
    updates, _ = cold.update(grads, cold.init(params), params)
    np.testing.assert_array_equal(updates["w"], [-1.0])
