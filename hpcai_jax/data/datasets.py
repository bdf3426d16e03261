"""Opens the training and held-out sources named by the configuration."""

from __future__ import annotations

import dataclasses

from hpcai_jax.config import DataConfig
from hpcai_jax.data import fashion_mnist, friedman
from hpcai_jax.data.source import DataSpec, ImageSpec, Source


@dataclasses.dataclass(frozen=True)
class Datasets:
    spec: DataSpec
    train: Source | None  # None: synthetic data generated on the devices
    eval: Source | None

    @property
    def synthetic(self) -> bool:
        return self.train is None


def synthetic_spec(config: DataConfig) -> ImageSpec:
    return ImageSpec(
        name="synthetic",
        image_shape=(config.image_size, config.image_size, 3),
        num_classes=config.num_classes,
        mean=(127.5,) * 3,
        std=(64.0,) * 3,
    )


def data_spec(config: DataConfig) -> DataSpec:
    """The data set's fields without loading it (a tfds set's metadata is read)."""
    fixed = {
        "synthetic": lambda: synthetic_spec(config),
        "fashion_mnist": lambda: fashion_mnist.SPEC,
        "friedman1": lambda: friedman.SPEC,
    }
    return fixed[config.dataset]() if config.dataset in fixed else open_datasets(config).spec


def open_datasets(config: DataConfig) -> Datasets:
    """Raises UsageError with a how-to-get-it hint when a data set is missing or corrupt."""
    if config.dataset == "synthetic":
        return Datasets(synthetic_spec(config), None, None)
    if config.dataset == "fashion_mnist":
        train = fashion_mnist.load_split(config.data_dir, "train")
        held_out = fashion_mnist.load_split(config.data_dir, "test")
    elif config.dataset == "friedman1":
        train, held_out = friedman.load()
    else:
        from hpcai_jax.data.tfds_source import TfdsSource, eval_split_name

        train = TfdsSource(config.dataset, "train", config.data_dir, config.image_size)
        held_out = TfdsSource(
            config.dataset,
            eval_split_name(config.dataset, config.data_dir),
            config.data_dir,
            config.image_size,
        )
    return Datasets(
        train.spec, train.head(config.train_examples), held_out.head(config.eval_examples)
    )
