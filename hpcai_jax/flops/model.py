"""The computations we count: one member's forward pass and training step, and the whole
ensemble's training step, each traced to a jaxpr and counted by `analytic.count_fn`.

The training step traced here is the engine's own (`train_step.member_train_step` for one member
on one device, `assemble(...).train_step` for the sharded ensemble), for any workload, so the
analytic count and XLA's cost analysis look at the same program. Counts are cached: tracing
ResNet-50 takes ~1 s.
"""

from __future__ import annotations

import dataclasses
import functools

import jax

from hpcai_jax import ensemble
from hpcai_jax.assemble import assemble
from hpcai_jax.config import OptimConfig, RunConfig
from hpcai_jax.data.datasets import data_spec
from hpcai_jax.data.source import ImageSpec
from hpcai_jax.flops.analytic import FlopCount, count_fn
from hpcai_jax.train_step import abstract_batch, member_train_step
from hpcai_jax.workloads import Workload, make_workload
from hpcai_jax.workloads.classification import ClassificationWorkload

# Per-channel statistics used to normalise images when a count is asked for by shape only; they
# change no FLOP figure.
_NEUTRAL_STATS = (127.5, 64.0)


@dataclasses.dataclass(frozen=True)
class ModelFlops:
    """One member's counts at a given batch size."""

    workload: Workload
    batch: int
    forward: FlopCount  # the model's forward pass in training mode, on the model's input
    train_step: FlopCount  # inputs + forward + loss + backward + optimizer update, as compiled

    @property
    def model(self) -> str:
        return getattr(self.workload, "model_name", self.workload.name)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One example's model input (H, W, C for an image)."""
        return tuple(_abstract_inputs(self.workload, 1).shape[1:])

    @property
    def train_step_3x_forward(self) -> FlopCount:
        """The paper's rule for a training step: 3 × forward (backward = 2 × forward)."""
        return self.forward.scaled(3)


def _abstract_batch(workload: Workload, rows: int) -> dict:
    return {name: jax.ShapeDtypeStruct((rows, *shape), dtype)
            for name, (shape, dtype) in workload.spec.fields.items()}


def _abstract_inputs(workload: Workload, rows: int) -> jax.ShapeDtypeStruct:
    return jax.eval_shape(workload.inputs, _abstract_batch(workload, rows))


def forward_fn(workload: Workload):
    """The forward pass of a training step: batch statistics, updated model state."""
    model = workload.model(None)

    def forward(variables, x):
        mutable = [k for k in variables if k != "params"]
        return model.apply(variables, x, train=True, mutable=mutable or False)

    return forward


def forward_args(model_flops: ModelFlops):
    """Abstract (variables, x) for `forward_fn`, e.g. to compile it for XLA's figure."""
    workload = model_flops.workload
    variables = jax.eval_shape(lambda: workload.model(None).init(
        jax.random.key(0), workload.inputs(ensemble.dummy_batch(workload)), train=False))
    return variables, _abstract_inputs(workload, model_flops.batch)


@functools.lru_cache(maxsize=32)
def count_workload(workload: Workload, batch: int, optim: OptimConfig | None = None) -> ModelFlops:
    """Counts one member of `workload` on `batch` examples; `optim` (default: OptimConfig())
    shapes the optimizer update counted in the training step."""
    tx = ensemble.make_optimizer(optim or OptimConfig(), batch, steps_per_epoch=1, total_steps=1)
    state = jax.eval_shape(lambda: ensemble.init_member(workload, tx, jax.random.key(0)))
    variables, x = {"params": state.params, **state.model_state}, _abstract_inputs(workload, batch)
    forward = count_fn(forward_fn(workload), variables, x, batch=batch)
    step = functools.partial(member_train_step, workload, tx, None)
    train = count_fn(step, state, _abstract_batch(workload, batch), batch=batch)
    return ModelFlops(workload=workload, batch=batch, forward=forward, train_step=train)


def count_model(model: str, image_shape: tuple[int, int, int], num_classes: int, batch: int,
                dtype: str = "float32", optim: OptimConfig | None = None) -> ModelFlops:
    """Counts one image classifier (config.MODELS) on `batch` images of shape H×W×C."""
    mean, std = _NEUTRAL_STATS
    channels = image_shape[-1]
    spec = ImageSpec(name="shape-only", image_shape=tuple(image_shape), num_classes=num_classes,
                     mean=(mean,) * channels, std=(std,) * channels)
    return count_workload(ClassificationWorkload(spec, model, dtype), batch, optim)


def count_config(config: RunConfig) -> ModelFlops:
    """One member's counts for a run's workload, data shape and batch size."""
    workload = make_workload(config, data_spec(config.data))
    return count_workload(workload, config.train.batch_size, config.optim)


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
    batch = abstract_batch(setup.mesh, setup.layout, b, setup.workload.spec.fields)
    return count_fn(setup.train_step, setup.abstract_state, batch, batch=m * b)
