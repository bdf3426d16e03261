"""A second, small workload that proves the protocol: least-squares regression with an MLP,
R² as quality. It has no BatchNorm (no model state) and float inputs, unlike classification.

The ensemble predicts the mean of its members' predictions (bagging's original use, Breiman
1996). R² = 1 − SSE / SST is computed from additive counts [SSE, Σy, Σy², n].
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax.data.friedman import TableSpec
from hpcai_jax.models import int8
from hpcai_jax.workloads.base import Workload


class MLP(nn.Module):
    hidden: tuple[int, ...] = (64, 64)
    dtype: Any = jnp.float32  # compute dtype; parameters stay float32

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train  # no layer behaves differently in training
        x = x.astype(self.dtype)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, dtype=self.dtype)(x))
        return nn.Dense(1, dtype=self.dtype)(x)[..., 0].astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class RegressionWorkload(Workload):
    spec: TableSpec
    dtype: str = "float32"  # --dtype, as for the other workloads
    name: str = "regression"
    metric: str = "r2"

    def model(self, axis_name: str | None, conv: Callable = lax.conv_general_dilated) -> nn.Module:
        del axis_name, conv  # nothing is reduced across a batch; no convolution
        return int8.apply_policy(MLP(dtype=int8.compute_dtype(self.dtype)), self.dtype)

    def inputs(self, batch) -> jax.Array:
        return batch["x"]

    def loss(self, outputs, batch):
        mse = jnp.mean((outputs - batch["y"]) ** 2)
        return mse, {"mse": mse}

    def predict(self, outputs) -> jax.Array:
        return outputs.astype(jnp.float32)

    def counts(self, prediction, batch, weight) -> jax.Array:
        """[SSE, Σy, Σy², n] over the weighted rows."""
        y = batch["y"]
        return jnp.stack(
            [
                jnp.sum(weight * (prediction - y) ** 2),
                jnp.sum(weight * y),
                jnp.sum(weight * y * y),
                jnp.sum(weight),
            ]
        )

    def quality(self, counts) -> float | None:
        sse, sum_y, sum_y2, n = (float(c) for c in counts)
        if n < 2:
            return None
        sst = sum_y2 - sum_y * sum_y / n
        return 1.0 - sse / sst if sst > 0 else None

    def synthetic(self, key, lead):
        k1, k2 = jax.random.split(key)
        return {
            "x": jax.random.uniform(k1, (*lead, self.spec.num_features)),
            "y": jax.random.normal(k2, lead),
        }
