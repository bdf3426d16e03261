"""Fast numerical tests of hpcai_jax/engine/optimizer.py::make_optimizer: weight decay on kernels
only, the linear scaling rule for the peak learning rate (learning rates and decays are powers of
two there, so those expected values are exact in float32), every optimizer against a hand-rolled
numpy reference with its masks, per-member LARS trust ratios in one ensemble step, and label
smoothing."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import plan_for
from jax.sharding import NamedSharding

from hpcai_jax import config as C
from hpcai_jax.axes import BATCH_SPEC, MEMBER_SPEC
from hpcai_jax.config import OptimConfig
from hpcai_jax.data.source import ImageSpec
from hpcai_jax.engine.mesh import make_mesh, resolve_layout
from hpcai_jax.engine.optimizer import kernel_mask, make_optimizer
from hpcai_jax.engine.plan import UNROLL, MemberMapping
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.engine.step import build_train_step, map_members, member_train_step
from hpcai_jax.errors import UsageError
from hpcai_jax.flags import FLAGS, config_from_flags
from hpcai_jax.workloads import make_workload
from hpcai_jax.workloads.classification import ClassificationWorkload


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


# ---- every optimizer against a hand-rolled reference -------------------------------------------

# Peak 0.1 (batch = reference batch) after one warm-up epoch of 2 steps: the rate varies, so the
# reference also checks where each optimizer applies it (before or after momentum).
RATES = (0.0, 0.05, 0.1, 0.1)
COMMON = dict(
    learning_rate=0.1,
    lr_reference_batch=64,
    lr_schedule="constant",
    warmup_epochs=1.0,
    momentum=0.9,
    weight_decay=0.05,
    lars_trust_coefficient=0.02,
)
CASES = {
    "sgd": OptimConfig(optimizer="sgd", **COMMON),
    "sgd_nesterov": OptimConfig(optimizer="sgd", nesterov=True, **COMMON),
    "adam": OptimConfig(optimizer="adam", adam_b1=0.8, adam_b2=0.99, adam_eps=1e-3, **COMMON),
    "adagrad": OptimConfig(optimizer="adagrad", adagrad_initial_accumulator=0.5, **COMMON),
    "lars": OptimConfig(optimizer="lars", **COMMON),
    "lars_nesterov": OptimConfig(optimizer="lars", nesterov=True, **COMMON),
    "lamb": OptimConfig(optimizer="lamb", adam_b1=0.8, adam_b2=0.99, adam_eps=1e-3, **COMMON),
}


def _tree(rng):
    """Kernels (conv, dense), biases and a BatchNorm scale and bias, float32."""
    shapes = {
        ("conv", "kernel"): (2, 3),
        ("conv", "bias"): (3,),
        ("bn", "scale"): (3,),
        ("bn", "bias"): (3,),
        ("dense", "kernel"): (3, 2),
    }
    return {key: rng.normal(size=shape).astype(np.float32) for key, shape in shapes.items()}


def _nested(flat):
    out = {}
    for (module, name), value in flat.items():
        out.setdefault(module, {})[name] = jnp.asarray(value)
    return out


def _reference(config: OptimConfig, params: dict, grads: list[dict]) -> dict:
    """The update rules of docs/optimizers.md in float64, leaf by leaf; only kernels (not biases,
    not normalisation scales) get weight decay and a trust ratio."""
    w = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    acc = {k: np.full_like(x, config.adagrad_initial_accumulator) for k, x in w.items()}
    mu, b1, b2, eps = config.momentum, config.adam_b1, config.adam_b2, config.adam_eps
    norm = np.linalg.norm
    for t, (lr, g_t) in enumerate(zip(RATES, grads, strict=True), start=1):
        for k in w:
            p, g = w[k], g_t[k].astype(np.float64)
            kernel = k[1] == "kernel"
            wd = config.weight_decay if kernel else 0.0
            if config.optimizer == "sgd":
                g = g + wd * p
                m[k] = g + mu * m[k]
                step = -lr * (g + mu * m[k] if config.nesterov else m[k])
            elif config.optimizer == "lars":
                g = g + wd * p
                ratio = config.lars_trust_coefficient * norm(p) / norm(g) if kernel else 1.0
                u = -lr * ratio * g
                m[k] = u + mu * m[k]
                step = u + mu * m[k] if config.nesterov else m[k]
            elif config.optimizer == "adagrad":
                acc[k] = acc[k] + g**2
                step = -lr * (g / np.sqrt(acc[k] + 1e-7) + wd * p)
            else:  # adam, lamb
                m[k] = b1 * m[k] + (1 - b1) * g
                v[k] = b2 * v[k] + (1 - b2) * g**2
                a = (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + eps) + wd * p
                if config.optimizer == "lamb" and kernel:
                    a = a * norm(p) / norm(a)
                step = -lr * a
            w[k] = p + step
    return w


@pytest.mark.parametrize("case", list(CASES))
def test_every_optimizer_matches_its_reference_with_masks(case):
    config = CASES[case]
    rng = np.random.default_rng(7)
    params = _tree(rng)
    params[("dense", "kernel")] *= 5.0  # a second kernel with a very different norm
    grads = [_tree(rng) for _ in RATES]
    tx = make_optimizer(config, batch_size=64, steps_per_epoch=2, total_steps=len(RATES))
    state_params = _nested(params)
    state = tx.init(state_params)
    update = jax.jit(tx.update)
    for g in grads:
        updates, state = update(_nested(g), state, state_params)
        state_params = optax.apply_updates(state_params, updates)
    want = _reference(config, params, grads)
    for (module, name), value in want.items():
        np.testing.assert_allclose(
            state_params[module][name], value, rtol=2e-5, atol=1e-6, err_msg=f"{module}/{name}"
        )


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adagrad", "lars", "lamb"])
def test_zero_gradients_move_only_kernels(optimizer):
    # Weight decay alone moves kernels; biases and BatchNorm scales and biases stay exactly.
    config = OptimConfig(
        optimizer=optimizer,
        learning_rate=0.5,
        lr_reference_batch=128,
        weight_decay=0.25,
        lr_schedule="constant",
    )
    tx = make_optimizer(config, batch_size=128, steps_per_epoch=10, total_steps=10)
    params = _params()
    params["bn"]["bias"] = jnp.full(2, 3.0)
    new = _step(tx, params, jax.tree.map(jnp.zeros_like, params))
    for module, name in (("conv", "bias"), ("bn", "scale"), ("bn", "bias")):
        np.testing.assert_array_equal(new[module][name], params[module][name])
    for module in ("conv", "dense"):
        assert np.all(np.abs(new[module]["kernel"]) < np.abs(params[module]["kernel"]))


def test_lars_trust_ratio_scales_kernels_and_not_biases():
    # lr 0.5, no decay, no momentum, gradient 1: kernel ones(2, 2) has ‖w‖ = ‖g‖ = 2, so its step
    # is 0.5 × 0.001 × 2 / 2; the bias (‖w‖ 2, ‖g‖ 2 too) takes the plain step 0.5.
    config = OptimConfig(
        optimizer="lars",
        learning_rate=0.5,
        lr_reference_batch=8,
        momentum=0.0,
        weight_decay=0.0,
        lr_schedule="constant",
    )
    tx = make_optimizer(config, batch_size=8, steps_per_epoch=1, total_steps=1)
    params = {"conv": {"kernel": jnp.ones((2, 2)), "bias": jnp.full(4, 1.0)}}
    new = _step(tx, params, jax.tree.map(jnp.ones_like, params))
    np.testing.assert_allclose(new["conv"]["kernel"], np.full((2, 2), 1 - 0.0005), rtol=1e-7)
    np.testing.assert_array_equal(new["conv"]["bias"], np.full(4, 0.5, np.float32))


def test_lamb_trust_ratio_scales_kernels_and_not_normalisation_scales():
    # First Adam step: m̂ / (√v̂ + eps) = 1 for gradient 1 (eps ≈ 0). Kernel 3·ones(2, 2): ‖w‖ = 6,
    # ‖u‖ = 2, ratio 3, step 3 × 0.125. BatchNorm scale 3·ones(2) would get ratio 3 too, but is
    # exempt: step 0.125.
    config = OptimConfig(
        optimizer="lamb",
        learning_rate=0.125,
        lr_reference_batch=8,
        weight_decay=0.0,
        adam_eps=1e-12,
        lr_schedule="constant",
    )
    tx = make_optimizer(config, batch_size=8, steps_per_epoch=1, total_steps=1)
    params = {"conv": {"kernel": jnp.full((2, 2), 3.0)}, "bn": {"scale": jnp.full(2, 3.0)}}
    new = _step(tx, params, jax.tree.map(jnp.ones_like, params))
    np.testing.assert_allclose(new["conv"]["kernel"], np.full((2, 2), 3 - 0.375), rtol=1e-6)
    np.testing.assert_allclose(new["bn"]["scale"], np.full(2, 3 - 0.125), rtol=1e-6)


def test_kernel_mask_is_by_name_and_rank():
    params = {
        "Conv_0": {"kernel": jnp.ones((3, 3, 1, 2)), "bias": jnp.ones(2)},
        "BatchNorm_0": {"scale": jnp.ones(2), "bias": jnp.ones(2)},
        "Dense_0": {"kernel": jnp.ones((4, 2))},
        "gain": jnp.ones(3),  # an unnamed vector: exempt by rank
    }
    assert kernel_mask(params) == {
        "Conv_0": {"kernel": True, "bias": False},
        "BatchNorm_0": {"scale": False, "bias": False},
        "Dense_0": {"kernel": True},
        "gain": False,
    }


# ---- per-member trust ratios in one ensemble step ----------------------------------------------


class _Linear(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = True):
        return nn.Dense(2)(x)


@dataclasses.dataclass(frozen=True)
class _LinearWorkload:
    """The smallest workload member_train_step accepts: y = x K + b, mean squared error."""

    def model(self, axis_name, conv=None):
        return _Linear()

    def inputs(self, batch):
        return batch["x"]

    def loss(self, outputs, batch):
        return jnp.mean((outputs - batch["y"]) ** 2), {}


LARS = OptimConfig(
    optimizer="lars",
    learning_rate=0.5,
    lr_reference_batch=4,
    momentum=0.9,
    weight_decay=0.01,
    lr_schedule="constant",
)


def _two_members(tx):
    """Two members with kernels 100× apart in norm, and batches whose targets lie near each
    member's own outputs, so that their gradients have the same size: (x, kernels, bias, ys,
    stacked state, batch)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    kernel = rng.normal(size=(3, 2)).astype(np.float32)
    bias = rng.normal(size=2).astype(np.float32)
    kernels = np.stack([kernel, 100 * kernel])
    ys = np.stack([x @ k + rng.normal(size=(4, 2)) for k in kernels]).astype(np.float32)

    def member(k):
        params = {"Dense_0": {"kernel": jnp.asarray(k), "bias": jnp.asarray(bias)}}
        return EnsembleState(jnp.zeros((), jnp.int32), params, {}, tx.init(params))

    state = jax.tree.map(lambda *xs: jnp.stack(xs), *[member(k) for k in kernels])
    batch = {"x": jnp.stack([x, x]), "y": jnp.asarray(ys)}
    return x, kernels, bias, ys, state, batch


