"""A second, small workload that proves the protocol: least-squares regression with an MLP,
R² as quality. It has no BatchNorm (no model state) and float inputs, unlike classification.

The ensemble predicts the mean of its members' predictions (bagging's original use, Breiman
1996). R² = 1 − SSE / SST is computed from additive counts [SSE, Σy, Σy², n].
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from hpcai_jax.data.friedman import TableSpec


class MLP(nn.Module):
    hidden: tuple[int, ...] = (64, 64)

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train  # no layer behaves differently in training
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(1)(x)[..., 0]


@dataclasses.dataclass(frozen=True)
class RegressionWorkload:
    spec: TableSpec
    name: str = "regression"
    metric: str = "r2"

    def model(self, axis_name: str | None) -> nn.Module:
        del axis_name  # nothing is reduced across a batch
        return MLP()

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
