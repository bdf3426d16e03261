"""--dtype=int8 (qwix): float32 master weights, every convolution and dense product of the step
runs int8 × int8 → int32 (forward and both backward products), and the ensemble trains.

The operand types are read from the HLO before XLA's passes: XLA:CPU widens some int8
convolutions to s32 × s32 (a convert after the int8 rounding), which GPUs do not need."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.models import int8

# resnet_small: conv_init + 2 + (2 + projection) + (2 + projection) convolutions, one Dense.
CONVS, DENSES = 9, 1


@pytest.fixture(scope="module")
def trained():
    """One compile of the int8 step (2 members × 4 devices, 2 images per device: XLA:CPU runs
    int8 convolutions as plain loops), its HLO before and after XLA's passes, and 4 steps on
    one repeated batch. Compiled at XLA's default backend optimisation, not the suite's level 0
    (tests/conftest.py): the loops unoptimised took 5 s a step here, optimised 0.2 s, for 1.4 s
    more compile."""
    setup = build_setup(
        tiny_config(
            mesh=C.MeshConfig(2, 1, 4),
            model=C.ModelConfig(dtype="int8"),
            train=C.TrainConfig(batch_size=8, steps=4, eval_batch_size=100),
        )
    )
    state = setup.init_state()
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 2, 0)
    lowered = setup.train_step.lower(state, batch)
    compiled = lowered.compile(compiler_options={"xla_backend_optimization_level": "2"})
    losses = []
    for _ in range(4):
        state, metrics = compiled(state, batch)
        losses.append(np.asarray(metrics.loss))
    hlo = lowered.compiler_ir("hlo").as_hlo_text()
    return hlo, compiled.as_text(), state, np.asarray(losses)


def _products(hlo):
    """(op, result type, operand types) of every convolution and dot in an HLO text."""
    types = dict(re.findall(r"%?([\w.-]+) = (\w+)\[", hlo))
    found = []
    for line in hlo.splitlines():
        m = re.search(r"= (\w+)\[[^\]]*\]\S* (convolution|dot)\(%?([\w.-]+), %?([\w.-]+)\)", line)
        if m:
            found.append((m[2], m[1], types[m[3]], types[m[4]]))
    return found


@pytest.mark.slow
def test_every_convolution_and_dot_is_int8_with_int32_accumulation(trained):
    products = _products(trained[0])
    assert all(p[1:] == ("s32", "s8", "s8") for p in products), products
    # Forward (all), input gradient (all but the stem, whose input needs none), weight gradient.
    assert sum(p[0] == "convolution" for p in products) == CONVS + (CONVS - 1) + CONVS
    assert sum(p[0] == "dot" for p in products) == 3 * DENSES
    # XLA keeps every product integer: no float convolution or dot comes back.
    optimized = _products(trained[1])
    assert len(optimized) == len(products) and {p[1] for p in optimized} == {"s32"}, optimized


@pytest.mark.slow
def test_int8_keeps_float32_master_weights_and_trains(trained):
    *_, state, losses = trained
    assert {leaf.dtype for leaf in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    assert {leaf.dtype for leaf in jax.tree.leaves(state.model_state)} == {jnp.dtype(jnp.float32)}
    assert state.loss_scale is None  # int8 gradients carry their own scales
    assert np.all(np.diff(losses, axis=0) < 0) and np.all(losses[-1] < losses[0] - 0.02), losses


@pytest.mark.slow
def test_a_quantized_dense_is_within_int8_rounding_of_the_float_one():
    """Per-row (activation) and per-column (weight) absmax scales s = max|·| / 127.5: each operand
    is off by at most s/2, so |int8 − float| ≤ Σ_k (|x_k| s_w + |w_k| s_x) / 2 + K s_x s_w / 4."""
    dense = int8.apply_policy(nn.Dense(3), "int8")
    x = np.asarray(jax.random.normal(jax.random.key(0), (2, 5)))
    variables = dense.init(jax.random.key(1), x)
    w, b = (np.asarray(variables["params"][k]) for k in ("kernel", "bias"))
    error = np.abs(np.asarray(dense.apply(variables, x)) - (x @ w + b))
    sx = np.abs(x).max(1, keepdims=True) / 127.5
    sw = np.abs(w).max(0, keepdims=True) / 127.5
    bound = np.abs(x).sum(1, keepdims=True) * sw / 2 + sx * np.abs(w).sum(0) / 2 + 5 * sx * sw / 4
    assert np.all(error <= bound) and error.max() > 1e-4, (error, bound)  # quantized, not float


@pytest.mark.slow
def test_a_vmapped_dense_whose_input_has_its_kernel_shape_still_quantizes():
    """qwix 0.1.8 alone takes both operands for weights here (the detector's FC head, members
    under vmap) and asserts; the wrapper's dense still runs int8 with gradients."""
    dense = int8.apply_policy(nn.Dense(4), "int8")
    x = jax.random.normal(jax.random.key(0), (2, 4, 4))  # 2 members × [4 rows, 4 features]
    variables = jax.vmap(lambda k: dense.init(k, x[0]))(jax.random.split(jax.random.key(1), 2))
    grad = jax.vmap(jax.value_and_grad(lambda v, x: dense.apply(v, x).sum()))
    lowered = jax.jit(grad).lower(variables, x)
    products = _products(lowered.compiler_ir("hlo").as_hlo_text())
    assert sorted(products) == [("dot", "s32", "s8", "s8")] * 2, products  # forward, weight grad
    kernel_grad = np.asarray(lowered.compile()(variables, x)[1]["params"]["kernel"])
    # d(sum of outputs)/dW[k, j] = Σ_rows x[row, k], up to the int8 rounding of x.
    np.testing.assert_allclose(kernel_grad, np.repeat(x.sum(1)[..., None], 4, -1), atol=0.05)


def test_other_dtypes_leave_the_model_alone():
    model = nn.Dense(3)
    assert int8.apply_policy(model, "bfloat16") is model
    assert int8.compute_dtype("int8") == np.float32 and int8.compute_dtype("float16") == np.float16
