"""Fast unit tests of the checkpoint fingerprint (hpcai_jax/checkpoint.py): what makes a
checkpoint foreign, how the difference is named, and what does not count. No orbax I/O."""

from __future__ import annotations

import dataclasses
import json

import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.run.checkpoint import _differences, _digest, fingerprint
from hpcai_jax.settings import Settings

# tiny_config's mesh on the 8 test devices: M=4, one member per device, P_degree=2.
LAYOUT = MeshLayout(ensemble_size=4, members_per_device=1, parallel_degree=2, num_devices=8)


def _with(config: C.RunConfig, part: str, **changes) -> C.RunConfig:
    """`config` with some fields of one of its parts replaced (validated)."""
    return dataclasses.replace(
        config, **{part: dataclasses.replace(getattr(config, part), **changes)}
    ).validate()


def test_fingerprint_holds_what_changes_the_trajectory():
    fp = fingerprint(tiny_config(), LAYOUT)
    assert set(fp) == {"mesh", "grad_allreduce_dtype", "model", "data", "optim", "train"}
    assert fp["grad_allreduce_dtype"] == "float32"
    assert fp["mesh"] == {"ensemble_size": 4}  # the machine shape may change (next tests)
    assert fp["model"] == {
        "workload": "image_classification",
        "model": "resnet_small",
        "dtype": "float32",
    }
    assert fp["data"] == {
        "dataset": "fashion_mnist",
        "data_dir": "",
        "train_examples": 512,
        "eval_examples": 200,
        "image_size": 0,
        "num_classes": 0,  # the run resolves it (and image_size) before its fingerprint
        "augment": True,
        "climate_flip": False,  # mirrors half the climate samples: another trajectory
    }
    assert fp["optim"] == dataclasses.asdict(C.OptimConfig(lr_schedule="constant"))
    assert fp["train"] == {
        "batch_size": 16,
        "epochs": 1.0,
        "steps": 3,
        "seed": 0,
        "bootstrap": "with_replacement",
    }


def test_identical_configs_give_identical_fingerprints_and_digests():
    a, b = fingerprint(tiny_config(), LAYOUT), fingerprint(tiny_config(), LAYOUT)
    assert a == b
    assert _digest(a) == _digest(b)
    assert _differences(a, b) == []


def test_fingerprint_survives_the_json_round_trip_of_the_checkpoint_metadata():
    fp = fingerprint(tiny_config(), LAYOUT)
    saved = json.loads(json.dumps(fp))
    assert _differences(saved, fp) == []
    assert _digest(saved) == _digest(fp)


def test_digest_is_a_fixed_16_hex_prefix_of_sha256_independent_of_key_order():
    value = {"a": 1, "b": [1, 2], "c": {"d": "x"}}
    assert _digest(value) == "b12cb406c90ad347"
    assert _digest({"c": {"d": "x"}, "b": [1, 2], "a": 1}) == "b12cb406c90ad347"
    assert _digest({"a": 2, "b": [1, 2], "c": {"d": "x"}}) != "b12cb406c90ad347"


@pytest.mark.parametrize(
    ("part", "changes", "expected"),
    [
        ("train", {"seed": 5}, ["train.seed: checkpoint 0, now 5"]),
        ("train", {"batch_size": 32}, ["train.batch_size: checkpoint 16, now 32"]),
        ("train", {"steps": 4}, ["train.steps: checkpoint 3, now 4"]),
        (
            "train",
            {"bootstrap": "poisson"},
            ["train.bootstrap: checkpoint 'with_replacement', now 'poisson'"],
        ),
        (
            "model",
            {"model": "resnet18"},
            ["model.model: checkpoint 'resnet_small', now 'resnet18'"],
        ),
        ("model", {"dtype": "bfloat16"}, ["model.dtype: checkpoint 'float32', now 'bfloat16'"]),
        ("data", {"train_examples": 1024}, ["data.train_examples: checkpoint 512, now 1024"]),
        ("optim", {"learning_rate": 0.2}, ["optim.learning_rate: checkpoint 0.1, now 0.2"]),
    ],
)
def test_a_change_is_named(part, changes, expected):
    config = tiny_config()
    saved = fingerprint(config, LAYOUT)
    current = fingerprint(_with(config, part, **changes), LAYOUT)
    assert _differences(saved, current) == expected
    assert _digest(saved) != _digest(current)


