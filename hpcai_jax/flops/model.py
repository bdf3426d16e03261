"""The computations we count: one member's forward pass and training step, and the whole
ensemble's training step, each traced to a jaxpr and counted by `analytic.count_jaxpr`.

The training step traced here is the engine's own (`train_step.member_train_step` for one member
on one device, `assemble(...).train_step` for the sharded ensemble), so the analytic count and
XLA's cost analysis look at the same program. Counts are cached: tracing ResNet-50 takes ~1 s.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from hpcai_jax import ensemble
from hpcai_jax.assemble import assemble
from hpcai_jax.config import DataConfig, ModelConfig, OptimConfig, RunConfig
from hpcai_jax.data import fashion_mnist
from hpcai_jax.data.datasets import open_datasets, synthetic_spec
from hpcai_jax.data.source import ImageSpec
from hpcai_jax.flops.analytic import FlopCount, count_fn
from hpcai_jax.train_step import abstract_batch, member_train_step
from hpcai_jax.workload import make_workload

# Per-channel statistics used to normalise images when a count is asked for by shape only; they
# change no FLOP figure.
_NEUTRAL_STATS = (127.5, 64.0)


@dataclasses.dataclass(frozen=True)
class ModelFlops:
    """One member's counts at a given batch size."""

    model: str
    image_shape: tuple[int, int, int]
    num_classes: int
    batch: int
    dtype: str
    forward: FlopCount  # the forward pass in training mode (batch statistics), float input
    train_step: FlopCount  # preprocess + forward + backward + optimizer update, as compiled

    @property
    def train_step_3x_forward(self) -> FlopCount:
        """The paper's rule for a training step: 3 × forward (backward = 2 × forward)."""
        return self.forward.scaled(3)


def _workload(model: str, image_shape: tuple[int, int, int], num_classes: int, dtype: str):
    mean, std = _NEUTRAL_STATS
    channels = image_shape[-1]
    spec = ImageSpec(name="shape-only", image_shape=tuple(image_shape), num_classes=num_classes,
                     mean=(mean,) * channels, std=(std,) * channels)
    config = RunConfig(model=ModelConfig(model=model, dtype=dtype),
                       data=DataConfig(dataset="synthetic", num_classes=num_classes))
    return make_workload(config, spec)


@functools.lru_cache(maxsize=32)
def count_model(model: str, image_shape: tuple[int, int, int], num_classes: int, batch: int,
                dtype: str = "float32", optim: OptimConfig | None = None) -> ModelFlops:
    """Counts one member of `model` (config.MODELS) on `batch` images of shape H×W×C; `optim`
    (default: OptimConfig()) shapes the optimizer update counted in the training step."""
    image_shape = tuple(image_shape)
    workload = _workload(model, image_shape, num_classes, dtype)
    tx = ensemble.make_optimizer(optim or OptimConfig(), batch, steps_per_epoch=1, total_steps=1)
    state = jax.eval_shape(lambda: ensemble.init_member(workload, tx, jax.random.key(0)))
    images = jax.ShapeDtypeStruct((batch, *image_shape), jnp.uint8)
    labels = jax.ShapeDtypeStruct((batch,), jnp.int32)
    x = jax.ShapeDtypeStruct((batch, *image_shape), jnp.float32)
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    forward = count_fn(forward_fn(workload.local_model), variables, x, batch=batch)
    step = functools.partial(member_train_step, workload, tx, None)
    train = count_fn(step, state, images, labels, batch=batch)
    return ModelFlops(model=model, image_shape=image_shape, num_classes=num_classes, batch=batch,
                      dtype=dtype, forward=forward, train_step=train)


def forward_fn(model):
    """The forward pass of a training step: batch statistics, updated running averages."""

    def forward(variables, x):
        return model.apply(variables, x, train=True, mutable=["batch_stats"])

    return forward


def forward_args(model_flops: ModelFlops):
    """Abstract (variables, x) for `forward_fn`, e.g. to compile it for XLA's figure."""
    workload = _workload(model_flops.model, model_flops.image_shape, model_flops.num_classes,
                         model_flops.dtype)
    variables = jax.eval_shape(lambda: workload.local_model.init(
        jax.random.key(0), workload.dummy_input(), train=False))
    x = jax.ShapeDtypeStruct((model_flops.batch, *model_flops.image_shape), jnp.float32)
    return workload.local_model, variables, x


def count_config(config: RunConfig) -> ModelFlops:
    """One member's counts for a run's model, data shape and batch size."""
    spec = image_spec(config)
    return count_model(config.model.model, tuple(spec.image_shape), spec.num_classes,
                       config.train.batch_size, config.model.dtype, config.optim)


def image_spec(config: RunConfig) -> ImageSpec:
    """The run's image shape and classes; for a tfds data set this reads its metadata only."""
    if config.data.dataset == "synthetic":
        return synthetic_spec(config.data)
    if config.data.dataset == "fashion_mnist":
        return fashion_mnist.SPEC
    return open_datasets(config.data).spec


@functools.lru_cache(maxsize=8)
def count_ensemble_step(config: RunConfig, device_ids: tuple[int, ...] | None = None) -> FlopCount:
    """The whole ensemble's training step as the engine builds it (shard_map over the mesh),
    counted from its jaxpr: per-device bodies × the devices they run on. Its batch is M × |B|."""
    devices = None
    if device_ids is not None:
        by_id = {d.id: d for d in jax.devices()}
        devices = [by_id[i] for i in device_ids]
    setup = assemble(config, devices=devices, open_data=False)
    m, b = setup.layout.ensemble_size, config.train.batch_size
    images, labels = abstract_batch(setup.mesh, setup.layout, b, setup.workload.spec.image_shape)
    return count_fn(setup.train_step, setup.abstract_state, images, labels, batch=m * b)
