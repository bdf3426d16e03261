"""Typed, frozen run configuration: built once from flags (or in code by tests) and validated.

No module but `flags.py` reads absl FLAGS; everything else takes these objects.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.distributed import DistributedConfig
from hpcai_jax.errors import UsageError
from hpcai_jax.targets import QualityTarget, resolve_target

MODES = ("train", "flops", "stream")
# The models each workload trains; `regression` is the small second workload that proves the
# workload protocol (hpcai_jax/workloads/).
WORKLOAD_MODELS = {
    "image_classification": ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                             "resnet_small"),
    "regression": ("mlp",),
}
WORKLOADS = tuple(WORKLOAD_MODELS)
MODELS = tuple(m for models in WORKLOAD_MODELS.values() for m in models)
# Built-in data sets and the workload each serves; any other name is a tfds image set.
BUILTIN_DATASETS = {"fashion_mnist": "image_classification", "synthetic": "image_classification",
                    "friedman1": "regression"}
BOOTSTRAP_METHODS = ("with_replacement", "poisson", "none")
OPTIMIZERS = ("sgd",)
LR_SCHEDULES = ("constant", "warmup_cosine")
MEMBER_STRATEGIES = ("auto", "vmap", "unroll")
DTYPES = ("float32", "bfloat16")
ON_DIVERGENCE = ("stop", "prune")
PRECISIONS = ("float64", "float32", "bfloat16")  # STREAM
KERNEL_SETS = ("all", "triad", "nstream")
PLACEMENTS = ("one", "all")
FLOPS_SOURCES = ("auto", "xla", "analytic")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def _one_of(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    _require(value in allowed, f"--{flag}={value!r}: expected one of {', '.join(allowed)}")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Eq. 5 generalised: (ensemble_size / members_per_device) × parallel_degree = devices.

    0 means "derive": parallel_degree from the local device count (the paper's acc_num),
    members_per_device from the other three numbers.
    """

    ensemble_size: int = 4
    members_per_device: int = 0
    parallel_degree: int = 0
    member_strategy: str = "auto"

    def validate(self) -> None:
        _require(self.ensemble_size >= 1, f"--ensemble_size={self.ensemble_size}: expected >= 1")
        _require(self.members_per_device >= 0,
                 f"--members_per_device={self.members_per_device}: expected >= 1 (or 0 to derive)")
        _require(self.parallel_degree >= 0,
                 f"--parallel_degree={self.parallel_degree}: expected >= 1 (or 0 for the local device count)")
        _one_of("member_strategy", self.member_strategy, MEMBER_STRATEGIES)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where examples come from. Any dataset name that is not built in is a tfds name."""

    dataset: str = "fashion_mnist"
    data_dir: str = ""
    train_examples: int = 0  # 0: the whole training split
    eval_examples: int = 0  # 0: the whole held-out split
    oob_examples: int = 10_000  # training examples scored out of bag (0: no estimate)
    image_size: int = 224  # tfds and synthetic images are this size square
    num_classes: int = 1000  # synthetic only; real sets carry their own
    prefetch: int = 2

    def validate(self) -> None:
        _require(bool(self.dataset), "--dataset: expected fashion_mnist, synthetic or a tfds name")
        _require(self.train_examples >= 0, f"--train_examples={self.train_examples}: expected >= 0")
        _require(self.eval_examples >= 0, f"--eval_examples={self.eval_examples}: expected >= 0")
        _require(self.oob_examples >= 0, f"--oob_examples={self.oob_examples}: expected >= 0")
        _require(self.image_size >= 8, f"--image_size={self.image_size}: expected >= 8")
        _require(self.num_classes >= 2, f"--num_classes={self.num_classes}: expected >= 2")
        _require(self.prefetch >= 1, f"--prefetch={self.prefetch}: expected >= 1")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    workload: str = "image_classification"
    model: str = "resnet_small"
    dtype: str = "float32"

    def validate(self) -> None:
        _one_of("workload", self.workload, WORKLOADS)
        _one_of("model", self.model, MODELS)
        _require(self.model in WORKLOAD_MODELS[self.workload],
                 f"--model={self.model}: not a model of --workload={self.workload} (expected one "
                 f"of {', '.join(WORKLOAD_MODELS[self.workload])})")
        _one_of("dtype", self.dtype, DTYPES)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """SGD with momentum and the linear scaling rule (paper's Table 2 default).

    The peak learning rate is learning_rate × batch_size / lr_reference_batch.
    """

    optimizer: str = "sgd"
    learning_rate: float = 0.1
    lr_reference_batch: int = 256
    momentum: float = 0.9
    weight_decay: float = 5e-5
    lr_schedule: str = "warmup_cosine"
    warmup_epochs: float = 0.0

    def validate(self) -> None:
        _one_of("optimizer", self.optimizer, OPTIMIZERS)
        _one_of("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _require(self.learning_rate > 0, f"--learning_rate={self.learning_rate}: expected > 0")
        _require(self.lr_reference_batch >= 1,
                 f"--lr_reference_batch={self.lr_reference_batch}: expected >= 1")
        _require(0 <= self.momentum < 1, f"--momentum={self.momentum}: expected in [0, 1)")
        _require(self.weight_decay >= 0, f"--weight_decay={self.weight_decay}: expected >= 0")
        _require(self.warmup_epochs >= 0, f"--warmup_epochs={self.warmup_epochs}: expected >= 0")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 128  # per member: the paper's |B|
    epochs: float = 1.0
    steps: int = 0  # overrides epochs when > 0
    seed: int = 0
    bootstrap: str = "with_replacement"
    eval_batch_size: int = 1000
    log_every: int = 50
    timing_warmup_steps: int = 1  # trained, but excluded from step-time statistics and FLOPS

    def validate(self) -> None:
        _require(self.batch_size >= 1, f"--batch_size={self.batch_size}: expected >= 1")
        _require(self.epochs > 0 or self.steps > 0,
                 f"--epochs={self.epochs}, --steps={self.steps}: expected epochs > 0 or steps > 0")
        _require(self.steps >= 0, f"--steps={self.steps}: expected >= 0")
        _one_of("bootstrap", self.bootstrap, BOOTSTRAP_METHODS)
        _require(self.eval_batch_size >= 1, f"--eval_batch_size={self.eval_batch_size}: expected >= 1")
        _require(self.log_every >= 1, f"--log_every={self.log_every}: expected >= 1")
        _require(self.timing_warmup_steps >= 0,
                 f"--timing_warmup_steps={self.timing_warmup_steps}: expected >= 0")


@dataclasses.dataclass(frozen=True)
class ResultsConfig:
    results_dir: str = "results"
    run_name: str = ""  # the run id when set; else <mode>-<UTC time>-<pid>
    overwrite: bool = False
    target_quality: float = 0.0  # 0: the official target of (workload, model, data set)
    quality_exponent: float = -1.0  # -1: the workload's n; 0 means 0
    flops_source: str = "auto"  # which count FLOPS uses (engine/flop_count.py: choose_flops)

    def validate(self) -> None:
        _require(bool(self.results_dir), "--results_dir: expected a directory path")
        _require("/" not in self.run_name and self.run_name not in (".", ".."),
                 f"--run_name={self.run_name}: expected a file-name-safe id (no '/')")
        _require(0 <= self.target_quality <= 1,
                 f"--target_quality={self.target_quality}: expected in (0, 1] (0: the official target)")
        _require(self.quality_exponent >= 0 or self.quality_exponent == -1,
                 f"--quality_exponent={self.quality_exponent}: expected >= 0 (-1: the workload's n)")
        _one_of("flops_source", self.flops_source, FLOPS_SOURCES)


@dataclasses.dataclass(frozen=True)
class ReliabilityConfig:
    """Checkpoints (orbax), resume, and what to do when a member diverges."""

    checkpoint_dir: str = ""  # "" : no checkpoints; an existing one is resumed
    checkpoint_every: int = 0  # steps between checkpoints (0: only at the end and on preemption)
    keep_checkpoints: int = 2
    on_divergence: str = "stop"  # stop | prune
    divergence_check_every: int = 0  # steps between host checks of the on-device flags (0: log_every)
    inject_nan: str = ""  # test hook "MEMBER@STEP": poison that member's parameters before that step

    @property
    def nan_injection(self) -> tuple[int, int] | None:
        if not self.inject_nan:
            return None
        member, step = self.inject_nan.split("@")
        return int(member), int(step)

    def validate(self) -> None:
        if self.inject_nan:
            parts = self.inject_nan.split("@")
            _require(len(parts) == 2 and all(p.isdigit() for p in parts),
                     f"--inject_nan={self.inject_nan}: expected MEMBER@STEP, e.g. 1@3")
        _require(self.checkpoint_every >= 0, f"--checkpoint_every={self.checkpoint_every}: expected >= 0")
        _require(self.keep_checkpoints >= 1, f"--keep_checkpoints={self.keep_checkpoints}: expected >= 1")
        _one_of("on_divergence", self.on_divergence, ON_DIVERGENCE)
        _require(self.divergence_check_every >= 0,
                 f"--divergence_check_every={self.divergence_check_every}: expected >= 0")


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """BabelStream-style bandwidth run (docs/design.md §2). Exactly one size setting is non-zero."""

    array_size: int = 0  # elements per array
    array_mib: float = 0.0  # MiB per array
    array_fraction: float = 0.0  # of one device's memory, for the three arrays together
    num_times: int = 100
    precision: str = "float64"
    kernels: str = "all"  # all | triad | nstream
    devices: str = "one"  # one | all
    csv: bool = False
    mibibytes: bool = False
    strict_size: bool = False

    def validate(self) -> None:
        """Checks every STREAM flag on its own; raises UsageError with a one-line message naming it."""
        _require(self.precision in PRECISIONS,
                 f"--precision={self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        _require(self.kernels in KERNEL_SETS,
                 f"--stream_kernels={self.kernels!r}: expected one of {', '.join(KERNEL_SETS)}")
        _require(self.devices in PLACEMENTS,
                 f"--stream_devices={self.devices!r}: expected one of {', '.join(PLACEMENTS)}")
        # BabelStream drops the first iteration from the statistics, so it needs two.
        _require(self.num_times >= 2, f"--num_times={self.num_times}: expected >= 2 (the first "
                 "iteration is excluded from the statistics)")
        _require(self.array_size >= 0, f"--array_size={self.array_size}: expected >= 1 elements "
                 f"per array (or 0 for the default 2^25)")
        _require(self.array_mib >= 0, f"--array_mib={self.array_mib}: expected > 0 MiB per array "
                 "(or 0 to leave unset)")
        _require(0 <= self.array_fraction < 1, f"--array_fraction={self.array_fraction}: expected "
                 "a fraction of device memory in (0, 1) for the three arrays (or 0 to leave unset)")
        given = [f"--{name}={value}" for name, value in (
            ("array_size", self.array_size), ("array_mib", self.array_mib),
            ("array_fraction", self.array_fraction)) if value]
        _require(len(given) <= 1, f"{' and '.join(given)}: set at most one of --array_size, "
                 "--array_mib, --array_fraction")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    mode: str = "train"
    mesh: MeshConfig = MeshConfig()
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    results: ResultsConfig = ResultsConfig()
    reliability: ReliabilityConfig = ReliabilityConfig()
    distributed: DistributedConfig = DistributedConfig()
    stream: StreamConfig = StreamConfig()

    @property
    def scored(self) -> bool:
        """A training run on real data has a quality, hence a target and a VFLOPS figure."""
        return self.mode == "train" and self.data.dataset != "synthetic"

    def quality_target(self) -> QualityTarget:
        """Raises UsageError when the run has no official target and none was given."""
        return resolve_target(self.model.workload, self.model.model, self.data.dataset,
                              self.results.target_quality, self.results.quality_exponent)

    def validate(self) -> RunConfig:
        _one_of("mode", self.mode, MODES)
        for part in (self.mesh, self.data, self.model, self.optim, self.train, self.results,
                     self.reliability, self.distributed):
            part.validate()
        serves = BUILTIN_DATASETS.get(self.data.dataset, "image_classification")
        _require(serves == self.model.workload,
                 f"--dataset={self.data.dataset}: a data set of --workload={serves}, not of "
                 f"--workload={self.model.workload}")
        if self.scored:
            self.quality_target()
        if self.mode == "stream":
            self.stream.validate()
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
