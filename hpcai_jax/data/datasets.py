"""Opens the training and held-out sources named by the configuration."""

from __future__ import annotations

import dataclasses

from absl import logging

from hpcai_jax.config import DataConfig
from hpcai_jax.data import fashion_mnist, friedman
from hpcai_jax.data.climate_train import ClimateTrainSet
from hpcai_jax.data.source import DataSpec, ImageSpec, Source
from hpcai_jax.errors import UsageError

SYNTHETIC_CLASSES = 1000  # synthetic data's classes at --num_classes=0: ImageNet-1k's


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
        image_shape=(config.square_image_size, config.square_image_size, 3),
        num_classes=config.num_classes or SYNTHETIC_CLASSES,
        mean=(127.5,) * 3,
        std=(64.0,) * 3,
    )


# The climate grid's height when --image_size is 0: the full grid for the real data, a CPU-sized
# one (1/8 of it) for the generated fields.
CLIMATE_DEFAULT_HEIGHT = {"extremeweather": 768, "synthetic_climate": 96}


def climate_height(config: DataConfig) -> int:
    """The climate grid's height (a divisor of 768); UsageError otherwise."""
    from hpcai_jax.data import climate

    height = config.image_size or CLIMATE_DEFAULT_HEIGHT[config.dataset]
    climate.check_image_size(height)
    return height


def resolved(config: DataConfig, spec: DataSpec) -> DataConfig:
    """The data settings with what the data set determines (`num_classes`: its own count;
    `image_size`: its images' height), so that the record, a packed flagfile and the MLLOG state
    what the run trained on. UsageError (one line) where a flag contradicts the data set."""
    return _resolved_size(_resolved_classes(config, spec), spec)


def _resolved_classes(config: DataConfig, spec: DataSpec) -> DataConfig:
    classes = getattr(spec, "num_classes", None)
    what = "has no classes" if classes is None else f"has {classes} classes"
    return _settled(config, "num_classes", classes, f" {what}")


def _resolved_size(config: DataConfig, spec: DataSpec) -> DataConfig:
    """A tfds or synthetic set's images are resized to --image_size and a climate grid is
    downscaled to it, so those specs agree with it; a fixed-size set (Fashion-MNIST) has its own."""
    shape = getattr(spec, "image_shape", None)
    if shape is None:
        return _settled(config, "image_size", None, " has no images")
    return _settled(config, "image_size", shape[0], f"'s images are {shape[0]}×{shape[1]}")


def _settled(config: DataConfig, name: str, own: int | None, what: str) -> DataConfig:
    """`config` with field `name` set to the data set's `own` value (None: it has none, and
    the field stays 0); a flag that contradicts it is one line, `what` saying what it has."""
    given = getattr(config, name)
    if own is None and not given:
        return config
    if own is not None and given in (0, own):
        return dataclasses.replace(config, **{name: own})
    expected = "0" if own is None else f"{own}, or 0 for the data set's"
    raise UsageError(f"--{name}={given}: --dataset={config.dataset}{what} (expected {expected})")


def data_spec(config: DataConfig) -> DataSpec:
    """The data set's fields without loading it (a tfds set's metadata is read). A climate set's
    spec carries neutral statistics here: only shapes matter when nothing is loaded."""
    fixed = {
        "synthetic": lambda: synthetic_spec(config),
        "fashion_mnist": lambda: fashion_mnist.SPEC,
        "friedman1": lambda: friedman.SPEC,
        "extremeweather": lambda: _climate_shape_spec(config),
        "synthetic_climate": lambda: _climate_shape_spec(config),
    }
    return fixed[config.dataset]() if config.dataset in fixed else open_datasets(config).spec


def _climate_shape_spec(config: DataConfig) -> DataSpec:
    from hpcai_jax.data import climate

    height = climate_height(config)
    channels = len(climate.CHANNELS)
    return climate.ClimateSpec(
        name=config.dataset,
        image_shape=(height, height * 3 // 2, channels),
        mean=(0.0,) * channels,
        std=(1.0,) * channels,
    )


def open_datasets(config: DataConfig) -> Datasets:
    """Raises UsageError with a how-to-get-it hint when a data set is missing or corrupt."""
    if config.dataset == "synthetic":
        return Datasets(synthetic_spec(config), None, None)
    train, held_out = _OPENERS.get(config.dataset, _tfds)(config)
    _warn_past_the_end(config, "train_examples", "training", len(train))
    _warn_past_the_end(config, "eval_examples", "held-out", len(held_out))
    return Datasets(
        train.spec, train.head(config.train_examples), held_out.head(config.eval_examples)
    )


def _fashion_mnist(config: DataConfig) -> tuple[Source, Source]:
    train = fashion_mnist.load_split(config.data_dir, "train")
    return train, fashion_mnist.load_split(config.data_dir, "test")


def _friedman(config: DataConfig) -> tuple[Source, Source]:
    return friedman.load()


def _synthetic_climate(config: DataConfig) -> tuple[Source, Source]:
    from hpcai_jax.data import synthetic_climate

    train, held_out = synthetic_climate.load(
        climate_height(config),
        config.train_examples or synthetic_climate.TRAIN_EXAMPLES,
        config.eval_examples or synthetic_climate.EVAL_EXAMPLES,
        seed=0,  # one fixed data set: --seed varies the members, not the data
    )
    return ClimateTrainSet(train, config.climate_flip, in_memory=True), held_out


def _extremeweather(config: DataConfig) -> tuple[Source, Source]:
    from hpcai_jax.data import extremeweather

    train, held_out = extremeweather.open_extremeweather(config.data_dir, climate_height(config))
    return ClimateTrainSet(train, config.climate_flip), held_out


def _tfds(config: DataConfig) -> tuple[Source, Source]:
    """A tfds set's two splits, the open-file limit raised for their shards."""
    from hpcai_jax.data.open_files import ensure_open_file_limit, files_needed
    from hpcai_jax.data.tfds_source import TfdsSource, eval_split_name

    train = TfdsSource(
        config.dataset,
        "train",
        config.data_dir,
        config.square_image_size,
        augment=config.augment,
        bad_example_policy=config.bad_example_policy,
    )
    held_out = TfdsSource(
        config.dataset,
        eval_split_name(config.dataset, config.data_dir),
        config.data_dir,
        config.square_image_size,
        bad_example_policy=config.bad_example_policy,
    )
    ensure_open_file_limit(
        files_needed(train.shards, held_out.shards, config.data_workers),
        f"--dataset={config.dataset} ({train.shards} training and {held_out.shards} "
        "held-out shards)",
    )
    return train, held_out


# The built-in sets' openers: (training split, held-out split); any other name is a tfds set's.
_OPENERS = {
    "fashion_mnist": _fashion_mnist,
    "friedman1": _friedman,
    "synthetic_climate": _synthetic_climate,
    "extremeweather": _extremeweather,
}


def _warn_past_the_end(config: DataConfig, name: str, split: str, size: int) -> None:
    """One line where --train_examples or --eval_examples asks for more than the split holds:
    the run takes the whole split, which the record's `data` section states (its `config`
    keeps the flag as given)."""
    asked = getattr(config, name)
    if asked > size:
        logging.warning(
            "--%s=%d: the %s split of --dataset=%s has %d examples; the run uses all %d "
            "(the record's data section says so, its config keeps the flag as given)",
            name,
            asked,
            split,
            config.dataset,
            size,
            size,
        )
