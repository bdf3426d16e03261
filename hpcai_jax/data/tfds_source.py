"""Any tensorflow-datasets image-classification set prepared in array_record format, read by
random access with `tfds.data_source` (no TensorFlow needed; docs/design.md, fact 7).

ImageNet (`imagenet2012`) is the production target. Images come undecoded (JPEG or PNG bytes)
and are decoded by libjpeg-turbo 3, only the crop's region, or else by PIL (`augment.py`).
`read` (held-out, out of bag) resizes and centre-crops on host threads; training reads go
through `train_reader`, which the pipeline runs in worker processes and which crops at random
and flips (`augment.train_image`). A record that does not decode is replaced by another
(`bad_examples.py`) and reported to `bad_examples`, which applies --bad_example_policy.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

import numpy as np
from absl import logging

from hpcai_jax.data import augment, jpeg_region
from hpcai_jax.data.bad_examples import BAD, BadExamples, decode_or_replace
from hpcai_jax.data.source import ImageSpec
from hpcai_jax.errors import UsageError

_IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
_IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
_EVAL_SPLITS = ("validation", "test")


def _how_to_prepare(name: str, data_dir: str) -> str:
    return (
        f"prepare it with `tfds build {name} --data_dir={data_dir} --file_format=array_record`"
        + (
            " (ImageNet needs its archives in <data_dir>/downloads/manual first)"
            if name.startswith("imagenet")
            else ""
        )
    )


def _open_undecoded(name: str, split: str, data_dir: str):
    """The split's tfds data source, images as their file bytes: we decode them (augment.py)."""
    import tensorflow_datasets as tfds

    return tfds.data_source(
        name, split=split, data_dir=data_dir, decoders={"image": tfds.decode.SkipDecoding()}
    )


def _default_dir() -> str:
    return os.environ.get("TFDS_DATA_DIR", str(Path.home() / "tensorflow_datasets"))


class TfdsSource:
    """One split of a prepared tfds data set, resized to a fixed square size."""

    def __init__(
        self,
        name: str,
        split: str,
        data_dir: str,
        image_size: int,
        augment: bool = True,
        bad_example_policy: str = "fail",
    ):
        import tensorflow_datasets as tfds  # slow import: only when a tfds set is used

        data_dir = data_dir or _default_dir()
        try:
            builder = tfds.builder(name, data_dir=data_dir)
            if not builder.is_prepared():
                raise UsageError(
                    f"--dataset={name}: not found or not prepared under --data_dir="
                    f"{data_dir}; {_how_to_prepare(name, data_dir)}"
                )
            info = builder.info
            if split not in info.splits:
                raise UsageError(
                    f"--dataset={name}: no split {split!r} under --data_dir={data_dir} "
                    f"(has {', '.join(info.splits)})"
                )
            self._source = _open_undecoded(name, split, data_dir)
            self.shards = info.splits[split].num_shards  # each held open by its reader
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 - tfds raises many types for a missing/unprepared set
            raise UsageError(
                f"--dataset={name}: not found or not prepared under --data_dir={data_dir} "
                f"({type(e).__name__}); {_how_to_prepare(name, data_dir)}"
            ) from None
        features = info.features
        if "image" not in features or "label" not in features:
            raise UsageError(
                f"--dataset={name}: expected 'image' and 'label' features, has "
                f"{', '.join(features)}"
            )
        channels = features["image"].shape[-1] or 3
        self.spec = ImageSpec(
            name=name,
            image_shape=(image_size, image_size, channels),
            num_classes=features["label"].num_classes,
            mean=_IMAGENET_MEAN if channels == 3 else (127.5,) * channels,
            std=_IMAGENET_STD if channels == 3 else (64.0,) * channels,
        )
        self._name, self._split, self._data_dir = name, split, data_dir
        self._size = image_size
        self._augment = augment
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
        self.bad_examples = BadExamples(name, split, bad_example_policy)
        if jpeg_region.library() is None:
            logging.warning(
                "%s: no libjpeg-turbo 3 (TurboJPEG API) found: PIL decodes whole JPEGs, about "
                "twice the CPU an image; `pip install turbojpeg` (x86-64 Linux wheel) or a "
                "system libjpeg-turbo >= 3.0 decodes only the crops (docs/input.md)",
                name,
            )

    def __len__(self) -> int:
        return len(self._source)

    def _eval_image(self, index: int, record: dict):
        channels = self.spec.image_shape[-1]
        return decode_or_replace(
            self._split,
            index,
            record,
            self._source.__getitem__,
            len(self._source),
            lambda r: augment.eval_encoded(r["image"], channels, self._size),
        )

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Held-out form: shorter side to size/0.875, centre crop."""
        indices = [int(i) for i in indices]
        records = self._source.__getitems__(indices)
        done = list(self._pool.map(self._eval_image, indices, records))
        self.bad_examples.note([b for _, _, bad in done for b in bad])
        labels = np.asarray([r["label"] for _, r, _ in done], dtype=np.int32)
        return {"image": np.stack([image for image, _, _ in done]), "label": labels}

    def train_reader(self) -> TrainImages:
        """Training form (random-resized crop and flip, or the held-out form with
        --noaugment), for the pipeline's worker processes."""
        return TrainImages(
            self._name,
            self._split,
            self._data_dir,
            self._size,
            self.spec.image_shape[-1],
            self._augment,
        )

    def head(self, n: int) -> TfdsSource | _Head:
        return self if n == 0 or n >= len(self) else _Head(self, n)


