"""The extreme-weather workload on the engine: the bagged detector trains in one SPMD program
exactly as its members would alone, its ensemble (averaging on shared proposals) is exact for
identical members and blind to member order, and a CLI run records mAP and the FLOP shares of
the detector's non-matmul stages."""

import jax
import numpy as np
import pytest
from helpers import run_in_process, train_alone
from jax.sharding import NamedSharding

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.axes import BATCH_SPEC
from hpcai_jax.data.pipeline import eval_batches, train_batches
from hpcai_jax.engine.setup import build_setup

STEPS = 2


def _config(**mesh) -> C.RunConfig:
    return C.RunConfig(
        mesh=C.MeshConfig(ensemble_size=2, **mesh),
        model=C.ModelConfig(workload="extreme_weather", model="faster_rcnn_small"),
        data=C.DataConfig(
            dataset="synthetic_climate",
            image_size=32,
            train_examples=32,
            eval_examples=16,
            climate_flip=True,
        ),
        train=C.TrainConfig(batch_size=8, steps=STEPS, eval_batch_size=16),
        optim=C.OptimConfig(lr_schedule="constant", learning_rate=0.32),
        results=C.ResultsConfig(target_quality=0.35),
    ).validate()


@pytest.fixture(scope="module")
def trained():
    """The ensemble (M=2, mesh 2×4) after STEPS steps, with its setup; training batches through
    the climate training read (sample keys, latitude flips) in this process."""
    setup = build_setup(_config(members_per_device=1, parallel_degree=4))
    state = setup.init_state()
    batches = train_batches(setup.datasets.train, setup.sampler, setup.mesh, 2, STEPS, workers=0)
    keys = []
    for t in range(STEPS):
        batch = batches(t)
        keys.append(np.asarray(batch["sample_key"]))
        state, metrics = setup.train_step(state, batch)
    assert np.all(np.asarray(metrics.finite))
    assert {"rpn_cls", "rpn_box", "head_cls", "head_box"} <= set(metrics.metrics)
    # Every (member, step, row) has its own sampling key; a resumed run reads the same ones.
    assert len({tuple(k) for step_keys in keys for k in step_keys.reshape(-1, 2)}) == 2 * 2 * 8
    resumed = train_batches(setup.datasets.train, setup.sampler, setup.mesh, 2, STEPS, workers=0)
    np.testing.assert_array_equal(np.asarray(resumed(STEPS - 1)["sample_key"]), keys[-1])
    return setup, state


@pytest.fixture(scope="module")
def alone(trained):
    """Each member trained alone for STEPS steps: the reference of the sharded and the mapped
    ensembles. One compile and one training for both: a member alone runs the plain model on
    one device (`member_train_step`), whatever the mesh or member form of the setup it is
    built from, and these configurations differ in those only."""
    setup, _ = trained
    return [train_alone(setup, m, STEPS) for m in range(2)]


# The box head trains on RoIs picked by discrete choices (top-k, NMS, IoU thresholds) from the
# RPN's outputs, which the sharded step computes with BatchNorm statistics reduced over `data`:
# float-level differences can flip one RoI's label, a jump of ~lr × one RoI's gradient
# (2.5e-4 on cls_score here). A wrong reduction (local gradients, statistics mixed across
# members) moves every parameter by ~lr × gradient, 1e-2 and more.
HEAD = ("cls_score", "bbox_pred", "box_features")


@pytest.mark.slow
def test_ensemble_matches_members_trained_alone(trained, alone):
    _, state = trained
    for m, ref in enumerate(alone):
        got = jax.tree_util.tree_flatten_with_path(state.params)[0]
        want = jax.tree_util.tree_flatten_with_path(ref.params)[0]
        for (path, g), (_, w) in zip(got, want, strict=True):
            name = jax.tree_util.keystr(path)
            atol = 1e-3 if any(h in name for h in HEAD) else 5e-5
            np.testing.assert_allclose(np.asarray(g[m]), w, rtol=2e-4, atol=atol, err_msg=name)
        jax.tree.map(
            lambda g, w, m=m: np.testing.assert_allclose(g[m], w, rtol=2e-4, atol=5e-5),
            state.model_state,
            ref.model_state,
        )


