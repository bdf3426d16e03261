"""Records that do not decode: --bad_example_policy=fail names them, skip replaces them by real
examples (the same ones everywhere) and lists them, through the workers and held-out reads."""

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds
from helpers import colour_image, three_class_image_info

from hpcai_jax import config as C
from hpcai_jax.axes import DATA, ENSEMBLE
from hpcai_jax.data import augment, bad_examples
from hpcai_jax.data.bad_examples import BAD, BadExampleError
from hpcai_jax.data.datasets import open_datasets
from hpcai_jax.data.pipeline import train_batches
from hpcai_jax.data.sampler import BootstrapSampler

SIZE, N = 16, 16


class BadJpeg(tfds.core.GeneratorBasedBuilder):
    """16 + 8 tiny JPEGs; train key 3 is cut in half (truncated JPEG), test key 5 is not an image."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return three_class_image_info(self)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(N, 0, 3), "test": self._generate_examples(8, 1, 5)}

    def _generate_examples(self, n, seed, bad):
        rng = np.random.default_rng(seed)
        for i in range(n):
            data = colour_image(rng, (20, 24, 3), i % 3)
            if i == bad:
                data = data[: len(data) // 2] if seed == 0 else b"not an image at all"
            yield i, {"image": data, "label": i % 3}


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds")
    BadJpeg(data_dir=str(data_dir), file_format="array_record").download_and_prepare()
    return data_dir


def _raw(bad_dir, split):
    return tfds.data_source(
        "bad_jpeg",
        split=split,
        data_dir=str(bad_dir),
        decoders={"image": tfds.decode.SkipDecoding()},
    )


def _corrupt(raw) -> int:
    """The record index tfds gave the corrupt example (it shuffles examples as it writes)."""
    (index,) = [i for i in range(len(raw)) if not _decodes(raw[i]["image"])]
    return index


def _decodes(data) -> bool:
    try:
        augment.eval_encoded(data, 3, SIZE)
    except Exception:  # noqa: BLE001
        return False
    return True


def _datasets(bad_dir, policy):
    return open_datasets(
        C.DataConfig(
            dataset="bad_jpeg", data_dir=str(bad_dir), image_size=SIZE, bad_example_policy=policy
        )
    )


def test_replacement_is_another_example_a_function_of_split_and_index():
    draws = [bad_examples.replacement("train", 7, a, 10) for a in range(50)]
    assert 7 not in draws and set(draws) == set(range(10)) - {7}
    assert draws == [bad_examples.replacement("train", 7, a, 10) for a in range(50)]
    assert draws != [bad_examples.replacement("validation", 7, a, 10) for a in range(50)]


def test_fail_names_the_data_set_split_and_record(bad_dir):
    held_out = _datasets(bad_dir, "fail").eval
    bad = _corrupt(_raw(bad_dir, "test"))
    held_out.read(np.asarray([i for i in range(8) if i != bad]))  # the others read fine
    with pytest.raises(BadExampleError) as e:
        held_out.read(np.arange(8))
    message = str(e.value)
    assert message.startswith(f"--dataset=bad_jpeg: split 'test' record {bad} does not decode (")
    assert "\n" not in message and isinstance(e.value, C.UsageError)


def test_skip_reads_a_real_replacement_and_lists_it(bad_dir):
    datasets = _datasets(bad_dir, "skip")
    raw = _raw(bad_dir, "test")
    bad = _corrupt(raw)
    got = datasets.eval.read(np.asarray([bad, bad, 0]))
    stand_in = bad_examples.replacement("test", bad, 0, len(raw))
    expected = augment.eval_encoded(raw[stand_in]["image"], 3, SIZE)
    np.testing.assert_array_equal(got["image"][0], expected)
    np.testing.assert_array_equal(got["image"][1], expected)
    assert list(got["label"][:2]) == [raw[stand_in]["label"]] * 2
    assert datasets.eval.bad_examples.skipped() == [bad]
    assert datasets.train.bad_examples.skipped() == []


def test_training_reads_replace_with_the_slots_own_augmentation(bad_dir):
    datasets = _datasets(bad_dir, "skip")
    raw = _raw(bad_dir, "train")
    bad = _corrupt(raw)
    keys = np.asarray([[5, 1, 2, 3], [5, 0, 0, 4]])
    got = datasets.train.train_reader()(np.asarray([bad, bad]), keys)
    stand_in = bad_examples.replacement("train", bad, 0, len(raw))
    for row, key in enumerate(keys):
        rng = augment.example_rng(*key)
        expected = augment.train_image(raw[stand_in]["image"], 3, SIZE, rng)
        np.testing.assert_array_equal(got["image"][row], expected)
    assert [index for index, _ in got[BAD]] == [bad, bad]
    assert "truncated" in got[BAD][0][1] or "OSError" in got[BAD][0][1]


def test_the_pipeline_hands_bad_training_records_to_the_policy(bad_dir):
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 4), (ENSEMBLE, DATA))
    sampler = BootstrapSampler("with_replacement", N, 8, seed=5)
    bad = _corrupt(_raw(bad_dir, "train"))
    steps = range(2 * sampler.steps_per_epoch)
    drawn = any(bad in sampler.step_indices(m, s) for m in range(2) for s in steps)
    assert drawn  # the sample reads the corrupt record
    skip = _datasets(bad_dir, "skip").train
    make = train_batches(skip, sampler, mesh, 2, len(steps), workers=0)
    for step in steps:
        make(step)
    assert skip.bad_examples.skipped() == [bad]
    fail = _datasets(bad_dir, "fail").train
    make = train_batches(fail, sampler, mesh, 2, len(steps), workers=0)
    with pytest.raises(BadExampleError, match=f"split 'train' record {bad} does not decode"):
        for step in steps:
            make(step)
