"""Every shipped flagfile parses and validates; flags override flagfiles."""

from pathlib import Path

import pytest
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax import config as C
from hpcai_jax import flags as hflags
from hpcai_jax.errors import UsageError

FLAGFILES = sorted((ROOT / "configs").glob("*.flags"))


@pytest.fixture
def parse():
    def _parse(*argv):
        hflags.FLAGS.unparse_flags()
        hflags.FLAGS(["hpcai_jax", *argv])
        return hflags.config_from_flags()

    yield _parse
    hflags.FLAGS.unparse_flags()


def test_there_are_configs():
    names = {p.name for p in FLAGFILES}
    assert {"quickstart.flags", "resnet50_imagenet.flags", "synthetic_resnet50.flags"} <= names


@pytest.mark.parametrize("path", FLAGFILES, ids=lambda p: p.name)
def test_flagfile_parses_and_validates(path: Path, parse, monkeypatch):
    monkeypatch.chdir(ROOT)  # flagfiles include others by repo-relative path
    config = parse(f"--flagfile={path}")
    assert isinstance(config, C.RunConfig)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#") and any(
        "python -m hpcai_jax.main" in line for line in lines if line.startswith("#")
    )


def test_command_line_overrides_flagfile(parse, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = parse("--flagfile=configs/quickstart.flags", "--ensemble_size=8", "--seed=7")
    assert config.mesh.ensemble_size == 8 and config.train.seed == 7
    assert config.model.model == "resnet_small"


def _scored(dataset="imagenet2012", model="resnet50", **results):
    return C.RunConfig(
        data=C.DataConfig(dataset=dataset),
        model=C.ModelConfig(model=model),
        results=C.ResultsConfig(**results),
    ).validate()


def test_official_target_belongs_to_resnet50_on_imagenet():
    target = _scored().quality_target()
    assert (target.target, target.exponent, target.metric) == (0.763, 5.0, "top1_accuracy")
    assert target.target_is_official and target.exponent_is_official
    assert _scored(dataset="imagenet2012:5.1.0").quality_target().target_is_official
    assert _scored(target_quality=0.763).quality_target().target_is_official
    other = _scored(target_quality=0.7).quality_target()
    assert other.target == 0.7 and not other.target_is_official


@pytest.mark.parametrize(
    "dataset,model",
    [("fashion_mnist", "resnet_small"), ("imagenet2012", "resnet18"), ("cifar10", "resnet50")],
)
def test_any_other_run_must_name_its_target(dataset, model):
    with pytest.raises(
        UsageError,
        match=f"--target_quality: no official target for "
        f"--workload=image_classification --model={model} "
        f"--dataset={dataset}",
    ):
        _scored(dataset=dataset, model=model)
    target = _scored(dataset=dataset, model=model, target_quality=0.9).quality_target()
    assert (target.target, target.exponent, target.target_is_official) == (0.9, 5.0, False)


def test_unscored_runs_need_no_target():
    C.RunConfig(data=C.DataConfig(dataset="synthetic")).validate()
    C.RunConfig(mode="flops").validate()
    C.RunConfig(mode="stream").validate()


def test_quality_exponent_zero_means_zero():
    target = _scored(quality_exponent=0.0).quality_target()
    assert target.exponent == 0.0 and not target.exponent_is_official
    assert _scored(quality_exponent=-1).quality_target().exponent == 5.0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(train=C.TrainConfig(epochs=0, steps=0)), "expected epochs > 0 or steps > 0"),
        (dict(optim=C.OptimConfig(momentum=1.0)), r"--momentum=1.0: expected in \[0, 1\)"),
        (dict(results=C.ResultsConfig(target_quality=1.5)), "--target_quality=1.5"),
        (dict(results=C.ResultsConfig(quality_exponent=-2)), "--quality_exponent=-2"),
        (dict(results=C.ResultsConfig(flops_source="guess")), "--flops_source='guess'"),
        (dict(mesh=C.MeshConfig(ensemble_size=0)), "--ensemble_size=0"),
        (dict(train=C.TrainConfig(eval_every_epochs=-1)), "--eval_every_epochs=-1: expected >= 0"),
        (dict(train=C.TrainConfig(seed=-1)), r"--seed=-1: expected an integer in \[0, 2\^32\)"),
        (dict(train=C.TrainConfig(seed=2**32)), "--seed=4294967296: expected an integer"),
        (dict(optim=C.OptimConfig(learning_rate=float("inf"))), "--learning_rate=inf: expected a"),
        (dict(train=C.TrainConfig(epochs=float("nan"), steps=3)), "--epochs=nan: expected a fin"),
        (dict(results=C.ResultsConfig(target_quality=float("nan"))), "--target_quality=nan"),
        (dict(stream=C.StreamConfig(array_mib=float("inf"))), "--array_mib=inf: expected a"),
        (
            dict(train=C.TrainConfig(stop_at_target=True)),
            "--stop_at_target: needs --eval_every_epochs > 0",
        ),
        (
            dict(
                data=C.DataConfig(dataset="synthetic"),
                train=C.TrainConfig(stop_at_target=True, eval_every_epochs=1),
            ),
            "--stop_at_target: --dataset=synthetic has no held-out quality to reach",
        ),
    ],
)
def test_validation_messages(kwargs, message):
    with pytest.raises(UsageError, match=message):
        C.RunConfig(**kwargs).validate()


def test_a_negative_seed_is_a_one_line_error():
    """It used to reach numpy's SeedSequence (a traceback)."""
    assert_one_line_error(run_in_process("--seed=-3", "--steps=1"), "--seed=-3", "[0, 2^32)")
