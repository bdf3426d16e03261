"""float16 training: float32 master weights, a per-member dynamic loss scale that halves and skips
the update on overflow, grows back after good steps, and counts what it skipped."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.optimizer import INITIAL_SCALE, LossScale
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.engine.step import member_update

FLOAT16_REGRESSION = dict(
    model=C.ModelConfig(workload="regression", model="mlp", dtype="float16"),
    data=C.DataConfig(dataset="friedman1", train_examples=256, eval_examples=64),
)


@pytest.fixture(scope="module")
def float16_resnet():
    """resnet_small on Fashion-MNIST under float16, M = 4, two per device (mesh ensemble 2 ×
    data 4): (setup, a function scales → a fresh copy of the initial state with those loss
    scales). One compile of the step serves both tests; the step donates its state."""
    setup = build_setup(
        tiny_config(mesh=C.MeshConfig(4, 2, 4), model=C.ModelConfig(dtype="float16"))
    )
    init = setup.init_state()
    saved = jax.tree.map(np.asarray, init)

    def start(scales=(INITIAL_SCALE,) * 4):
        state = jax.tree.map(lambda h, x: jax.device_put(h, x.sharding), saved, init)
        scale = jax.device_put(np.asarray(scales, np.float32), init.loss_scale.scale.sharding)
        return state.replace(loss_scale=state.loss_scale.replace(scale=scale))

    return setup, start


@pytest.mark.slow
def test_float16_keeps_float32_master_weights_and_trains(float16_resnet):
    setup, start = float16_resnet
    state = start()
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, 0)
    losses = []
    for _ in range(4):  # the same batch: its loss must fall
        state, metrics = setup.train_step(state, batch)
        losses.append(np.asarray(metrics.loss))
    assert {leaf.dtype for leaf in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    assert np.all(np.diff(losses, axis=0) < 0) and np.all(losses[-1] < losses[0] - 0.02), losses
    assert np.all(np.asarray(metrics.finite))
    np.testing.assert_array_equal(np.asarray(metrics.skipped), [0] * 4)
    np.testing.assert_array_equal(np.asarray(state.loss_scale.scale), [INITIAL_SCALE] * 4)


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
    assert int(state.loss_scale.skipped) == 1 and bool(finite) and int(state.step) == 0

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


@pytest.mark.slow
def test_one_members_overflow_skips_only_that_members_step(float16_resnet):
    """The sharded step decides per member. M = 4, two per device (mesh ensemble 2 × data 4),
    resnet_small on Fashion-MNIST (BatchNorm statistics in the member state): member 1's loss
    scale is raised to 2^40, so its float16 gradient overflows; the others' are 2^8, small
    enough for none to overflow on this batch. Member 1's step is skipped: every leaf of its
    state (parameters, momentum, BatchNorm statistics, step counter) is kept, its scale halves,
    one skipped step. Member 0 (on its device) and members 2, 3 (on the other) take the very
    step they take when nobody overflows."""
    setup, start = float16_resnet
    assert setup.plan.mapping.strategy == "vmap"  # the CPU's default: mapped in one program
    assert jax.tree.leaves(setup.abstract_state.model_state), "no BatchNorm statistics"
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, 0)
    low, huge = 2.0**8, 2.0**40

    def host(state):
        return jax.tree.map(
            np.asarray, (state.params, state.opt_state, state.model_state, state.step)
        )

    before = host(start())
    calm, calm_metrics = setup.train_step(start([low] * 4), batch)
    np.testing.assert_array_equal(np.asarray(calm_metrics.skipped), [0] * 4)
    state, metrics = setup.train_step(start([low, huge, low, low]), batch)

    after, calm_after = host(state), host(calm)
    for m in range(4):
        old, new, want = (jax.tree.map(lambda x, m=m: x[m], t) for t in (before, after, calm_after))
        if m == 1:
            same = partial(np.testing.assert_array_equal, err_msg="member 1's step not skipped")
            jax.tree.map(same, new, old)
        else:
            moved = jax.tree.map(lambda n, o: not np.array_equal(n, o), new, old)
            # A block's first BatchNorm gets no gradient at initialisation (the block's last
            # BatchNorm scale starts at zero); every statistic and the step counter move.
            params_moved, _, stats_moved, step_moved = moved
            assert all(jax.tree.leaves(stats_moved)) and step_moved, f"member {m}: {moved}"
            assert np.mean(jax.tree.leaves(params_moved)) > 0.7, f"member {m}: {moved}"
            alone = partial(np.testing.assert_array_equal, err_msg=f"member {m}: not its own step")
            jax.tree.map(alone, new, want)
    np.testing.assert_array_equal(np.asarray(state.step), [1, 0, 1, 1])
    np.testing.assert_array_equal(np.asarray(state.loss_scale.scale), [low, huge / 2, low, low])
    np.testing.assert_array_equal(np.asarray(state.loss_scale.skipped), [0, 1, 0, 0])
    np.testing.assert_array_equal(np.asarray(state.loss_scale.good_steps), [1, 0, 1, 1])
    np.testing.assert_array_equal(np.asarray(metrics.skipped), [0, 1, 0, 0])
    assert np.all(np.asarray(metrics.finite))  # a skipped step is not a divergence
