"""Builds everything a run needs from its configuration, in the order of docs/design.md's data path:
mesh, data, workload, sampler, optimizer, compiled-step builders."""

from __future__ import annotations

import dataclasses
import math

import jax
import optax
from jax.sharding import Mesh

from hpcai_jax import ensemble
from hpcai_jax.config import RunConfig
from hpcai_jax.data import fashion_mnist
from hpcai_jax.data.datasets import Datasets, open_datasets, synthetic_spec
from hpcai_jax.data.source import ImageSpec
from hpcai_jax.errors import UsageError
from hpcai_jax.mesh import MEMBER_SPEC, MeshLayout, make_mesh, resolve_layout, sharding
from hpcai_jax.sampler import BootstrapSampler
from hpcai_jax.train_step import build_eval_step, build_train_step, resolve_member_strategy
from hpcai_jax.workload import ClassificationWorkload, make_workload

# Synthetic data has no size of its own; an "epoch" of it is one ImageNet-1k training epoch.
SYNTHETIC_EPOCH_EXAMPLES = 1_281_167


@dataclasses.dataclass(frozen=True)
class RunSetup:
    config: RunConfig
    layout: MeshLayout
    mesh: Mesh
    datasets: Datasets | None  # None when only compiling
    workload: ClassificationWorkload
    sampler: BootstrapSampler
    total_steps: int
    tx: optax.GradientTransformation
    member_strategy: str
    member_strategy_why: str
    train_step: object  # jitted (state, images, labels) -> (state, StepMetrics)
    eval_step: object  # jitted (state, images, labels, weights) -> (member_correct, ensemble_correct)

    @property
    def abstract_state(self):
        """Shapes and shardings of the stacked state, without computing it."""
        m, tx, wl = self.layout.ensemble_size, self.tx, self.workload
        shapes = jax.eval_shape(lambda: jax.vmap(lambda k: ensemble.init_member(wl, tx, k))(
            ensemble.member_keys(0, m)))
        sh = sharding(self.mesh, MEMBER_SPEC)
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes)

    def init_state(self) -> ensemble.EnsembleState:
        return ensemble.init_state(self.workload, self.tx, self.mesh, self.layout.ensemble_size,
                                   self.config.train.seed)


def _spec_without_loading(config: RunConfig) -> ImageSpec:
    if config.data.dataset == "synthetic":
        return synthetic_spec(config.data)
    if config.data.dataset == "fashion_mnist":
        return fashion_mnist.SPEC
    return open_datasets(config.data).spec  # tfds: opening reads only the metadata


def assemble(config: RunConfig, devices: list | None = None, open_data: bool = True) -> RunSetup:
    """Raises UsageError for impossible meshes or missing data, before anything is compiled."""
    devices = jax.devices() if devices is None else list(devices)
    local = sum(d.process_index == jax.process_index() for d in devices)
    layout = resolve_layout(config.mesh, len(devices), local)
    tc = config.train
    if tc.batch_size % layout.parallel_degree:
        raise UsageError(f"--batch_size={tc.batch_size} must be divisible by P_degree="
                         f"{layout.parallel_degree} (each member's batch is split over its devices)")
    mesh = make_mesh(layout, devices)
    datasets = open_datasets(config.data) if open_data else None
    spec = datasets.spec if datasets else _spec_without_loading(config)
    if datasets is None or datasets.synthetic:
        num_examples = config.data.train_examples or SYNTHETIC_EPOCH_EXAMPLES
        if config.data.dataset == "fashion_mnist" and not config.data.train_examples:
            num_examples = 60_000
    else:
        num_examples = len(datasets.train)
    if num_examples < tc.batch_size:
        raise UsageError(f"--batch_size={tc.batch_size} exceeds the {num_examples} training examples")
    sampler = BootstrapSampler(tc.bootstrap, num_examples, tc.batch_size, tc.seed)
    total_steps = tc.steps or max(1, math.ceil(tc.epochs * sampler.steps_per_epoch))
    workload = make_workload(config, spec)
    tx = ensemble.make_optimizer(config.optim, tc.batch_size, sampler.steps_per_epoch, total_steps)
    strategy, why = resolve_member_strategy(config.mesh.member_strategy, jax.default_backend(),
                                            layout.members_per_device)
    return RunSetup(
        config=config, layout=layout, mesh=mesh, datasets=datasets, workload=workload,
        sampler=sampler, total_steps=total_steps, tx=tx, member_strategy=strategy,
        member_strategy_why=why,
        train_step=build_train_step(workload, tx, mesh, strategy),
        eval_step=build_eval_step(workload, mesh, strategy),
    )