def test_a_change_of_m_is_named():
    # M reaches the fingerprint through the resolved layout (8 members, two per device).
    config = tiny_config()
    bigger = MeshLayout(ensemble_size=8, members_per_device=2, parallel_degree=2, num_devices=8)
    saved = fingerprint(config, LAYOUT)
    current = fingerprint(_with(config, "mesh", ensemble_size=8, members_per_device=2), bigger)
    assert _differences(saved, current) == ["mesh.ensemble_size: checkpoint 4, now 8"]
    assert _digest(saved) != _digest(current)


@pytest.mark.parametrize(
    "layout",
    [
        # 4 devices, P_degree 1; two members per device; P_model 2 (tensor parallel).
        MeshLayout(ensemble_size=4, members_per_device=1, parallel_degree=1, num_devices=4),
        MeshLayout(ensemble_size=4, members_per_device=2, parallel_degree=4, num_devices=8),
        MeshLayout(
            ensemble_size=4,
            members_per_device=1,
            parallel_degree=1,
            num_devices=8,
            model_parallel=2,
        ),
    ],
)
def test_another_machine_shape_for_the_same_members_keeps_the_fingerprint(layout):
    """A checkpoint written on LAYOUT resumes on another mesh of the same M and per-member
    batch: the member state is saved as global arrays, and only the order of float32 sums
    changes (docs/reliability.md, the shape-change table)."""
    config = tiny_config()
    assert fingerprint(config, layout) == fingerprint(config, LAYOUT)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8"])
def test_a_low_precision_reduction_pins_p_degree(dtype):
    """Each device's share of a low-precision gradient sum is rounded (and P_degree 1 rounds
    nothing): another P_degree would train differently, so it is refused, by name."""
    config = _with(tiny_config(), "mesh", grad_allreduce_dtype=dtype)
    other = MeshLayout(ensemble_size=4, members_per_device=1, parallel_degree=1, num_devices=4)
    assert _differences(fingerprint(config, LAYOUT), fingerprint(config, other)) == [
        "mesh.parallel_degree: checkpoint 2, now 1"
    ]
    fewer = MeshLayout(ensemble_size=4, members_per_device=2, parallel_degree=2, num_devices=4)
    assert fingerprint(config, fewer) == fingerprint(config, LAYOUT)


def test_several_changes_are_named_in_sorted_order():
    config = tiny_config()
    changed = _with(_with(config, "train", seed=5, batch_size=32), "model", model="resnet18")
    assert _differences(fingerprint(config, LAYOUT), fingerprint(changed, LAYOUT)) == [
        "model.model: checkpoint 'resnet_small', now 'resnet18'",
        "train.batch_size: checkpoint 16, now 32",
        "train.seed: checkpoint 0, now 5",
    ]


@pytest.mark.parametrize(
    ("part", "changes"),
    [
        ("data", {"prefetch": 7}),
        ("data", {"oob_examples": 0}),
        ("data", {"oob_examples": 123, "prefetch": 1}),
        ("train", {"eval_batch_size": 50, "log_every": 1, "timing_warmup_steps": 0}),
        ("results", {"run_name": "other", "target_quality": 0.5}),
        ("reliability", {"checkpoint_every": "9", "checkpoint_dir": "ck", "keep_checkpoints": 5}),
        ("distributed", {"timeout_s": 5, "local_device_ids": "all"}),
    ],
)
def test_settings_that_do_not_change_the_trajectory_leave_the_fingerprint(part, changes):
    core = tiny_config()  # with the modes' sections (distributed's), as main builds it
    config = Settings(**{f.name: getattr(core, f.name) for f in dataclasses.fields(core)})
    saved = fingerprint(config, LAYOUT)
    current = fingerprint(_with(config, part, **changes), LAYOUT)
    assert current == saved
    assert _digest(current) == _digest(saved)
    assert _differences(saved, current) == []


def test_differences_of_missing_and_mistyped_entries():
    saved = {"a": 1, "gone": {"x": 1}, "n": {"k": [1, 2]}, "t": {"u": 1}}
    current = {"a": 1, "new": "v", "n": {"k": [1, 3]}, "t": 2}
    assert _differences(saved, current) == [
        "gone: checkpoint {'x': 1}, now None",
        "n.k: checkpoint [1, 2], now [1, 3]",
        "new: checkpoint None, now 'v'",
        "t: checkpoint {'u': 1}, now 2",
    ]


def test_differences_from_a_checkpoint_without_a_fingerprint():
    # Checkpointer.restore compares with {} when the metadata has no fingerprint.
    assert _differences({}, {"train": {"seed": 0}}) == ["train: checkpoint None, now {'seed': 0}"]