@pytest.mark.slow
def test_mapped_detector_members_match_members_trained_alone(alone):
    """Both members on every device, mapped in one program (P_degree 8), sequential (scan) and
    one kernel per layer (batched, batched_grouped): the same parameters as each member alone
    (docs/members.md)."""
    for form in ("scan", "batched", "batched_grouped"):
        config = _config(
            members_per_device=2, parallel_degree=8, member_strategy="vmap", member_map=form
        )
        setup = build_setup(config)
        assert setup.plan.mapping.form == form
        state = setup.init_state()
        batches = train_batches(
            setup.datasets.train, setup.sampler, setup.mesh, 2, STEPS, workers=0
        )
        for t in range(STEPS):
            state, metrics = setup.train_step(state, batches(t))
        assert np.all(np.asarray(metrics.finite))
        for m, ref in enumerate(alone):
            for (path, g), (_, w) in zip(
                jax.tree_util.tree_flatten_with_path(state.params)[0],
                jax.tree_util.tree_flatten_with_path(ref.params)[0],
                strict=True,
            ):
                name = jax.tree_util.keystr(path)
                atol = 1e-3 if any(h in name for h in HEAD) else 5e-5
                np.testing.assert_allclose(
                    np.asarray(g[m]), w, rtol=2e-4, atol=atol, err_msg=f"{form} {name}"
                )


def _counts(setup, state):
    """The eval step's counts over the held-out set, every member voting."""
    source, m = setup.datasets.eval, setup.layout.ensemble_size
    sharding = NamedSharding(setup.mesh, BATCH_SPEC)
    total = None
    for item in eval_batches(source, setup.mesh, 16):
        votes = np.broadcast_to((item.rows >= 0).astype(np.float32), (m, len(item.rows)))
        votes = jax.device_put(np.ascontiguousarray(votes), sharding)
        counts = jax.tree.map(
            np.asarray, setup.eval_step(state, item.batch, item.valid, votes, item.split)
        )
        total = counts if total is None else jax.tree.map(np.add, total, counts)
    return total


def _restack(state, order, sharding):
    return jax.tree.map(lambda x: jax.device_put(np.asarray(x)[list(order)], sharding), state)


@pytest.mark.slow
def test_identical_members_ensemble_equals_one_member(trained):
    setup, state = trained
    sharding = jax.tree.map(lambda x: x.sharding, state)
    twins = jax.tree.map(
        lambda x, s: jax.device_put(np.stack([np.asarray(x)[0]] * 2), s), state, sharding
    )
    counts = _counts(setup, twins)
    np.testing.assert_array_equal(counts.members[0], counts.members[1])
    np.testing.assert_array_equal(counts.ensemble, counts.members[0])
    assert counts.ensemble.sum() > 0  # detections were matched or missed: something was scored


