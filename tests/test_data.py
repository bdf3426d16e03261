"""Data sources and the pipeline: IDX parsing, tfds array_record sets, sharded batch assembly."""

import gzip
import io
import itertools
import json
import struct
import threading

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds
from helpers import FakeClock, colour_image, run_main, three_class_image_info, tiny_config
from PIL import Image

from hpcai_jax import config as C
from hpcai_jax.data import fashion_mnist
from hpcai_jax.data.pipeline import (
    MAX_READ_SPLIT,
    Prefetcher,
    ReadCache,
    eval_batches,
    read_split,
    train_batch,
)
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.errors import UsageError


def _write_idx(path, array):
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_idx_round_trip_and_errors(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    _write_idx(tmp_path / "x.gz", images)
    np.testing.assert_array_equal(fashion_mnist.read_idx(tmp_path / "x.gz"), images)
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"\x00\x00\x09\x01" + b"\x00" * 8))
    with pytest.raises(UsageError, match="bad.gz: not a valid IDX file"):
        fashion_mnist.read_idx(tmp_path / "bad.gz")
    truncated = gzip.compress(struct.pack(">HBB", 0, 8, 1) + struct.pack(">I", 10) + b"\x01" * 4)
    (tmp_path / "short.gz").write_bytes(truncated)
    with pytest.raises(UsageError, match="short.gz: not a valid IDX file"):
        fashion_mnist.read_idx(tmp_path / "short.gz")


def test_fashion_mnist_from_debian_package():
    train = fashion_mnist.load_split("", "train")
    test = fashion_mnist.load_split("", "test")
    assert (len(train), len(test)) == (60_000, 10_000)
    image = train.arrays["image"]
    assert image.shape[1:] == (28, 28, 1) and image.dtype == np.uint8
    assert set(np.unique(test.arrays["label"])) == set(range(10))


class _CountingSource:
    def __init__(self, source):
        self.spec, self._source, self.reads = source.spec, source, []

    def __len__(self):
        return len(self._source)

    def read(self, indices):
        self.reads.append(np.asarray(indices))
        return self._source.read(indices)


def test_train_batch_reads_each_devices_rows_once():
    setup = build_setup(tiny_config(mesh=C.MeshConfig(4, 2, 4)))
    source = _CountingSource(setup.datasets.train)
    batch = train_batch(source, setup.sampler, setup.mesh, 4, step=5)
    # 8 devices, each holding 2 members × 4 rows: 8 reads of 8 rows, 64 = M × B rows in all.
    assert len(source.reads) == 8 and all(len(r) == 8 for r in source.reads)
    expected = np.stack([setup.sampler.step_indices(m, 5) for m in range(4)])
    np.testing.assert_array_equal(np.sort(np.concatenate(source.reads)), np.sort(expected.ravel()))
    read = setup.datasets.train.read(expected.ravel())
    np.testing.assert_array_equal(
        np.asarray(batch["image"]), read["image"].reshape(4, 16, 28, 28, 1)
    )
    np.testing.assert_array_equal(np.asarray(batch["label"]), read["label"].reshape(4, 16))
    assert batch["image"].sharding.spec == jax.sharding.PartitionSpec("ensemble", "data")


def test_later_evaluations_read_from_the_cache_up_to_its_limit():
    setup = build_setup(tiny_config())
    source = _CountingSource(setup.datasets.eval.head(130))

    def labels(cache):
        return [b.host(b.batch["label"]) for b in eval_batches(source, setup.mesh, 63, None, cache)]

    cache = ReadCache(limit_bytes=1 << 30)
    first = labels(cache)
    reads, lookups = len(source.reads), cache.hits + cache.misses  # padding slices repeat
    assert reads > 0 and cache.misses == reads and cache.bytes > 0
    again = labels(cache)  # the second evaluation: every block from host memory
    assert len(source.reads) == reads and cache.hits + cache.misses == 2 * lookups
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    tiny = ReadCache(limit_bytes=1)  # nothing fits: every evaluation reads again
    labels(tiny)
    labels(tiny)
    assert tiny.hits == 0 and tiny.bytes == 0 and len(source.reads) == reads + 2 * lookups


def test_eval_batches_split_reads_over_members_and_spread_them_over_the_set():
    setup = build_setup(tiny_config())  # 4 member groups × P_degree 2
    held_out = setup.datasets.eval.head(130)
    source = _CountingSource(held_out)
    batches = list(eval_batches(source, setup.mesh, 63))  # rounded up to 64 (data axis of 2)
    # Each data block of 32 rows is read in 4 slices of 8, one per member group: a batch reads
    # its 64 rows once (8 reads of 8), not once per member group.
    assert [(b.split, b.data_size, len(b.rows)) for b in batches] == [(4, 2, 64)] * 3
    assert len(source.reads) == 3 * 8 and all(len(r) == 8 for r in source.reads)
    assert batches[0].valid.sharding.spec == jax.sharding.PartitionSpec("ensemble", "data")
    rows = np.stack([b.rows for b in batches])
    labels = np.stack([b.host(b.batch["label"]) for b in batches])
    valid = np.stack([b.host(b.valid) for b in batches])
    assert sorted(rows[rows >= 0].tolist()) == list(range(130)) and (rows < 0).sum() == 62
    np.testing.assert_array_equal(valid, rows >= 0)
    np.testing.assert_array_equal(labels[valid], held_out.arrays["label"][rows[valid]])
    # Slice position j of every batch reads the next 8 rows of its own stretch of 24: the
    # 8 positions start 24 rows apart, far from each other in the set's files.
    by_position = rows.reshape(3, 8, 8).transpose(1, 0, 2).reshape(8, 24)
    padded = np.concatenate([np.arange(130), np.full(62, -1)])
    np.testing.assert_array_equal(by_position, padded.reshape(8, 24))
    # A chosen subset, in the order given: what the out-of-bag estimate reads.
    subset = np.array([7, 3, 120, 3])
    (only,) = eval_batches(source, setup.mesh, 8, subset)
    np.testing.assert_array_equal(only.rows, [7, 3, 120, 3, -1, -1, -1, -1])
    np.testing.assert_array_equal(
        only.host(only.batch["label"])[:4], held_out.arrays["label"][subset]
    )


