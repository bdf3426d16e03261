"""Image classification (HPC AI500's first workload): softmax cross-entropy, optionally with
label smoothing, and top-1 accuracy.

The ensemble predicts the argmax of its members' mean softmax probabilities.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax import lax

from hpcai_jax.data.source import ImageSpec
from hpcai_jax.models import int8
from hpcai_jax.models.resnet import make_resnet
from hpcai_jax.workloads.base import Workload


@dataclasses.dataclass(frozen=True)
class ClassificationWorkload(Workload):
    spec: ImageSpec
    model_name: str
    dtype: str = "float32"
    label_smoothing: float = 0.0  # --label_smoothing: the training loss's targets only
    name: str = "image_classification"
    metric: str = "top1_accuracy"

    def model(self, axis_name: str | None, conv: Callable = lax.conv_general_dilated) -> nn.Module:
        model = make_resnet(
            self.model_name,
            self.spec.num_classes,
            int8.compute_dtype(self.dtype),
            axis_name,
            conv_general_dilated=conv,
        )
        return int8.apply_policy(model, self.dtype)

    def split_model(self, axis_name: str | None, parts: int) -> nn.Module:
        """This device's share of a member whose layers are split `parts` ways over `model`."""
        return make_resnet(
            self.model_name,
            self.spec.num_classes,
            int8.compute_dtype(self.dtype),
            axis_name,
            model_parallel=parts,
        )

    def inputs(self, batch) -> jax.Array:
        mean = jnp.asarray(self.spec.mean, jnp.float32)
        std = jnp.asarray(self.spec.std, jnp.float32)
        return (batch["image"].astype(jnp.float32) - mean) / std

    def loss(self, outputs, batch):
        labels = batch["label"]
        if self.label_smoothing:
            targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
            targets = optax.smooth_labels(targets, self.label_smoothing)
            loss = optax.softmax_cross_entropy(outputs, targets).mean()
        else:  # integer labels: no [B, classes] targets to build
            loss = optax.softmax_cross_entropy_with_integer_labels(outputs, labels).mean()
        # Accuracy on the hard labels, smoothed or not.
        accuracy = jnp.mean((jnp.argmax(outputs, -1) == labels).astype(jnp.float32))
        return loss, {"accuracy": accuracy}

    def predict(self, outputs) -> jax.Array:
        return jax.nn.softmax(outputs.astype(jnp.float32), axis=-1)

    def counts(self, prediction, batch, weight) -> jax.Array:
        """[correct, scored]."""
        correct = (jnp.argmax(prediction, -1) == batch["label"]).astype(jnp.float32)
        return jnp.stack([jnp.sum(correct * weight), jnp.sum(weight)])

    def example_hits(self, prediction, batch) -> jax.Array:
        return jnp.argmax(prediction, -1) == batch["label"]

    def example_keys(self, batch) -> jax.Array:
        return batch["label"].astype(jnp.int32)

    def quality(self, counts) -> float | None:
        """correct ÷ scored, divided in float64: the counts are whole numbers (0/1 weights summed
        in float32, exact below 2^24 examples), so an accuracy is exactly k / N, as a record and
        an MLLOG print it, not float32's rounding of it (0.40700000524520874)."""
        correct, scored = (round(float(c)) for c in counts)
        return correct / scored if scored else None

    def synthetic(self, key, lead):
        k1, k2 = jax.random.split(key)
        image = jax.random.randint(k1, (*lead, *self.spec.image_shape), 0, 256, jnp.int32)
        label = jax.random.randint(k2, lead, 0, self.spec.num_classes, jnp.int32)
        return {"image": image.astype(jnp.uint8), "label": label}
