"""Builds everything a run needs from its configuration, in the order of docs/design.md's data path:
mesh, data, workload, sampler, optimizer, compiled-step builders."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import optax
from jax.sharding import Mesh

from hpcai_jax.axes import MODEL
from hpcai_jax.config import RunConfig, TrainConfig
from hpcai_jax.data import friedman
from hpcai_jax.data.datasets import Datasets, data_spec, open_datasets, resolved
from hpcai_jax.data.pipeline import Prefetcher, synthetic_batch, train_batches
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.device_memory import device_memory_bytes
from hpcai_jax.engine import state as ensemble
from hpcai_jax.engine.collectives import resolve_plan
from hpcai_jax.engine.evaluate import build_eval_step, subset_plan
from hpcai_jax.engine.member_map import resolve_mapping
from hpcai_jax.engine.member_memory import check_fits
from hpcai_jax.engine.mesh import MeshLayout, make_mesh, resolve_layout, resolved_batch
from hpcai_jax.engine.optimizer import make_optimizer
from hpcai_jax.engine.plan import MemberMapping, StepPlan
from hpcai_jax.engine.step import build_train_step
from hpcai_jax.engine.subsets import SubsetPlan
from hpcai_jax.errors import UsageError
from hpcai_jax.workloads import Workload, make_workload

# Synthetic data has no size of its own; an "epoch" of it is one ImageNet-1k training epoch.
SYNTHETIC_EPOCH_EXAMPLES = 1_281_167
# Built-in sets' training sizes, for a step compiled without loading them (FLOP accounting).
_TRAIN_SIZES = {"fashion_mnist": 60_000, "friedman1": friedman.TRAIN_EXAMPLES}


@dataclasses.dataclass(frozen=True)
class RunSetup:
    config: RunConfig
    datasets: Datasets | None  # None when only compiling
    workload: Workload
    sampler: BootstrapSampler
    total_steps: int
    tx: optax.GradientTransformation
    plan: StepPlan  # every choice the steps make, resolved (engine/plan.py)
    member_strategy_why: str  # why the plan's member mapping (the record's)
    train_step: object  # jitted (state, batch) -> (state, StepMetrics)
    # id(source) -> data.pipeline.ReadCache: what evaluations read, kept for the next ones.
    read_caches: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # The train settings as given, where --batch_policy=per_device resolved them (`config`'s
    # train.batch_size is then the member's batch): what the record states.
    given_train: TrainConfig | None = None

    @property
    def mesh(self) -> Mesh:
        return self.plan.mesh

    @property
    def layout(self) -> MeshLayout:
        return self.plan.layout

    @property
    def recorded_config(self) -> RunConfig:
        """The record's configuration: `config` with the train settings as given, so that the
        record re-runs as it ran (the member's batch: `config.train.batch_size`)."""
        if self.given_train is None:
            return self.config
        return dataclasses.replace(self.config, train=self.given_train)

    @property
    def abstract_state(self):
        """Shapes and shardings of the stacked state, without computing it."""
        shapes = ensemble.abstract_state(self.workload, self.tx, self.layout.ensemble_size)
        shardings = ensemble.shardings(self.mesh, self.plan.state_specs)
        if self.plan.state_specs is None:
            shardings = jax.tree.map(lambda _: shardings, shapes)
        return jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings
        )

    @functools.cached_property
    def _init(self):
        return ensemble.build_init(
            self.workload, self.tx, self.mesh, self.layout.ensemble_size, self.plan.state_specs
        )

    def init_state(self) -> ensemble.EnsembleState:
        return self._init(self.config.train.seed)

    def batches(self, first: int) -> Prefetcher:
        """The steps' input pipeline from step `first` to the last, --prefetch batches ahead
        on a background thread; `close` stops it and its workers, if any."""
        tc, data = self.config.train, self.config.data
        members = self.layout.ensemble_size
        if self.datasets.synthetic:
            batch = synthetic_batch(
                self.workload.synthetic, self.mesh, members, tc.batch_size, tc.seed
            )
            make = lambda step: batch  # noqa: E731 - generated once, reused every step
        else:
            make = train_batches(
                self.datasets.train,
                self.sampler,
                self.mesh,
                members,
                self.total_steps,
                data.data_workers,
                data.worker_restarts,
            )
        return Prefetcher(make, first, self.total_steps, data.prefetch)

    @property
    def member_loop_trips(self) -> int:
        """How often the compiled train step's loop over members runs in all (1: no loop)."""
        return self.plan.mapping.loop_trips(self.layout.members_per_device)

    @functools.cached_property
    def subset_plan(self) -> SubsetPlan | None:
        """The sub-ensembles every evaluation scores (engine/subsets.py); None: none. Drawn on
        first use, with the evaluation step: the training step needs neither."""
        return subset_plan(self.workload, self.layout.ensemble_size, self.config.train.seed)

    @functools.cached_property
    def eval_step(self):
        """The jitted (state, batch, valid, votes, split) -> EvalCounts (engine/evaluate.py),
        built on first use: a run's first evaluation, or its start-up memory figures."""
        subsets = self.subset_plan
        return build_eval_step(self.workload, self.plan, subsets.masks if subsets else None)

    @functools.cached_property
    def count_step(self):
        """The train step for XLA's cost analysis (StepPlan.counting: the members' loops
        written out), or None where the compiled step's own count holds. A separate jit,
        lowered only, never compiled (engine/compiled.compile_step)."""
        counting = self.plan.counting()
        return None if counting is None else build_train_step(self.workload, self.tx, counting)


