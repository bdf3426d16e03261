"""Tensor parallelism inside one member (--model_parallel): output-feature splitting.

Every convolution and dense layer of a member holds 1 / P_model of its output features on
each device of the `model` axis; the layer's normalisation (BatchNorm's statistics are per
channel) runs on those channels alone, and the full activation is then all-gathered over
`model` before the next layer, which reads every input channel. Forward, a layer moves its
output once (all-gather); backward, the gradient of its input is summed over `model`
(all-reduce, the gather's transpose). Parameters, gradients and optimizer state are split
P_model ways; the arithmetic is the unsplit model's, which is why model-parallel training
equals data-parallel training of the same members (tests/test_model_parallel.py).

The gather yields an activation that is the same on every `model` device
(`all_gather(..., to="invarying")`), so the layers after it, the loss and its gradient are
computed once per device and the input gradient's reduction is inserted by shard_map's
replication check, not by hand. The classes keep flax's names (BatchNorm, Dense) so that the
parameter tree, its checkpoints and its FLOP count are the unsplit model's.
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