@pytest.mark.parametrize(
    ("block", "ensemble", "split"), [(32, 4, 4), (50, 4, 2), (125, 1250, 25), (7, 64, 1)]
)
def test_read_split_divides_the_block_and_the_ensemble(block, ensemble, split):
    assert read_split(block, ensemble) == split
    assert read_split(4096, 4096) == MAX_READ_SPLIT


def test_prefetcher_counts_waits_and_propagates_errors():
    # A fake clock that the producer moves: each batch is made only once the consumer has
    # started waiting for it (a permit per clock reading that starts a wait), and takes 0.1 s of
    # that clock. The wait is then exactly the producer's time, whatever the machine's load.
    clock, permits, reads = FakeClock(), threading.Semaphore(0), itertools.count()

    def read():
        now = clock()
        if next(reads) % 2 == 0:  # next() reads the clock twice: before and after its wait
            permits.release()  # after the reading: the batch's time falls inside the wait
        return now

    def slow(step):
        assert permits.acquire(timeout=10)
        clock.advance(0.1)
        return step * 10

    prefetch = Prefetcher(slow, 0, 3, depth=4, clock=read)
    assert [prefetch.next() for _ in range(3)] == [0, 10, 20]
    with pytest.raises(StopIteration):
        prefetch.next()
    prefetch.close()
    assert prefetch.wait_s == pytest.approx(0.3)

    # A producer that takes none of the consumer's time: batches already made cost no wait.
    prefetch = Prefetcher(lambda step: step * 10, 0, 3, depth=4, clock=FakeClock())
    assert [prefetch.next() for _ in range(3)] == [0, 10, 20]
    with pytest.raises(StopIteration):
        prefetch.next()
    prefetch.close()
    assert prefetch.wait_s == 0

    def fail(step):
        raise OSError("disk gone")

    prefetch = Prefetcher(fail, 0, 3, depth=2)
    with pytest.raises(OSError, match="disk gone"):
        prefetch.next()
    prefetch.close()


class TinyImages(tfds.core.GeneratorBasedBuilder):
    """A 3-class image set built here in array_record format: the tfds path without downloads.
    One held-out record (key 7) is a truncated PNG: a corrupt file, as large sets have."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return three_class_image_info(self, "png")

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(64, 0), "test": self._generate_examples(24, 1)}

    def _generate_examples(self, n, seed):
        rng = np.random.default_rng(seed)
        for i in range(n):
            label = i % 3
            data = colour_image(rng, (20 + i % 7, 18, 3), label, "PNG")
            yield (
                i,
                {"image": data[: len(data) // 2] if (seed, i) == (1, 7) else data, "label": label},
            )


@pytest.fixture(scope="module")
def tiny_tfds(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds")
    TinyImages(data_dir=str(data_dir), file_format="array_record").download_and_prepare()
    return data_dir


def test_tfds_source_reads_and_resizes(tiny_tfds):
    from hpcai_jax.data.datasets import open_datasets

    datasets = open_datasets(
        C.DataConfig(dataset="tiny_images", data_dir=str(tiny_tfds), image_size=16)
    )
    assert (len(datasets.train), len(datasets.eval)) == (64, 24)
    assert datasets.spec.num_classes == 3 and datasets.spec.image_shape == (16, 16, 3)
    read = datasets.train.read(np.array([0, 5, 5, 63]))
    images, labels = read["image"], read["label"]
    assert images.shape == (4, 16, 16, 3) and images.dtype == np.uint8
    # tfds shuffles examples when it writes them: check each label against its image's content.
    np.testing.assert_array_equal(labels, images.mean(axis=(1, 2)).argmax(-1))
    np.testing.assert_array_equal(images[1], images[2])


@pytest.mark.slow
def test_main_trains_on_a_tfds_set(tiny_tfds, tmp_path):
    """A fresh process finds the set from its files alone (no builder class registered); the
    corrupt held-out record is replaced and listed in the record."""
    proc = run_main(
        "--dataset=tiny_images",
        "--bad_example_policy=skip",
        f"--data_dir={tiny_tfds}",
        "--image_size=16",
        "--ensemble_size=2",
        "--members_per_device=1",
        "--parallel_degree=4",
        "--batch_size=8",
        "--steps=3",
        "--eval_batch_size=8",
        "--model=resnet_small",
        "--target_quality=0.5",
        f"--results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.glob("*.json")
    quality = json.loads(path.read_text())["quality"]
    assert quality["metric"] == "top1_accuracy" and 0 <= quality["ensemble"] <= 1
    raw = tfds.data_source(
        "tiny_images",
        split="test",
        data_dir=str(tiny_tfds),
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    corrupt = [i for i in range(len(raw)) if _fails(lambda i=i: _decode(raw[i]["image"]))]
    assert len(corrupt) == 1
    assert json.loads(path.read_text())["data"]["skipped_examples"] == {"test": corrupt}


def _decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _fails(read) -> bool:
    try:
        read()
    except Exception:  # noqa: BLE001 - PIL raises several types for a corrupt file
        return True
    return False