def build_setup(config: RunConfig, devices: list | None = None, open_data: bool = True) -> RunSetup:
    """Raises UsageError for impossible meshes or missing data, before anything is compiled."""
    devices = jax.devices() if devices is None else list(devices)
    local = sum(d.process_index == jax.process_index() for d in devices)
    layout = resolve_layout(config.mesh, len(devices), local)
    # A node's share of `data`: its devices over P_model (`model` is the innermost axis).
    allreduce = resolve_plan(
        config.mesh, layout.parallel_degree, max(1, local // layout.model_parallel)
    )
    given = config.train
    config = resolved_batch(config, layout.parallel_degree)  # the member's batch from here on
    tc = config.train
    if tc.batch_size % layout.parallel_degree:
        raise UsageError(
            f"--batch_size={tc.batch_size} must be divisible by P_degree="
            f"{layout.parallel_degree} (each member's batch is split over its devices)"
        )
    mesh = make_mesh(layout, devices)
    datasets = open_datasets(config.data) if open_data else None
    spec = datasets.spec if datasets else data_spec(config.data)
    # The run's configuration from here on states the data set's own values (its classes).
    config = dataclasses.replace(config, data=resolved(config.data, spec))
    num_examples = _training_examples(config, datasets)
    sampler = BootstrapSampler(tc.bootstrap, num_examples, tc.batch_size, tc.seed)
    total_steps = tc.steps or max(1, math.ceil(tc.epochs * sampler.steps_per_epoch))
    workload = make_workload(config, spec)
    pm = layout.model_parallel
    tx = make_optimizer(
        config.optim,
        tc.batch_size,
        sampler.steps_per_epoch,
        total_steps,
        model_axis=MODEL if pm > 1 else None,
    )
    specs = ensemble.state_specs(workload, tx, layout.ensemble_size, pm)
    mapping, why = _member_mapping(config, layout)
    if mapping.row.memory_checked:
        _check_fits(config, layout, workload, mapping, devices[0])
    step_plan = StepPlan(mesh, layout, mapping, allreduce, specs)
    return RunSetup(
        config=config,
        datasets=datasets,
        workload=workload,
        sampler=sampler,
        total_steps=total_steps,
        tx=tx,
        plan=step_plan,
        member_strategy_why=why,
        train_step=build_train_step(workload, tx, step_plan),
        given_train=None if given == tc else given,
    )


def _training_examples(config: RunConfig, datasets: Datasets | None) -> int:
    """The training set's size, refused below one batch: the opened set's, else (only
    compiling, or synthetic data) the built-in set's or --train_examples, at most the set."""
    tc = config.train
    if datasets is None or datasets.synthetic:  # only compiling, or synthetic data
        size = _TRAIN_SIZES.get(config.data.dataset)
        num_examples = config.data.train_examples or size or SYNTHETIC_EPOCH_EXAMPLES
        num_examples = min(num_examples, size) if size else num_examples
    else:
        num_examples = len(datasets.train)
    if num_examples < tc.batch_size:
        raise UsageError(
            f"--batch_size={tc.batch_size} exceeds the {num_examples} training examples"
        )
    return num_examples


def _check_fits(config: RunConfig, layout: MeshLayout, workload, mapping, device) -> None:
    """engine/member_memory.check_fits for a memory-checked form, its line naming what chose
    the form: the --member_map flag, or under auto the decision of --acceptance's file."""
    mc = config.mesh
    chosen_by = (
        f"--member_map=auto ({mapping.form}, the decision of --acceptance={mc.acceptance})"
        if mc.member_map == "auto" and mc.acceptance
        else ""
    )
    together = mapping.group or layout.members_per_device
    share = config.train.batch_size // layout.parallel_degree
    check_fits(workload, mapping.form, together, share, device_memory_bytes(device), chosen_by)


def _member_mapping(config: RunConfig, layout: MeshLayout):
    """(how a device runs its members, why) on this backend (engine/member_map.py)."""
    mc = config.mesh
    form, group, why = resolve_mapping(
        mc.member_strategy,
        mc.member_map,
        mc.member_group,
        backend=jax.default_backend(),
        dtype=config.model.dtype,
        members_per_device=layout.members_per_device,
        model_parallel=layout.model_parallel,
        check_record=config.check.record,
        acceptance=mc.acceptance,
    )
    return MemberMapping(form, group), why
