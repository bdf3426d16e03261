"""A run's configuration states what its data set determines: `num_classes` is the data set's
count and `image_size` its images' height in the record, so in a packed flagfile (docs/record.md
`config`), and a flag that contradicts the data set is one line, exit 2, before anything is
written."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import TINY
from helpers import assert_one_line_error, run_in_process

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.data import fashion_mnist, friedman
from hpcai_jax.data.datasets import resolved, synthetic_spec
from hpcai_jax.errors import UsageError
from hpcai_jax.submission import flagfile


def test_the_record_and_its_flagfile_state_the_data_sets_classes(tiny_run):
    config = records.read(tiny_run.record).config
    assert config["data"]["dataset"] == "fashion_mnist"
    assert config["data"]["num_classes"] == 10  # not the flag's default
    assert config["data"]["image_size"] == 28  # Fashion-MNIST's 28×28, not 0
    lines = flagfile.lines(config, "real-train")
    assert "--num_classes=10" in lines and "--image_size=28" in lines


def test_resolved_takes_the_data_sets_classes():
    fashion = C.DataConfig()
    assert fashion.dataset == "fashion_mnist" and fashion.num_classes == 0  # 0: the data set's
    assert resolved(fashion, fashion_mnist.SPEC).num_classes == 10
    given = dataclasses.replace(fashion, num_classes=10, image_size=28)
    assert resolved(given, fashion_mnist.SPEC) == given  # what it states already: unchanged
    with pytest.raises(UsageError, match="--num_classes=1000: --dataset=fashion_mnist has 10 cl"):
        resolved(dataclasses.replace(fashion, num_classes=1000), fashion_mnist.SPEC)
    # Synthetic data has the classes it is given, 1000 by default.
    for given, classes in ((0, 1000), (7, 7)):
        synthetic = C.DataConfig(dataset="synthetic", num_classes=given)
        assert resolved(synthetic, synthetic_spec(synthetic)).num_classes == classes
    table = C.DataConfig(dataset="friedman1", num_classes=3)
    with pytest.raises(UsageError, match="--dataset=friedman1 has no classes"):
        resolved(table, friedman.SPEC)
    assert resolved(dataclasses.replace(table, num_classes=0), friedman.SPEC).num_classes == 0


def test_resolved_takes_the_data_sets_image_size():
    fashion = C.DataConfig()
    assert fashion.image_size == 0 and resolved(fashion, fashion_mnist.SPEC).image_size == 28
    with pytest.raises(
        UsageError, match="--image_size=64: --dataset=fashion_mnist's images are 28×28"
    ):
        resolved(dataclasses.replace(fashion, image_size=64), fashion_mnist.SPEC)
    # Synthetic images are made at the size asked for, 224 by default.
    for given, size in ((0, 224), (32, 32)):
        synthetic = C.DataConfig(dataset="synthetic", image_size=given)
        assert resolved(synthetic, synthetic_spec(synthetic)).image_size == size
    with pytest.raises(UsageError, match="--image_size=32: --dataset=friedman1 has no images"):
        resolved(C.DataConfig(dataset="friedman1", image_size=32), friedman.SPEC)
    assert resolved(C.DataConfig(dataset="friedman1"), friedman.SPEC).image_size == 0


def test_num_classes_that_contradict_the_data_set_are_one_line(tmp_path):
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", "--num_classes=1000")
    assert_one_line_error(proc, "--num_classes=1000", "--dataset=fashion_mnist has 10 classes")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    proc = run_in_process(*TINY, f"--results_dir={tmp_path}/r", "--image_size=224")
    assert_one_line_error(proc, "--image_size=224", "fashion_mnist's images are 28×28")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
