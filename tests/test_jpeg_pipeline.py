"""The JPEG training pipeline: tfds array_record images decoded and augmented in grain workers."""

import dataclasses
import logging
import multiprocessing
import os
import time

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds
from helpers import colour_image, run_in_process, shm_blocks, shm_lasting, three_class_image_info

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.axes import DATA, ENSEMBLE
from hpcai_jax.data import augment, jpeg_region
from hpcai_jax.data.datasets import open_datasets
from hpcai_jax.data.pipeline import Prefetcher, WorkerBatches, train_batches
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.data.tfds_source import TfdsSource
from hpcai_jax.data.workers import default_workers
from hpcai_jax.errors import UsageError

SIZE, M, B, N = 16, 2, 8, 64  # 8 steps an epoch


class TinyJpeg(tfds.core.GeneratorBasedBuilder):
    """64 + 24 JPEGs of 40 × 30 (or 30 × 40), in array_record form: built here, no download."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return three_class_image_info(self)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(N, 0), "test": self._generate_examples(24, 1)}

    def _generate_examples(self, n, seed):
        rng = np.random.default_rng(seed)
        for i in range(n):
            label = i % 3
            shape = (30, 40, 3) if i % 2 else (40, 30, 3)
            yield i, {"image": colour_image(rng, shape, label), "label": label}


@pytest.fixture(scope="module")
def jpeg_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds")
    TinyJpeg(data_dir=str(data_dir), file_format="array_record").download_and_prepare()
    return data_dir


@pytest.fixture(scope="module")
def data(jpeg_dir):
    datasets = open_datasets(
        C.DataConfig(dataset="tiny_jpeg", data_dir=str(jpeg_dir), image_size=SIZE)
    )
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(M, 4), (ENSEMBLE, DATA))
    sampler = BootstrapSampler("with_replacement", N, B, seed=5)
    return datasets, mesh, sampler


def _batches(data, workers, last=12):
    datasets, mesh, sampler = data
    return train_batches(datasets.train, sampler, mesh, M, last, workers)


def _host(batch):
    return {name: np.asarray(a) for name, a in batch.items()}


@pytest.fixture(scope="module")
def in_process(data):
    """Steps 0..11 (one epoch and a half) read in this process: the reference."""
    make = _batches(data, workers=0)
    assert isinstance(make, WorkerBatches)
    return [_host(make(step)) for step in range(12)]


def test_in_process_batches_are_the_augmented_bootstrap_examples(jpeg_dir, data, in_process):
    datasets, _, sampler = data
    raw = tfds.data_source(
        "tiny_jpeg",
        split="train",
        data_dir=str(jpeg_dir),
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    for step in (3, 9):  # epochs 0 and 1
        batch = in_process[step]
        assert batch["image"].shape == (M, B, SIZE, SIZE, 3) and batch["image"].dtype == np.uint8
        epoch, pos = divmod(step, sampler.steps_per_epoch)
        for member in range(M):
            indices = sampler.step_indices(member, step)
            for row in (0, 5):
                record = raw[int(indices[row])]
                expected = augment.train_image(
                    record["image"],
                    3,
                    SIZE,
                    augment.example_rng(5, member, epoch, pos * B + row),
                )
                np.testing.assert_array_equal(batch["image"][member, row], expected)
                assert batch["label"][member, row] == record["label"]
    # The class is the bright channel, whatever the crop.
    images, labels = in_process[0]["image"], in_process[0]["label"]
    np.testing.assert_array_equal(images.mean(axis=(2, 3)).argmax(-1), labels)
    # Training reads are augmented; held-out reads of the same examples are not.
    held_out = datasets.train.read(sampler.step_indices(0, 0))["image"]
    assert held_out.shape == (B, SIZE, SIZE, 3) and not np.array_equal(held_out, images[0])


def test_noaugment_trains_on_the_held_out_transform(jpeg_dir):
    config = C.DataConfig(dataset="tiny_jpeg", data_dir=str(jpeg_dir), image_size=SIZE)
    plain = open_datasets(dataclasses.replace(config, augment=False)).train
    indices = np.arange(8)
    keys = np.stack([np.full(8, 5), np.zeros(8), np.zeros(8), indices], axis=1)
    trained = plain.train_reader()(indices, keys)
    np.testing.assert_array_equal(trained["image"], plain.read(indices)["image"])
    augmented = open_datasets(config).train.train_reader()(indices, keys)
    assert not np.array_equal(augmented["image"], trained["image"])


def test_a_missing_libjpeg_turbo_3_is_logged(jpeg_dir, monkeypatch, caplog):
    def open_source():
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            TfdsSource("tiny_jpeg", "train", str(jpeg_dir), SIZE)
        return [r.getMessage() for r in caplog.records if "libjpeg-turbo" in r.getMessage()]

    if jpeg_region.library() is not None:
        assert open_source() == []
    monkeypatch.setattr(jpeg_region, "library", lambda: None)
    (message,) = open_source()
    assert message.startswith("tiny_jpeg: no libjpeg-turbo 3") and "PIL" in message


@pytest.mark.slow
def test_workers_give_exactly_the_in_process_batches_and_stop(data, in_process):
    shm_before = shm_blocks()
    make = _batches(data, workers=2)
    prefetch = Prefetcher(make, 0, 12, depth=2)
    start = time.perf_counter()
    first = prefetch.next()
    waited = time.perf_counter() - start
    assert first["image"].sharding.spec == jax.sharding.PartitionSpec(ENSEMBLE, DATA)
    # The first batch waits for the workers to start: the wait is what the consumer saw.
    assert waited > 0.2 and prefetch.wait_s == pytest.approx(waited, rel=0.1)
    got = [_host(first)] + [_host(prefetch.next()) for _ in range(11)]
    with pytest.raises(StopIteration):
        prefetch.next()
    assert len(multiprocessing.active_children()) >= 2
    prefetch.close()
    assert multiprocessing.active_children() == []
    # Every block the workers handed over is unlinked already: none left for the resource
    # tracker to report as leaked at exit.
    assert shm_lasting(shm_blocks() - shm_before, lambda left: not left) == set()
    for step, (a, b) in enumerate(zip(got, in_process, strict=True)):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"step {step} {name}")


@pytest.mark.slow
def test_a_pipeline_started_mid_epoch_reads_what_an_uninterrupted_one_read(data, in_process):
    make = _batches(data, workers=1)
    try:
        resumed = [_host(make(step)) for step in range(5, 10)]  # crosses into epoch 1
        again = _host(make(2))  # out of order: the workers restart there
    finally:
        make.close()
    for a, b in zip(resumed + [again], in_process[5:10] + [in_process[2]], strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["label"], b["label"])
    assert not np.array_equal(in_process[2]["image"], in_process[10]["image"])


def test_default_workers_take_the_cores_given_to_the_process(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(100)))
    assert (default_workers(1), default_workers(8)) == (16, 99)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert default_workers(8) == 1


def test_data_workers_flag_is_checked():
    with pytest.raises(UsageError, match="--data_workers=-2: expected >= 0"):
        C.DataConfig(data_workers=-2).validate()


@pytest.mark.slow
def test_main_trains_a_jpeg_set_through_the_workers(jpeg_dir, tmp_path):
    proc = run_in_process(
        "--dataset=tiny_jpeg",
        f"--data_dir={jpeg_dir}",
        f"--image_size={SIZE}",
        "--data_workers=1",
        "--ensemble_size=2",
        "--members_per_device=1",
        "--parallel_degree=4",
        f"--batch_size={B}",
        "--steps=3",
        "--eval_batch_size=8",
        "--model=resnet_small",
        "--target_quality=0.5",
        f"--results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.glob("*.json")
    record = records.read(path)
    quality, timing = record.quality, record.timing
    assert quality.metric == "top1_accuracy" and 0 <= quality.ensemble <= 1
    assert timing.steps == 3 and 0 <= timing.data_wait_s <= timing.train_wall_s
