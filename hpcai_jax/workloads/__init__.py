"""The workloads the engine trains, each an implementation of `base.Workload`."""

from __future__ import annotations

from hpcai_jax.config import RunConfig
from hpcai_jax.data.source import DataSpec, ImageSpec
from hpcai_jax.workloads.base import Workload
from hpcai_jax.workloads.classification import ClassificationWorkload
from hpcai_jax.workloads.regression import RegressionWorkload


def make_workload(config: RunConfig, spec: DataSpec) -> Workload:
    """The configured workload on data of `spec` (config.validate has matched the two)."""
    if config.model.workload == "regression":
        return RegressionWorkload(spec, config.model.dtype)
    if config.model.workload == "extreme_weather":
        from hpcai_jax.workloads.extreme_weather import ExtremeWeatherWorkload

        return ExtremeWeatherWorkload(spec, config.model.model, config.model.dtype)
    return ClassificationWorkload(
        spec, config.model.model, config.model.dtype, label_smoothing=config.optim.label_smoothing
    )


# Per-channel statistics for a classifier counted by shape only; they change no FLOP figure.
_NEUTRAL_MEAN, _NEUTRAL_STD = 127.5, 64.0


def image_classifier(
    model: str, image_shape: tuple[int, int, int], num_classes: int, dtype: str = "float32"
) -> Workload:
    """A classifier of `model` on images of `image_shape`, with no data set behind it: what the
    FLOP counter counts for a model named on its own."""
    channels = image_shape[-1]
    spec = ImageSpec(
        name="shape-only",
        image_shape=tuple(image_shape),
        num_classes=num_classes,
        mean=(_NEUTRAL_MEAN,) * channels,
        std=(_NEUTRAL_STD,) * channels,
    )
    return ClassificationWorkload(spec, model, dtype)


__all__ = ["Workload", "image_classifier", "make_workload"]
