"""hpcai_jax/engine/optimizer.py's learning-rate schedules: every schedule, step by step,
against hand-rolled formulas and literal figures; the flags that shape them are checked up front
with one-line errors."""

from __future__ import annotations

import math

import numpy as np
import optax
import pytest

from hpcai_jax.config import OptimConfig
from hpcai_jax.engine.optimizer import make_schedule
from hpcai_jax.errors import UsageError


def _rates(config: OptimConfig, batch_size: int, steps_per_epoch: int, total_steps: int):
    """The learning rate at steps 0 .. total_steps + 2 (past the end: the end value holds)."""
    schedule = make_schedule(config, batch_size, steps_per_epoch, total_steps)
    return np.array([float(schedule(t)) for t in range(total_steps + 3)])


def _reference(kind, peak, warmup, total, end=0.0, power=2.0, boundaries=(), factor=0.1):
    """The schedules as written in docs/optimizers.md, in float64."""
    decay = max(total - warmup, 1)
    rates = []
    for t in range(total + 3):
        if t < warmup:
            rates.append(peak * t / warmup)
            continue
        s = min(t - warmup, decay)
        if kind == "constant":
            rates.append(peak)
        elif kind == "warmup_cosine":
            rates.append(end + (peak - end) * 0.5 * (1 + math.cos(math.pi * s / decay)))
        elif kind == "warmup_polynomial":
            rates.append(end + (peak - end) * (1 - s / decay) ** power)
        else:
            rates.append(peak * factor ** sum(t >= b for b in boundaries))
    return np.array(rates)


# learning_rate 0.3 at reference batch 128, batch 256: peak 0.6.
BASE = dict(learning_rate=0.3, lr_reference_batch=128)


@pytest.mark.parametrize("warmup_epochs", [0.0, 1.5])
@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("constant", {}),
        ("warmup_cosine", {}),
        ("warmup_cosine", dict(lr_end_value=0.05)),
        ("warmup_polynomial", {}),
        ("warmup_polynomial", dict(lr_end_value=1e-3, lr_decay_power=3.0)),
        ("step", dict(lr_step_epochs="1,2.5", lr_step_factor=0.2)),
    ],
)
def test_every_schedule_matches_its_formula(kind, extra, warmup_epochs):
    # 4 steps per epoch, 14 steps: warm-up 0 or 6 steps; step boundaries at steps 4 and 10.
    config = OptimConfig(lr_schedule=kind, warmup_epochs=warmup_epochs, **BASE, **extra)
    want = _reference(
        kind,
        peak=0.6,
        warmup=round(warmup_epochs * 4),
        total=14,
        end=extra.get("lr_end_value", 0.0),
        power=extra.get("lr_decay_power", 2.0),
        boundaries=(4, 10),
        factor=extra.get("lr_step_factor", 0.1),
    )
    got = _rates(config, batch_size=256, steps_per_epoch=4, total_steps=14)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)  # float32


def test_warmup_cosine_is_the_engine_first_schedule():
    # The existing default must not move: optax's warm-up + cosine as the engine built it first.
    config = OptimConfig(warmup_epochs=2.0, **BASE)
    old = optax.warmup_cosine_decay_schedule(0.0, 0.6, warmup_steps=8, decay_steps=20)
    want = np.array([float(old(t)) for t in range(23)])
    np.testing.assert_array_equal(_rates(config, 256, 4, 20), want)
    cold = optax.cosine_decay_schedule(0.6, decay_steps=20)
    want = np.array([float(cold(t)) for t in range(23)])
    config = OptimConfig(warmup_epochs=0.0, **BASE)
    np.testing.assert_array_equal(_rates(config, 256, 4, 20), want)


def test_polynomial_literal_figures():
    # peak 1, warm-up 2 steps, 4 decay steps, power 2, end 0.1: 0.1 + 0.9 (1 - s/4)^2.
    config = OptimConfig(
        learning_rate=1.0,
        lr_reference_batch=64,
        lr_schedule="warmup_polynomial",
        warmup_epochs=1.0,
        lr_end_value=0.1,
    )
    got = _rates(config, batch_size=64, steps_per_epoch=2, total_steps=6)
    want = [0.0, 0.5, 1.0, 0.60625, 0.325, 0.15625, 0.1, 0.1, 0.1]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_step_literal_figures_count_epochs_from_the_start():
    # peak 0.4, warm-up 1 epoch = 2 steps, steps at epochs 1.5 and 3 (steps 3 and 6): the first
    # boundary is one step after the warm-up, not 1.5 epochs after it.
    config = OptimConfig(
        learning_rate=0.4,
        lr_reference_batch=32,
        lr_schedule="step",
        warmup_epochs=1.0,
        lr_step_epochs="1.5,3",
    )
    got = _rates(config, batch_size=32, steps_per_epoch=2, total_steps=7)
    want = [0.0, 0.2, 0.4, 0.04, 0.04, 0.04, 0.004, 0.004, 0.004, 0.004]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_constant_warms_up_too():
    config = OptimConfig(
        learning_rate=1.0, lr_reference_batch=8, lr_schedule="constant", warmup_epochs=0.5
    )
    got = _rates(config, batch_size=8, steps_per_epoch=4, total_steps=4)
    np.testing.assert_allclose(got, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0])


def test_the_end_value_is_not_scaled_by_the_batch():
    # Linear scaling rule: batch 4× the reference → peak 4× the base; the end value stays.
    config = OptimConfig(
        learning_rate=0.25,
        lr_reference_batch=64,
        lr_schedule="warmup_polynomial",
        lr_end_value=0.125,
    )
    got = _rates(config, batch_size=256, steps_per_epoch=4, total_steps=4)
    np.testing.assert_allclose(got[[0, 4]], [1.0, 0.125])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (dict(lr_step_epochs="30,x"), "--lr_step_epochs=30,x: expected comma-separated epochs"),
        (dict(lr_step_epochs="60,30"), "--lr_step_epochs=60,30: expected .* increasing"),
        (dict(lr_step_epochs=""), "--lr_step_epochs=: expected comma-separated"),
        (dict(lr_step_epochs="0,30"), "--lr_step_epochs=0,30: expected comma-separated epochs > 0"),
        (dict(lr_step_epochs="30,30"), "--lr_step_epochs=30,30"),
        (dict(lr_step_epochs="30,inf"), "--lr_step_epochs=30,inf"),
        (dict(lr_step_factor=0.0), r"--lr_step_factor=0.0: expected in \(0, 1\)"),
        (dict(lr_step_factor=1.5), r"--lr_step_factor=1.5: expected in \(0, 1\)"),
        (dict(lr_decay_power=0.0), "--lr_decay_power=0.0: expected > 0"),
        (dict(lr_end_value=-0.1), "--lr_end_value=-0.1: expected >= 0"),
        (dict(warmup_epochs=-1.0), "--warmup_epochs=-1.0: expected >= 0"),
        (dict(lr_schedule="linear"), "--lr_schedule='linear': expected one of constant"),
    ],
)
def test_bad_schedule_flags_give_one_line_errors(setting, message):
    with pytest.raises(UsageError, match=message) as error:
        OptimConfig(**setting).validate()
    assert "\n" not in str(error.value)
