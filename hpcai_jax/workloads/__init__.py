"""The workloads the engine trains, each an implementation of `base.Workload`."""

from __future__ import annotations

from hpcai_jax.config import RunConfig
from hpcai_jax.data.source import DataSpec
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


__all__ = ["Workload", "make_workload"]
