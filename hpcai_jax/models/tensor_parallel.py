"""Tensor parallelism inside one member (--model_parallel): output-feature splitting.

Each layer keeps 1 / P_model of its output features on each `model` device and all-gathers the
activation before the next layer, so the arithmetic is the unsplit model's and model-parallel
training equals data-parallel training of the same members. The split, its collectives and what
it costs: `docs/system_options.md`, Model parallelism.
"""

from __future__ import annotations

import flax.linen as nn
import jax
from jax import lax

from hpcai_jax.axes import MODEL


def gather_features(x: jax.Array) -> jax.Array:
    """This device's output features → all of them, the same on every `model` device."""
    return lax.all_gather(x, MODEL, axis=x.ndim - 1, tiled=True, to="invarying")


def split_features(module: type[nn.Module], parts: int, features: int, *args, **kwargs):
    """`module(features / parts, ...)`: this device's share of a layer's output features."""
    return module(features // parts, *args, **kwargs)


class BatchNorm(nn.BatchNorm):
    """BatchNorm of this device's channels, then every channel gathered over `model`."""

    def __call__(self, x, *args, **kwargs):
        return gather_features(super().__call__(x, *args, **kwargs))


class Dense(nn.Dense):
    """A dense layer holding this device's output features, then all of them gathered."""

    def __call__(self, inputs):
        return gather_features(super().__call__(inputs))