class _Head:
    """The first n examples of a source, without reading any."""

    def __init__(self, source: TfdsSource, n: int):
        self.spec, self._source, self._n = source.spec, source, n
        self.bad_examples = source.bad_examples

    def __len__(self) -> int:
        return self._n

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return self._source.read(indices)

    def train_reader(self) -> TrainImages:
        return self._source.train_reader()


class TrainImages:
    """Reads and augments training images. It pickles as the split's name and place and opens
    the files where it runs (grain's workers): the tfds source object would carry its builder,
    and a builder class defined in a script cannot be re-created in a worker. Its result holds,
    under `bad_examples.BAD`, the records it replaced: [(index, why), ...]."""

    def __init__(
        self, name: str, split: str, data_dir: str, size: int, channels: int, augment: bool = True
    ):
        self._args = (name, split, data_dir, size, channels, augment)
        self._source = None

    def __getstate__(self):
        return self._args

    def __setstate__(self, args):
        self._args, self._source = args, None

    def __call__(self, indices: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
        name, split, data_dir, size, channels, augmented = self._args
        if self._source is None:
            self._source = _open_undecoded(name, split, data_dir)
        indices = [int(i) for i in indices]
        records = self._source.__getitems__(indices)
        images, labels, bad = [], [], []
        for index, record, key in zip(indices, records, keys, strict=True):

            def transform(r, key=key):
                if not augmented:
                    return augment.eval_encoded(r["image"], channels, size)
                rng = augment.example_rng(*(int(k) for k in key))  # afresh for a replacement
                return augment.train_image(r["image"], channels, size, rng)

            image, used, found = decode_or_replace(
                split, index, record, self._source.__getitem__, len(self._source), transform
            )
            images.append(image)
            labels.append(used["label"])
            bad += found
        return {"image": np.stack(images), "label": np.asarray(labels, np.int32), BAD: bad}


def eval_split_name(name: str, data_dir: str) -> str:
    """ImageNet's held-out split is 'validation'; many small sets only have 'test'."""
    import tensorflow_datasets as tfds

    try:
        splits = tfds.builder(name, data_dir=data_dir or _default_dir()).info.splits
    except Exception:  # noqa: BLE001 - reported properly when the split is opened
        return _EVAL_SPLITS[0]
    return next((s for s in _EVAL_SPLITS if s in splits), _EVAL_SPLITS[0])
