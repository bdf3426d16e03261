"""Every shipped flagfile parses and validates; flags override flagfiles."""

from pathlib import Path

import pytest
from helpers import ROOT

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
    assert lines[0].startswith("#") and any("python -m hpcai_jax.main" in line for line in lines
                                            if line.startswith("#"))


def test_command_line_overrides_flagfile(parse, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = parse("--flagfile=configs/quickstart.flags", "--ensemble_size=8", "--seed=7")
    assert config.mesh.ensemble_size == 8 and config.train.seed == 7
    assert config.model.model == "resnet_small"


def test_workload_defaults_for_vflops():
    config = C.RunConfig().validate()
    assert (config.target_quality, config.quality_exponent) == (0.763, 5.0)


@pytest.mark.parametrize("kwargs,message", [
    (dict(train=C.TrainConfig(epochs=0, steps=0)), "expected epochs > 0 or steps > 0"),
    (dict(optim=C.OptimConfig(momentum=1.0)), r"--momentum=1.0: expected in \[0, 1\)"),
    (dict(results=C.ResultsConfig(target_quality=1.5)), "--target_quality=1.5"),
    (dict(mesh=C.MeshConfig(ensemble_size=0)), "--ensemble_size=0"),
])
def test_validation_messages(kwargs, message):
    with pytest.raises(UsageError, match=message):
        C.RunConfig(**kwargs).validate()