def test_mean_of_identical_members_is_exact_at_two_and_within_an_ulp_at_three():
    """The eval step's member mean (engine/step.py `_voters_mean`) of M copies of one member's
    outputs: exactly the outputs at M = 2; at M = 3 (3x rounds, then ÷ 3 rounds) within one
    ulp, and not always exact: why the identical-members test above runs at M = 2."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from hpcai_jax.axes import ENSEMBLE
    from hpcai_jax.engine.evaluate import _voters_mean

    mesh = Mesh(np.array(jax.devices()[:1]), (ENSEMBLE,))
    x = np.random.default_rng(0).uniform(size=(64, 5)).astype(np.float32)  # probabilities
    for m in (2, 3):
        mean = jax.jit(
            jax.shard_map(
                _voters_mean, mesh=mesh, in_specs=(P(ENSEMBLE), P(ENSEMBLE)), out_specs=P()
            )
        )(np.stack([x] * m), np.ones((m, 64), np.float32))
        mean = np.asarray(mean)
        if m == 2:
            np.testing.assert_array_equal(mean, x)
        else:
            assert (np.abs(mean - x) <= np.spacing(x)).all()
            assert 0.1 < (mean != x).mean() < 0.6, (mean != x).mean()


@pytest.mark.slow
def test_ensemble_does_not_depend_on_member_order(trained):
    setup, state = trained
    sharding = jax.tree.map(lambda x: x.sharding, state)
    forward = _counts(setup, state)
    swapped = _counts(setup, jax.tree.map(lambda x, s: _restack(x, (1, 0), s), state, sharding))
    np.testing.assert_array_equal(swapped.members[0], forward.members[1])
    np.testing.assert_array_equal(swapped.members[1], forward.members[0])
    q = setup.workload.quality
    assert q(swapped.ensemble) == pytest.approx(q(forward.ensemble), abs=1e-6)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ew")
    proc = run_in_process(
        "--workload=extreme_weather",
        "--model=faster_rcnn_small",
        "--dataset=synthetic_climate",
        "--image_size=32",
        "--ensemble_size=2",
        "--parallel_degree=4",
        "--batch_size=8",
        "--steps=3",
        "--train_examples=32",
        "--eval_examples=16",
        "--oob_examples=16",
        "--eval_batch_size=16",
        "--target_quality=0.35",
        f"--results_dir={out}",
        "--run_name=ew",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return records.read(out / "ew.json"), proc


@pytest.mark.slow
def test_cli_run_records_detection_quality(cli_run):
    record, _ = cli_run
    q = record.quality
    assert q.metric == "map_iou50" and q.exponent == 10.0
    assert len(q.members) == 2 and q.oob.subset == 16
    details = q.details["ensemble"]
    assert details["map_iou50"] == q.ensemble
    assert set(details["ap_iou50_per_class"]) == {"TD", "TC", "ETC", "AR"}
    assert sum(details["ground_truth_per_class"].values()) > 0
    assert 0 <= details["map_iou50_binning_bound"] <= 1


@pytest.mark.slow
def test_cli_run_states_the_detector_stages_share_of_flops(cli_run):
    record, _ = cli_run
    cross = record.flops.crosscheck
    assert cross.crosscheck_ok, cross.source_reason
    scopes = cross.scopes
    assert {"nms", "roi_align"} <= set(scopes)
    for name, figures in scopes.items():
        assert figures["flops_per_step"] > 0, name
        assert 0 < figures["share_of_step"] < 1, name
    assert not any("no FLOP rule" in note for note in cross.notes), cross.notes


def test_bad_image_size_is_one_line_on_the_command_line(tmp_path):
    proc = run_in_process(
        "--workload=extreme_weather",
        "--model=faster_rcnn_small",
        "--dataset=synthetic_climate",
        "--image_size=224",
        "--target_quality=0.35",
        "--members_per_device=auto",
        "--steps=1",
        f"--results_dir={tmp_path}",
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert "--image_size=224: expected an even height that divides 768" in lines[-1], lines[-1]


def test_missing_data_and_wrong_workload_are_usage_errors():
    from hpcai_jax.data.datasets import open_datasets
    from hpcai_jax.errors import UsageError

    data = C.DataConfig(dataset="extremeweather", data_dir="/nonexistent/ew")
    with pytest.raises(UsageError, match="/nonexistent/ew"):
        open_datasets(data)
    with pytest.raises(UsageError, match="--dataset=fashion_mnist: a data set of"):
        C.RunConfig(
            model=C.ModelConfig(workload="extreme_weather", model="faster_rcnn_small"),
            data=C.DataConfig(dataset="fashion_mnist"),
            results=C.ResultsConfig(target_quality=0.35),
        ).validate()
