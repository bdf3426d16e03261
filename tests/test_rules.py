"""The closed division's rules on configurations alone (no data, no training): the shipped
official configs are closed, a shrunk one is open with each broken rule named, a run without an
official target is open first of all for that."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import ROOT

from hpcai_jax import config as C
from hpcai_jax import flags as hflags
from hpcai_jax import rules
from hpcai_jax.engine.mesh import MeshLayout

LAYOUT = MeshLayout(ensemble_size=8, members_per_device=1, parallel_degree=8, num_devices=64)
IMAGENET = rules.SplitSizes(1_281_167, 50_000)


def from_flagfile(name: str) -> C.RunConfig:
    flags = hflags.FLAGS
    flags.unparse_flags()
    try:
        flags(["hpcai_jax", f"--flagfile={ROOT / 'configs' / name}"])
        return hflags.config_from_flags()
    finally:
        flags.unparse_flags()


def resnet50(**parts) -> C.RunConfig:
    """ResNet-50 on imagenet2012 as the closed division wants it, but for `parts`."""
    base = {
        "model": C.ModelConfig(model="resnet50", dtype="bfloat16"),
        "data": C.DataConfig(dataset="imagenet2012", image_size=224),
        "train": C.TrainConfig(batch_size=512, epochs=90),
        "optim": C.OptimConfig(optimizer="lars", lr_schedule="warmup_polynomial"),
        "mesh": C.MeshConfig(ensemble_size=8, allreduce="hierarchical", model_parallel=2),
    }
    return C.RunConfig(**{**base, **parts}).validate()


@pytest.mark.parametrize(
    "flagfile", ["resnet50_imagenet.flags", "resnet50_imagenet_lars.flags", "extreme_weather.flags"]
)
def test_the_official_configs_are_closed(flagfile):
    submission = rules.judge(from_flagfile(flagfile), LAYOUT)
    assert (submission.division, submission.violations) == ("closed", ())


def test_table_2_options_keep_a_run_closed():
    # LARS, a polynomial schedule, bfloat16, hierarchical all-reduce, model parallelism.
    assert rules.judge(resnet50(), LAYOUT, IMAGENET).to_dict() == {
        "division": "closed",
        "violations": [],
    }


def test_a_shrunk_imagenet_run_is_open_with_every_rule_named():
    config = resnet50(
        data=C.DataConfig(
            dataset="imagenet2012", train_examples=1000, eval_examples=500, image_size=128
        ),
        train=C.TrainConfig(batch_size=100, epochs=100, bootstrap="none"),
        results=C.ResultsConfig(target_quality=0.5, quality_exponent=1, flops_source="xla"),
        reliability=C.ReliabilityConfig(inject_nan="1@3"),
    )
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, augment=False))
    assert rules.judge(config).violations == (
        "--target_quality=0.5: the closed division scores against the official target "
        "(0.763 top1_accuracy)",
        "--quality_exponent=1: the closed division uses the workload's n (5)",
        "--train_examples=1000: the closed division trains on the full training split "
        "(1,281,167 examples of imagenet2012)",
        "--eval_examples=500: the closed division evaluates on the full held-out split "
        "(50,000 examples of imagenet2012)",
        "--image_size=128: the closed division's input is 224×224 images",
        "--noaugment: the closed division trains with the data set's augmentation "
        "(random-resized crop and flip)",
        "--epochs=100: over the closed division's budget of 90 epochs (resnet50 on imagenet2012)",
        "--bootstrap=none: the closed division bags: each member trains on its own bootstrap "
        "sample (with_replacement or poisson)",
        "--inject_nan=1@3: a test hook that poisons a member; not in the closed division",
        "--flops_source=xla: the closed division's FLOPS uses auto's or the analytic count "
        "(xla keeps a count that failed its cross-check)",
    )


@pytest.mark.parametrize(
    "train,expected",
    [
        (C.TrainConfig(batch_size=512, epochs=0.5), "--epochs=0.5: shorter than one epoch"),
        # 1,281,167 // 512 = 2,502 steps per epoch.
        (
            C.TrainConfig(batch_size=512, steps=2000),
            "--steps=2000: shorter than one epoch (2,502 steps per epoch)",
        ),
        (
            C.TrainConfig(batch_size=512, steps=2502 * 91),
            "--steps=227682: 91 epochs, over the closed division's budget of 90 epochs "
            "(resnet50 on imagenet2012)",
        ),
    ],
)
def test_epochs_within_the_budget(train, expected):
    assert rules.judge(resnet50(train=train)).violations == (expected,)
    assert (
        rules.judge(resnet50(train=dataclasses.replace(train, epochs=90, steps=0))).violations == ()
    )


def test_loaded_splits_must_be_whole():
    # An ImageNet prepared in part; ExtremeWeather's size is whatever was loaded.
    assert rules.judge(resnet50(), LAYOUT, rules.SplitSizes(1_000_000, 50_000)).violations == (
        "--dataset=imagenet2012: 1,000,000 examples loaded for the closed division, which trains "
        "on the full training split (1,281,167 examples; check --data_dir)",
    )
    weather = from_flagfile("extreme_weather.flags")
    assert rules.judge(weather, LAYOUT, rules.SplitSizes(1460, 1460)).division == "closed"
    cut = dataclasses.replace(
        weather, data=dataclasses.replace(weather.data, train_examples=100, image_size=384)
    )
    assert rules.judge(cut, LAYOUT, rules.SplitSizes(100, 1460)).violations == (
        "--train_examples=100: the closed division trains on the full training split",
        "--image_size=384: the closed division's input is the full 768×1152 grid",
    )
    # A --train_examples above the split's size cuts nothing.
    more = dataclasses.replace(weather, data=dataclasses.replace(weather.data, train_examples=5000))
    assert rules.judge(more, LAYOUT, rules.SplitSizes(1460, 1460)).division == "closed"
    # Steps are counted in epochs once the size is known, and not before.
    steps = dataclasses.replace(weather, train=dataclasses.replace(weather.train, steps=99))
    assert rules.judge(steps, LAYOUT, rules.SplitSizes(1600, 1460)).violations == (
        "--steps=99: shorter than one epoch (100 steps per epoch)",
    )
    assert "the steps cannot be counted in epochs" in rules.judge(steps).violations[0]


def test_eq5_is_a_rule():
    broken = MeshLayout(ensemble_size=8, members_per_device=1, parallel_degree=8, num_devices=32)
    assert rules.judge(resnet50(), broken).violations == (
        "--ensemble_size=8: Eq. 5 fails: (8 / 1) × 8 × 1 = 64, not the 32 devices",
    )


def test_a_run_without_an_official_target_is_open_first_for_that():
    quickstart = rules.judge(from_flagfile("quickstart.flags"))
    assert quickstart.division == "open"
    assert quickstart.violations == (
        "no official target for image_classification/resnet_small/fashion_mnist",
        "--train_examples=10000: the closed division trains on the full training split",
    )
    synthetic = rules.judge(from_flagfile("synthetic_resnet50.flags"))
    assert synthetic.violations[:2] == (
        "no official target for image_classification/resnet50/synthetic",
        "--dataset=synthetic: generated data; the closed division trains on imagenet2012",
    )


def test_docs_list_every_rule():
    score = (ROOT / "docs" / "score.md").read_text()
    divisions = score[score.index("## 10. Divisions") :]
    assert all(f"| {name} |" in divisions for name, _ in rules.RULES)


def test_a_closed_run_may_replace_at_most_a_tiny_fraction_of_a_split():
    config, sizes = resnet50(), rules.SplitSizes(1_281_167, 50_000)
    few = rules.judge(config, LAYOUT, sizes, {"train": list(range(128))})
    assert few.violations == ()
    skipped = {"train": list(range(129)), "validation": list(range(6))}
    (line,) = rules.judge(config, LAYOUT, sizes, skipped).violations
    assert line == (
        "--bad_example_policy=skip replaced 129 of the 1281167 records of split 'train' "
        "(at most 128), 6 of the 50000 records of split 'validation' (at most 5); the closed "
        "division allows at most 0.0001 of a split"
    )


def test_a_closed_run_may_lose_at_most_a_few_members_to_fit_resumes():
    """--resume_members=fit: the layout is what ran (M'), `dropped` the members left behind:
    at most 0.05 of the M the run started with."""
    config, sizes = resnet50(), rules.SplitSizes(1_281_167, 50_000)
    ran = MeshLayout(ensemble_size=38, members_per_device=1, parallel_degree=8, num_devices=304)
    assert rules.judge(config, ran, sizes, None, dropped=2).violations == ()  # 2 of 40
    assert rules.judge(config, ran, sizes, None, dropped=3).violations == (
        "--resume_members=fit dropped 3 of 41 members; the closed division allows at most 0.05 "
        "of them",
    )
