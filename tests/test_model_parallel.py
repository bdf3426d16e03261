"""Tensor parallelism (--model_parallel): members split over the `model` axis train exactly as
the same members data-parallel, their layers really are split, the step's HLO gathers over
`model` only, and impossible splits fail in one line."""

import jax
import numpy as np
import pytest
from helpers import run_in_process, tiny_config
from jax.sharding import PartitionSpec as P

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.errors import UsageError
from hpcai_jax.telemetry.comm import comm_volume

STEPS = 2
# LARS: its trust ratios need whole-layer norms of split layers (engine/optimizer.py). Two
# members per device under vmap: the gathers are batched over members.
LARS = C.OptimConfig(optimizer="lars", lr_schedule="constant", learning_rate=2.0)


def _train(model_parallel: int, devices: int):
    mesh = C.MeshConfig(
        4,
        2,
        2,
        model_parallel=model_parallel,
        member_strategy="vmap",
        grad_allreduce_dtype="float32",
    )
    # resnet_tiny: resnet_small's every block kind (each split) in fewer ops to compile.
    config = tiny_config(mesh=mesh, optim=LARS, model=C.ModelConfig(model="resnet_tiny"))
    setup = build_setup(config, devices=jax.devices()[:devices])
    state = setup.init_state()
    compiled = None
    for step in range(STEPS):
        batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, step)
        if compiled is None:
            compiled = setup.train_step.lower(state, batch).compile()
        state, metrics = compiled(state, batch)
    assert np.all(np.asarray(metrics.finite))
    return setup, state, compiled


@pytest.fixture(scope="module")
def split():
    return _train(model_parallel=2, devices=8)  # mesh ensemble 2 × data 2 × model 2


@pytest.fixture(scope="module")
def whole():
    return _train(model_parallel=1, devices=4)  # the same members on ensemble 2 × data 2


@pytest.mark.slow
def test_split_members_equal_data_parallel_members(split, whole):
    (_, a, _), (_, b, _) = split, whole
    for part in ("params", "model_state", "opt_state"):
        jax.tree.map(
            lambda x, y: np.testing.assert_allclose(
                np.asarray(x), np.asarray(y), atol=2e-6, rtol=2e-5
            ),
            getattr(a, part),
            getattr(b, part),
        )


@pytest.mark.slow
def test_layers_are_split_over_the_model_axis(split):
    setup, state, _ = split
    assert dict(setup.mesh.shape) == {"ensemble": 2, "data": 2, "model": 2}
    kernel = state.params["conv_init"]["kernel"]  # [M, 3, 3, 1, 16]
    assert kernel.sharding.spec == P("ensemble", None, None, None, "model")
    assert {s.data.shape for s in kernel.addressable_shards} == {(2, 3, 3, 1, 8)}
    dense = state.params["Dense_0"]["bias"]  # [M, 10]: classes split too
    assert {s.data.shape for s in dense.addressable_shards} == {(2, 5)}
    assert state.step.sharding.spec == P("ensemble")


@pytest.mark.slow
def test_the_step_moves_activations_over_model_and_nothing_over_ensemble(split, whole):
    setup, _, compiled = split
    volume = comm_volume(compiled.as_text(), setup.mesh).payload_bytes
    assert volume["ensemble"] == 0
    assert volume["model"] > 0
    # The gradient all-reduce over `data` carries half of each member's gradient per device.
    reference = comm_volume(whole[2].as_text(), whole[0].mesh).payload_bytes
    assert volume["data"] == pytest.approx(reference["data"] / 2, rel=0.05)


@pytest.mark.parametrize(
    "overrides, message",
    [
        # resnet_small's classifier has 10 outputs.
        (
            dict(mesh=C.MeshConfig(2, 1, 1, model_parallel=4)),
            "layer Dense_0/bias has 10 output features",
        ),
        (dict(mesh=C.MeshConfig(2, 1, 1, model_parallel=3)), "must divide the 8 devices"),
        (dict(mesh=C.MeshConfig(4, 1, 2, model_parallel=2)), "Eq. 5 fails"),
        # A node's share of `data` is its devices over P_model: 8 / 4 = 2 = P_degree, one node.
        (
            dict(mesh=C.MeshConfig(1, 1, 2, model_parallel=4, allreduce="hierarchical")),
            r"inner group of 2 \(devices per process\)",
        ),
        (
            dict(
                mesh=C.MeshConfig(2, 1, 2, model_parallel=2),
                model=C.ModelConfig(workload="regression", model="mlp"),
                data=C.DataConfig(dataset="friedman1", train_examples=256, eval_examples=64),
            ),
            "no tensor-parallel model",
        ),
    ],
)
def test_impossible_splits_fail_in_one_line(overrides, message):
    with pytest.raises(UsageError, match=message) as err:
        build_setup(tiny_config(**overrides))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "mesh, model, message",
    [
        (C.MeshConfig(model_parallel=0), C.ModelConfig(), "--model_parallel=0: expected >= 1"),
        (C.MeshConfig(pipeline_stages=2), C.ModelConfig(), "BatchNorm's batch statistics"),
        (C.MeshConfig(model_parallel=2), C.ModelConfig(dtype="int8"), "not with --dtype=int8"),
    ],
)
def test_unsupported_options_fail_in_one_line(mesh, model, message):
    with pytest.raises(UsageError, match=message) as err:
        C.RunConfig(mesh=mesh, model=model, results=C.ResultsConfig(target_quality=0.9)).validate()
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_record_names_the_split_and_its_traffic(tmp_path):
    proc = run_in_process(
        "--ensemble_size=2",
        "--parallel_degree=2",
        "--model_parallel=2",
        "--batch_size=16",
        "--steps=3",
        "--train_examples=256",
        "--eval_examples=100",
        "--eval_batch_size=100",
        "--lr_schedule=constant",
        "--model=resnet_small",
        "--target_quality=0.9",
        "--grad_allreduce_dtype=bfloat16",
        f"--results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.glob("*.json")
    record = records.read(path)
    mesh = record.mesh
    assert mesh.shape == {"ensemble": 2, "data": 2, "model": 2}
    assert (mesh.model_parallel, mesh.pipeline_stages, mesh.devices_per_member) == (2, 1, 4)
    assert record.precision.grad_allreduce_dtype == "bfloat16"
    comm = record.comm
    assert comm.payload_bytes["ensemble"] == 0 and comm.payload_bytes["model"] > 0
    assert any(k.startswith("all-gather") for k in comm.by_collective["model"])
    assert record.flops.crosscheck.crosscheck_ok is True
    assert 0.0 <= record.quality.ensemble <= 1.0
