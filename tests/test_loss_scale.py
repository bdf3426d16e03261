"""float16 training: float32 master weights, a per-member dynamic loss scale that halves and skips
the update on overflow, grows back after good steps, and counts what it skipped."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.loss_scale import INITIAL_SCALE, LossScale
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.engine.step import member_update


def test_float16_keeps_float32_master_weights_and_trains():
    setup = build_setup(
        tiny_config(mesh=C.MeshConfig(2, 1, 4), model=C.ModelConfig(dtype="float16"))
    )
    state = setup.init_state()
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 2, 0)
    losses = []
    for _ in range(4):  # the same batch: its loss must fall
        state, metrics = setup.train_step(state, batch)
        losses.append(np.asarray(metrics.loss))
    assert {leaf.dtype for leaf in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    assert np.all(np.diff(losses, axis=0) < 0) and np.all(losses[-1] < losses[0] - 0.02), losses
    assert np.all(np.asarray(metrics.finite))
    np.testing.assert_array_equal(np.asarray(metrics.skipped), [0, 0])
    np.testing.assert_array_equal(np.asarray(state.loss_scale.scale), [INITIAL_SCALE] * 2)


def test_float32_and_bfloat16_carry_no_loss_scale():
    setup = build_setup(tiny_config(mesh=C.MeshConfig(2, 1, 4)))
    assert setup.abstract_state.loss_scale is None


def _state(growth_interval):
    params = {"w": jnp.array([1.0, 2.0])}
    tx = optax.sgd(0.1)
    return tx, EnsembleState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        model_state={},
        opt_state=tx.init(params),
        loss_scale=LossScale.create(growth_interval),
    )


def test_overflow_skips_the_update_halves_the_scale_and_grows_back():
    tx, state = _state(growth_interval=2)
    update = jax.jit(lambda s, g: member_update(tx, s, {"w": g}, {}))
    scaled = jnp.array([1.0, -2.0]) * INITIAL_SCALE  # a scaled gradient of [1, -2]

    state, finite = update(state, jnp.array([jnp.inf, 1.0]))  # injected overflow
    np.testing.assert_array_equal(state.params["w"], [1.0, 2.0])  # update skipped
    assert float(state.loss_scale.scale) == INITIAL_SCALE / 2
    assert int(state.loss_scale.skipped) == 1 and bool(finite) and int(state.step) == 1

    state, _ = update(state, scaled / 2)  # unscaled by the halved scale: [1, -2]
    np.testing.assert_allclose(state.params["w"], [0.9, 2.2])
    assert float(state.loss_scale.scale) == INITIAL_SCALE / 2
    state, _ = update(state, scaled / 2)  # second good step in a row: the scale doubles
    np.testing.assert_allclose(state.params["w"], [0.8, 2.4])
    assert float(state.loss_scale.scale) == INITIAL_SCALE
    assert int(state.loss_scale.good_steps) == 0 and int(state.loss_scale.skipped) == 1


def test_nan_also_counts_as_overflow():
    ls = LossScale.create(4).adjust(jnp.array(False)).adjust(jnp.array(False))
    assert float(ls.scale) == INITIAL_SCALE / 4 and int(ls.skipped) == 2
    _, state = _state(4)
    tx = optax.sgd(0.1)
    new, _ = member_update(tx, state, {"w": jnp.array([jnp.nan, 0.0])}, {})
    np.testing.assert_array_equal(new.params["w"], [1.0, 2.0])
