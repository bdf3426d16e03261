"""Friedman's first regression problem (J. Friedman, "Multivariate adaptive regression splines",
Annals of Statistics 19(1), 1991), generated: 10 features uniform in [0, 1], of which 5 matter,

    y = 10 sin(π x0 x1) + 20 (x2 − 0.5)² + 10 x3 + 5 x4 + N(0, 1),

the classic test of bagged regressors (Breiman's bagging paper uses it). The regression
workload's data: generated from a fixed seed, so nothing is downloaded and every process draws
the same set. Targets are standardised with the training set's mean and std.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcai_jax.data.source import ArraySource, Fields

NUM_FEATURES = 10
TRAIN_EXAMPLES, TEST_EXAMPLES = 8192, 2048
_SEED = 1991


@dataclasses.dataclass(frozen=True)
class TableSpec:
    name: str
    num_features: int

    @property
    def fields(self) -> Fields:
        return {"x": ((self.num_features,), "float32"), "y": ((), "float32")}


SPEC = TableSpec("friedman1", NUM_FEATURES)


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(size=(n, NUM_FEATURES))
    y = (
        10 * np.sin(np.pi * x[:, 0] * x[:, 1])
        + 20 * (x[:, 2] - 0.5) ** 2
        + 10 * x[:, 3]
        + 5 * x[:, 4]
        + rng.standard_normal(n)
    )
    return x.astype(np.float32), y


def load() -> tuple[ArraySource, ArraySource]:
    """(train, test) sources."""
    rng = np.random.default_rng(_SEED)
    x_train, y_train = _draw(rng, TRAIN_EXAMPLES)
    x_test, y_test = _draw(rng, TEST_EXAMPLES)
    mean, std = y_train.mean(), y_train.std()

    def source(x, y):
        return ArraySource(SPEC, {"x": x, "y": ((y - mean) / std).astype(np.float32)})

    return source(x_train, y_train), source(x_test, y_test)
