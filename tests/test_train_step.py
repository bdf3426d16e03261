"""The ensemble in one SPMD program trains each member exactly as if it were trained alone."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tiny_config, train_alone
from jax.sharding import NamedSharding

from hpcai_jax import config as C
from hpcai_jax.axes import BATCH_SPEC
from hpcai_jax.data.pipeline import eval_batches, train_batch
from hpcai_jax.engine.member_map import resolve_member_strategy
from hpcai_jax.engine.setup import build_setup

STEPS = 3


REGRESSION = dict(
    model=C.ModelConfig(workload="regression", model="mlp"),
    data=C.DataConfig(dataset="friedman1", train_examples=512, eval_examples=200),
)
# resnet_tiny: resnet_small's every block kind (BatchNorm state included) in fewer ops to compile.
TINY = {"model": C.ModelConfig(model="resnet_tiny")}
WORKLOADS = {"image_classification": TINY, "regression": REGRESSION}


@pytest.fixture(scope="module", params=list(WORKLOADS))
def workload(request):
    """(name, config overrides, each member trained alone)."""
    overrides = WORKLOADS[request.param]
    setup = build_setup(tiny_config(mesh=C.MeshConfig(4, 1, 2), **overrides))
    return request.param, overrides, [train_alone(setup, m, STEPS) for m in range(4)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh_config",
    [
        C.MeshConfig(ensemble_size=4, members_per_device=1, parallel_degree=2),  # mesh 4×2
        C.MeshConfig(
            ensemble_size=4, members_per_device=2, parallel_degree=4, member_strategy="unroll"
        ),  # 2×4
        C.MeshConfig(
            ensemble_size=4, members_per_device=2, parallel_degree=4, member_strategy="vmap"
        ),
    ],
    ids=["mesh4x2", "mesh2x4-unroll", "mesh2x4-vmap"],
)
def test_ensemble_matches_members_trained_alone(mesh_config, workload):
    """The same engine step, for image classification (BatchNorm state) and the regression
    workload that proves the protocol (no model state, float inputs)."""
    name, overrides, references = workload
    setup = build_setup(tiny_config(mesh=mesh_config, **overrides))
    assert setup.layout.num_devices == 8 and setup.workload.name == name
    state = setup.init_state()
    for t in range(STEPS):
        batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, t)
        state, metrics = setup.train_step(state, batch)
    assert np.all(np.asarray(state.step) == STEPS)
    assert np.all(np.asarray(metrics.finite)) and set(metrics.metrics) == (
        {"accuracy"} if name == "image_classification" else {"mse"}
    )
    for m, ref in enumerate(references):
        got = jax.tree.map(lambda x, m=m: np.asarray(x[m]), (state.params, state.model_state))
        want = jax.tree.map(np.asarray, (ref.params, ref.model_state))
        jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5), got, want)
    # Members differ from each other: their keys and bootstrap samples differ.
    first = jax.tree.leaves(state.params)[0]
    assert not np.allclose(first[0], first[1])


@pytest.mark.slow
def test_state_is_sharded_over_the_ensemble_axis_and_looped_init_is_vmapped_bit_for_bit():
    """Each device holds its own members; they were initialised one after another
    (engine/state.build_init: lax.map in a shard_map), and are the vmapped program's, every
    leaf, bit for bit, sharded the same."""
    from hpcai_jax.engine import state as engine_state

    setup = build_setup(tiny_config(mesh=C.MeshConfig(4, 2, 4), **TINY), open_data=False)
    state = setup.init_state()
    leaf = state.params["conv_init"]["kernel"]
    assert leaf.shape[0] == 4
    assert leaf.sharding.spec[0] == "ensemble"
    # Each device holds its 2 members only.
    assert {s.data.shape[0] for s in leaf.addressable_shards} == {2}

    def vmapped(seed):
        keys = jax.random.split(jax.random.key(seed), 4)
        return jax.vmap(lambda k: engine_state.init_member(setup.workload, setup.tx, k))(keys)

    shardings = engine_state.shardings(setup.mesh, None)
    seed = jnp.asarray(setup.config.train.seed, jnp.uint32)
    want = jax.jit(vmapped, out_shardings=shardings)(seed)
    for got, ref in zip(jax.tree.leaves(state), jax.tree.leaves(want), strict=True):
        assert got.sharding.is_equivalent_to(ref.sharding, got.ndim)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


def test_one_member_per_device_needs_no_strategy():
    assert resolve_member_strategy("vmap", "cpu", 1)[0] == "unroll"
    strategy, why = resolve_member_strategy("auto", "cpu", 4)
    assert strategy == "vmap" and "cpu" in why  # docs/members.md
    assert resolve_member_strategy("auto", "gpu", 4)[0] == "unroll"
    assert resolve_member_strategy("vmap", "gpu", 2) == ("vmap", "--member_strategy")


@pytest.mark.slow
def test_eval_step_averages_the_voting_members_probabilities():
    """An example's prediction is the argmax of the mean softmax of the members voting on it (all
    kept members on held-out data, the out-of-bag members on training data); an example without
    a voter is not scored."""
    setup = build_setup(tiny_config(**TINY))
    state = setup.init_state()
    item = next(eval_batches(setup.datasets.eval, setup.mesh, 100))
    assert item.split == 2 and len(set(item.rows.tolist())) == 100  # slices gathered in the step
    read = setup.datasets.eval.read(item.rows)  # in the batch's order
    images, labels = read["image"], read["label"]
    votes = (np.random.default_rng(0).random((4, 100)) < 0.4).astype(np.float32)
    votes[:, :5] = 0  # five examples nobody may score
    sharded = jax.device_put(votes, NamedSharding(setup.mesh, BATCH_SPEC))
    counts = setup.eval_step(state, item.batch, item.valid, sharded, item.split)
    x = setup.workload.inputs({"image": jnp.asarray(images)})
    probs = []
    for m in range(4):
        v = jax.tree.map(lambda a, m=m: a[m], {"params": state.params, **state.model_state})
        probs.append(jax.nn.softmax(setup.workload.model(None).apply(v, x, train=False), -1))
    probs = np.asarray(probs)
    np.testing.assert_array_equal(
        np.asarray(counts.members)[:, 0], (probs.argmax(-1) == labels[None]).sum(1)
    )
    assert np.all(np.asarray(counts.members)[:, 1] == 100)
    scored = votes.sum(0) > 0
    mean = (probs * votes[..., None]).sum(0) / np.maximum(votes.sum(0), 1)[:, None]
    assert int(counts.scored) == int(scored.sum()) <= 95
    assert np.asarray(counts.ensemble).tolist() == [
        (scored & (mean.argmax(-1) == labels)).sum(),
        scored.sum(),
    ]
    assert float(counts.votes) == votes.sum()


@pytest.mark.slow
def test_bfloat16_compute_runs():
    model = C.ModelConfig(model="resnet_tiny", dtype="bfloat16")  # as TINY
    setup = build_setup(dataclasses.replace(tiny_config(), model=model))
    state = setup.init_state()
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, 0)
    state, metrics = setup.train_step(state, batch)
    assert np.all(np.isfinite(np.asarray(metrics.loss)))
    assert state.params["conv_init"]["kernel"].dtype == jnp.float32


@pytest.mark.slow
@pytest.mark.parametrize(
    # The products' result type: int8 × int8 accumulates in int32 (tests/test_int8.py reads
    # the operands).
    "dtype, element",
    [("bfloat16", "bf16"), ("float16", "f16"), ("int8", "s32")],
)
def test_regression_computes_in_the_asked_dtype(dtype, element):
    """--dtype is honoured by every workload (the record names it): the MLP's products run in
    it, parameters stay float32, float16 brings its loss scale."""
    config = tiny_config(
        **{**REGRESSION, "model": C.ModelConfig(workload="regression", model="mlp", dtype=dtype)}
    )
    setup = build_setup(config)
    state = setup.init_state()
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, 0)
    hlo = setup.train_step.lower(state, batch).compiler_ir("hlo").as_hlo_text()
    dots = [line.split("=")[1].split()[0] for line in hlo.splitlines() if " dot(" in line]
    assert dots and all(d.startswith(f"{element}[") for d in dots), dots
    assert (state.loss_scale is not None) == (dtype == "float16")
    state, metrics = setup.train_step(state, batch)
    assert np.all(np.asarray(metrics.finite))
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(state.params))