@pytest.mark.parametrize("form", ["scan", "grouped", "unroll"])
def test_lars_trust_ratios_are_per_member_in_one_ensemble_step(form):
    # Each member's kernel step must be lr × eta‖K_m‖/‖g_m + wd K_m‖ × (g_m + wd K_m) with its
    # own norms, and its bias step plain.
    tx = make_optimizer(LARS, batch_size=4, steps_per_epoch=1, total_steps=1)
    x, kernels, bias, ys, state, batch = _two_members(tx)
    step = lambda s, b: member_train_step(_LinearWorkload(), tx, None, s, b)  # noqa: E731
    mapping = MemberMapping(form)
    new, *_ = jax.jit(lambda s, b: map_members(step, mapping, s, b))(state, batch)

    ratios = []
    for m, (k, y) in enumerate(zip(kernels.astype(np.float64), ys, strict=True)):
        residual = x @ k + bias - y  # d(mean squared error)/d(outputs) = 2 residual / 8
        g_kernel = x.T @ residual * (2 / residual.size) + LARS.weight_decay * k
        g_bias = residual.sum(0) * (2 / residual.size)
        ratio = LARS.lars_trust_coefficient * np.linalg.norm(k) / np.linalg.norm(g_kernel)
        ratios.append(ratio)
        got = new.params["Dense_0"]
        np.testing.assert_allclose(
            got["kernel"][m], k - 0.5 * ratio * g_kernel, rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(got["bias"][m], bias - 0.5 * g_bias, rtol=1e-5, atol=1e-5)
    assert ratios[1] > 10 * ratios[0]  # very different ratios, each member's own


@pytest.mark.parametrize("optimizer", ["lars", "lamb"])
def test_trust_ratios_in_the_engine_sharded_step_are_each_member_own(optimizer):
    # The engine's jit(shard_map) step on a 2 × 4 mesh (each member's batch split over 4 devices,
    # its gradient reduced over them) gives each member the update it gets trained alone.
    config = dataclasses.replace(LARS, optimizer=optimizer)
    tx = make_optimizer(config, batch_size=4, steps_per_epoch=1, total_steps=1)
    *_, state, batch = _two_members(tx)
    alone = jax.jit(jax.vmap(lambda s, b: member_train_step(_LinearWorkload(), tx, None, s, b)))
    want = alone(state, batch)[0].params
    layout = resolve_layout(C.MeshConfig(2, 1, 4), 8, 8)
    mesh = make_mesh(layout, jax.devices()[:8])
    sharded_state = jax.device_put(state, NamedSharding(mesh, MEMBER_SPEC))
    sharded_batch = jax.device_put(batch, NamedSharding(mesh, BATCH_SPEC))
    plan = plan_for(mesh, UNROLL, layout.members_per_device)
    engine_step = build_train_step(_LinearWorkload(), tx, plan)
    got = engine_step(sharded_state, sharded_batch)[0].params
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5), got, want)


