"""ResNet v1.5 (stride on the 3×3 convolution of the bottleneck), after flax examples/imagenet.

`bn_axis_name` names the mesh axis over which BatchNorm statistics are averaged inside one
member (docs/design.md, fact 2); None for a model that sees its whole batch on one device.
`model_parallel` > 1 builds this device's share of a tensor-parallel member
(below); the parameter tree's names are the same, its last axes split.

Tensor parallelism inside one member (--model_parallel): Each layer keeps 1 / P_model of its output features on each `model` device and all-gathers the
activation before the next layer, so the arithmetic is the unsplit model's and model-parallel
training equals data-parallel training of the same members. The split, its collectives and what
it costs: `docs/system_options.md`, Model parallelism.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax.axes import MODEL

ModuleDef = Any


# Tensor parallelism (the module docstring): a layer's output features split over `model`.


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


class ResNetBlock(nn.Module):
    """Basic block (ResNet-18/34): two 3×3 convolutions."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (3, 3), self.strides)(x)
        y = self.act(self.norm()(y))
        y = self.conv(self.filters, (3, 3))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)
        return self.act(residual + y)


class BottleneckResNetBlock(nn.Module):
    """Bottleneck block (ResNet-50/101/152), v1.5: the stride sits on the 3×3 convolution."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.act(self.norm()(self.conv(self.filters, (1, 1))(x)))
        y = self.act(self.norm()(self.conv(self.filters, (3, 3), self.strides)(y)))
        y = self.conv(self.filters * 4, (1, 1))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(self.filters * 4, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)
        return self.act(residual + y)


class ResNet(nn.Module):
    """ResNet with an ImageNet stem (7×7/2 conv + 3×3/2 max-pool) or a small-image stem (3×3/1)."""

    stage_sizes: Sequence[int]
    block_cls: ModuleDef
    num_classes: int
    num_filters: int = 64
    small_stem: bool = False
    stem_strides: int = 1  # the small stem's stride: 2 halves the image before the stages
    dtype: Any = jnp.float32
    bn_axis_name: str | None = None
    model_parallel: int = 1
    # The convolution, flax's own nn.Conv argument: the engine passes its members' form
    # (ops/member_conv.MemberConv), as flax's examples pass a `conv` module.
    conv_general_dilated: Callable = lax.conv_general_dilated

    @nn.compact
    def __call__(self, x, train: bool = True):
        split = self.model_parallel > 1
        # Under tensor parallelism every convolution is followed by its BatchNorm, which
        # gathers the channels back (its tensor parallelism, above).
        conv = functools.partial(
            split_features,
            nn.Conv,
            self.model_parallel,
            use_bias=False,
            dtype=self.dtype,
            conv_general_dilated=self.conv_general_dilated,
        )
        dense = functools.partial(
            split_features,
            Dense if split else nn.Dense,
            self.model_parallel,
            dtype=self.dtype,
        )
        norm = functools.partial(
            BatchNorm if split else nn.BatchNorm,
            use_running_average=not train,
            momentum=0.9,
            epsilon=1e-5,
            dtype=self.dtype,
            axis_name=self.bn_axis_name,
        )
        x = x.astype(self.dtype)
        if self.small_stem:
            x = conv(self.num_filters, (3, 3), (self.stem_strides,) * 2, name="conv_init")(x)
            x = nn.relu(norm(name="bn_init")(x))
        else:
            x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(
                x
            )
            x = nn.relu(norm(name="bn_init")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, block_size in enumerate(self.stage_sizes):
            for j in range(block_size):
                strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                x = self.block_cls(
                    self.num_filters * 2**i, strides=strides, conv=conv, norm=norm, act=nn.relu
                )(x)
        x = jnp.mean(x, axis=(1, 2))
        x = dense(self.num_classes)(x)
        return x.astype(jnp.float32)


# For 28×28 inputs (Fashion-MNIST): three stages of one basic block, 16/32/64 channels.
_SMALL = dict(stage_sizes=(1, 1, 1), block_cls=ResNetBlock, num_filters=16, small_stem=True)
_ARCHS = {
    "resnet18": dict(stage_sizes=(2, 2, 2, 2), block_cls=ResNetBlock),
    "resnet34": dict(stage_sizes=(3, 4, 6, 3), block_cls=ResNetBlock),
    "resnet50": dict(stage_sizes=(3, 4, 6, 3), block_cls=BottleneckResNetBlock),
    "resnet101": dict(stage_sizes=(3, 4, 23, 3), block_cls=BottleneckResNetBlock),
    "resnet152": dict(stage_sizes=(3, 8, 36, 3), block_cls=BottleneckResNetBlock),
    "resnet_small": _SMALL,
    # resnet_small after a 3×3/2 stem: its stages at 14/7/4 pixels, about a quarter of its
    # FLOPs per image (the paper's experiments at one-machine scale: docs/paper.md).
    "resnet_mini": {**_SMALL, "stem_strides": 2},
    # resnet_small's first two stages: an identity block and a strided projection block, each
    # with its BatchNorms, and fewer ops to compile, for tests where the model is not the point.
    "resnet_tiny": {**_SMALL, "stage_sizes": (1, 1)},
}


def make_resnet(
    name: str,
    num_classes: int,
    dtype: Any = jnp.float32,
    bn_axis_name: str | None = None,
    model_parallel: int = 1,
    conv_general_dilated: Callable = lax.conv_general_dilated,
) -> ResNet:
    """Builds a member model by name (config.MODELS)."""
    return ResNet(
        num_classes=num_classes,
        dtype=dtype,
        bn_axis_name=bn_axis_name,
        model_parallel=model_parallel,
        conv_general_dilated=conv_general_dilated,
        **_ARCHS[name],
    )
