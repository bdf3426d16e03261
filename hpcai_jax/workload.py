"""The image-classification workload: one member's model, loss and quality metric.

Everything here describes a single member; the ensemble transform (ensemble.py, train_step.py)
stacks and vmaps it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import optax

from hpcai_jax.config import RunConfig
from hpcai_jax.data.source import ImageSpec
from hpcai_jax.mesh import DATA
from hpcai_jax.models.resnet import make_resnet

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class ClassificationWorkload:
    """Softmax cross-entropy training, top-1 accuracy as quality."""

    spec: ImageSpec
    model: nn.Module  # BatchNorm statistics averaged over the mesh's data axis
    local_model: nn.Module  # the same parameters, for a batch that lives on one device

    def preprocess(self, images: jnp.ndarray) -> jnp.ndarray:
        """uint8 [.., H, W, C] → normalised float32, on the device."""
        mean = jnp.asarray(self.spec.mean, jnp.float32)
        std = jnp.asarray(self.spec.std, jnp.float32)
        return (images.astype(jnp.float32) - mean) / std

    @staticmethod
    def loss(logits: jnp.ndarray, labels: jnp.ndarray) -> jnp.ndarray:
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def dummy_input(self) -> jnp.ndarray:
        return jnp.zeros((1, *self.spec.image_shape), jnp.float32)


def make_workload(config: RunConfig, spec: ImageSpec) -> ClassificationWorkload:
    dtype: Any = _DTYPES[config.model.dtype]
    return ClassificationWorkload(
        spec=spec,
        model=make_resnet(config.model.model, spec.num_classes, dtype, bn_axis_name=DATA),
        local_model=make_resnet(config.model.model, spec.num_classes, dtype, bn_axis_name=None),
    )