# ---- label smoothing ---------------------------------------------------------------------------

SPEC = ImageSpec("tiny", (2, 2, 1), 3, (0.0,), (1.0,))


def test_label_smoothing_matches_a_hand_computation():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]], np.float32)
    labels = np.array([0, 2], np.int32)
    batch = {"label": jnp.asarray(labels)}
    smooth = ClassificationWorkload(SPEC, "resnet_small", label_smoothing=0.3)
    loss, metrics = smooth.loss(jnp.asarray(logits), batch)
    # Targets 1 - 0.3 + 0.1 on the label and 0.1 elsewhere; loss -Σ target · log softmax.
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = np.full((2, 3), 0.1)
    targets[[0, 1], labels] = 0.8
    np.testing.assert_allclose(loss, -(targets * log_softmax).sum(-1).mean(), rtol=1e-6)
    # Accuracy stays on the hard labels: row 0 right, row 1 wrong.
    assert float(metrics["accuracy"]) == 0.5
    hard, _ = ClassificationWorkload(SPEC, "resnet_small").loss(jnp.asarray(logits), batch)
    np.testing.assert_allclose(hard, -log_softmax[[0, 1], labels].mean(), rtol=1e-6)


def test_make_workload_passes_label_smoothing():
    config = C.RunConfig(
        optim=OptimConfig(label_smoothing=0.1), results=C.ResultsConfig(target_quality=0.9)
    ).validate()
    assert make_workload(config, SPEC).label_smoothing == 0.1


# ---- bad flags ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (dict(adam_b1=1.0), r"--adam_b1=1.0: expected in \[0, 1\)"),
        (dict(adam_b2=-0.1), r"--adam_b2=-0.1: expected in \[0, 1\)"),
        (dict(adam_eps=0.0), "--adam_eps=0.0: expected > 0"),
        (dict(adagrad_initial_accumulator=-1.0), "--adagrad_initial_accumulator=-1.0: expected"),
        (dict(lars_trust_coefficient=0.0), "--lars_trust_coefficient=0.0: expected > 0"),
        (dict(label_smoothing=1.0), r"--label_smoothing=1.0: expected in \[0, 1\)"),
        (dict(label_smoothing=-0.1), r"--label_smoothing=-0.1: expected in \[0, 1\)"),
        (dict(optimizer="rmsprop"), "--optimizer='rmsprop': expected one of sgd, adam"),
    ],
)
def test_bad_optimizer_flags_give_one_line_errors(setting, message):
    with pytest.raises(UsageError, match=message) as error:
        OptimConfig(**setting).validate()
    assert "\n" not in str(error.value)


def test_a_bad_flag_on_the_command_line_names_itself():
    FLAGS.unparse_flags()
    try:
        FLAGS(["hpcai_jax", "--optimizer=lars", "--lr_schedule=step", "--lr_step_epochs=30,x"])
        with pytest.raises(UsageError, match=r"^--lr_step_epochs=30,x: expected comma-separated"):
            config_from_flags()
    finally:
        FLAGS.unparse_flags()
