"""Typed, frozen run configuration: built once from flags (or in code by tests) and validated.

No module but `flags.py` reads absl FLAGS; everything else takes these objects. Every setting is
described once, here, on its field (`_field`); `flags.py` derives each command-line flag from it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TypeVar

from hpcai_jax import gpu_settings
from hpcai_jax.distributed import DistributedConfig
from hpcai_jax.errors import UsageError
from hpcai_jax.targets import QualityTarget, resolve_target

MODES = ("train", "flops", "stream", "check")
# The models each workload trains; `regression` is the small second workload that proves the
# workload protocol (hpcai_jax/workloads/).
WORKLOAD_MODELS = {
    "image_classification": (
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "resnet152",
        "resnet_small",
    ),
    "regression": ("mlp",),
    # HPC AI500's second workload; faster_rcnn_small is for tests and CPU demos.
    "extreme_weather": ("faster_rcnn_resnet50", "faster_rcnn_small"),
}
WORKLOADS = tuple(WORKLOAD_MODELS)
MODELS = tuple(m for models in WORKLOAD_MODELS.values() for m in models)
# Built-in data sets and the workload each serves; any other name is a tfds image set.
BUILTIN_DATASETS = {
    "fashion_mnist": "image_classification",
    "synthetic": "image_classification",
    "friedman1": "regression",
    "extremeweather": "extreme_weather",
    "synthetic_climate": "extreme_weather",
}
BOOTSTRAP_METHODS = ("with_replacement", "poisson", "none")
OPTIMIZERS = ("sgd", "adam", "adagrad", "lars", "lamb")
LR_SCHEDULES = ("constant", "warmup_cosine", "warmup_polynomial", "step")
MEMBER_STRATEGIES = ("auto", "vmap", "unroll")
DTYPES = ("float32", "bfloat16", "float16", "int8")
# Table 2's communication options (engine/collectives.py, docs/system_options.md).
ALLREDUCE_MODES = ("flat", "hierarchical", "2d_torus")
GRAD_ALLREDUCE_DTYPES = ("float32", "bfloat16", "float16", "int8")
ON_DIVERGENCE = ("stop", "prune")
BAD_EXAMPLE_POLICIES = ("fail", "skip")  # data/bad_examples.py
PRECISIONS = ("float64", "float32", "bfloat16")  # STREAM
KERNEL_SETS = ("all", "triad", "nstream")
PLACEMENTS = ("one", "all", "each")
FLOPS_SOURCES = ("auto", "xla", "analytic")
# MLPerf's availability categories, as hpcai_jax/mllog_rules/hpcai500.yaml accepts them.
SUBMISSION_STATUSES = ("onprem", "cloud", "preview", "research")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def _one_of(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    _require(value in allowed, f"--{flag}={value!r}: expected one of {', '.join(allowed)}")


_T = TypeVar("_T")


def _field(
    default: _T, help: str, *, flag: str | None = None, choices: tuple[str, ...] | None = None
) -> _T:
    """A setting with its one description; `flags.py` makes a --flag of it.

    Args:
      default: the field's default, also the flag's.
      help: what the setting means; the flag's help text.
      flag: the flag's name where it is not the field's name.
      choices: the allowed values: an enum flag, which absl checks when it parses. Without them a
        str field is a string flag (checked, if at all, by `validate`).
    """
    metadata: dict = {"help": help}
    if flag is not None:
        metadata["flag"] = flag
    if choices is not None:
        metadata["choices"] = choices
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Eq. 5 generalised: (ensemble_size / members_per_device) × parallel_degree × model_parallel
    = devices.

    0 means "derive": parallel_degree from the local device count (the paper's acc_num) over
    model_parallel, members_per_device from the other numbers.
    """

    ensemble_size: int = _field(4, "M: number of bagged base models.")
    members_per_device: int = _field(
        0,
        "Members held by one device (>1: several members per device). 0: derive from M, "
        "P_degree and the device count.",
    )
    parallel_degree: int = _field(
        0,
        "P_degree: devices that data-parallel-train one member. 0: the local device count "
        "(the paper's acc_num) over --model_parallel.",
    )
    model_parallel: int = _field(
        1,
        "P_model: devices that share one member's layers (tensor parallel: every convolution's "
        "and dense layer's output features split over them). Eq. 5 becomes (M / "
        "members_per_device) × P_degree × P_model = devices.",
    )
    pipeline_stages: int = _field(
        1,
        "Pipeline stages per member. Only 1: pipeline parallelism is not offered "
        "(docs/system_options.md says why).",
    )
    member_strategy: str = _field(
        "auto",
        "How a device runs its several members: vmap, unroll (a loop inside the step), or auto "
        "(the measured default for the backend).",
        choices=MEMBER_STRATEGIES,
    )
    allreduce: str = _field(
        "flat",
        "How a member's gradient is summed over its P_degree devices: flat (one all-reduce), "
        "hierarchical (reduce-scatter in a node, all-reduce across nodes, all-gather in a node), "
        "2d_torus (the same over the data axis factored into two sides).",
        choices=ALLREDUCE_MODES,
    )
    allreduce_group_size: int = _field(
        0,
        "Devices in the inner group of --allreduce=hierarchical (a node) or 2d_torus (the first "
        "side). 0: devices per process (hierarchical), the squarest factoring (2d_torus).",
    )
    grad_allreduce_dtype: str = _field(
        "float32",
        "Element type of the gradient all-reduce (cast back to float32 after); int8 is "
        "all-gathered with per-tensor scales (--allreduce=flat only).",
        choices=GRAD_ALLREDUCE_DTYPES,
    )

    def validate(self) -> None:
        _require(self.ensemble_size >= 1, f"--ensemble_size={self.ensemble_size}: expected >= 1")
        _require(
            self.members_per_device >= 0,
            f"--members_per_device={self.members_per_device}: expected >= 1 (or 0 to derive)",
        )
        _require(
            self.parallel_degree >= 0,
            f"--parallel_degree={self.parallel_degree}: expected >= 1 (or 0 for the local device count)",
        )
        _require(self.model_parallel >= 1, f"--model_parallel={self.model_parallel}: expected >= 1")
        _require(
            self.pipeline_stages == 1,
            f"--pipeline_stages={self.pipeline_stages}: only 1 is supported; pipeline "
            "microbatches would change BatchNorm's batch statistics, so the option would change "
            "what is trained (docs/system_options.md); use --model_parallel to split a member",
        )
        _one_of("member_strategy", self.member_strategy, MEMBER_STRATEGIES)
        _one_of("allreduce", self.allreduce, ALLREDUCE_MODES)
        _one_of("grad_allreduce_dtype", self.grad_allreduce_dtype, GRAD_ALLREDUCE_DTYPES)
        _require(
            self.allreduce_group_size >= 0,
            f"--allreduce_group_size={self.allreduce_group_size}: expected >= 2 (or 0 to derive)",
        )


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where examples come from. Any dataset name that is not built in is a tfds name."""

    dataset: str = _field(
        "fashion_mnist",
        "fashion_mnist (Debian IDX files), synthetic (generated on device), friedman1 (generated "
        "regression data, for --workload=regression), extremeweather (the ExtremeWeather HDF5 "
        "files or their converted form under --data_dir) or synthetic_climate (generated "
        "climate-like fields), both for --workload=extreme_weather, or any tensorflow-datasets "
        "name prepared in array_record format (e.g. imagenet2012).",
    )
    data_dir: str = _field(
        "",
        "Data directory. Default: /usr/share/datasets/fashion-mnist for fashion_mnist, "
        "~/tensorflow_datasets for tfds data sets.",
    )
    train_examples: int = _field(0, "Use the first N training examples (0: all).")
    eval_examples: int = _field(0, "Evaluate on the first N held-out examples (0: all).")
    oob_examples: int = _field(
        10_000,
        "Out-of-bag estimate on the first N training examples: each is predicted by the members "
        "that never trained on it (0: no estimate).",
    )
    image_size: int = _field(
        0,
        "Image size: the square side for tfds and synthetic images (default 224); the height of "
        "the climate grid for extremeweather and synthetic_climate, a divisor of 768 with the "
        "width 1.5 × the height (default 768 and 96). 0: the data set's default.",
    )
    num_classes: int = _field(
        1000, "Number of classes of synthetic data (real data sets carry their own)."
    )
    augment: bool = _field(
        True,
        "Training augmentation of tfds image sets: random-resized crop (area 0.08-1, aspect "
        "3/4-4/3) and horizontal flip. --noaugment gives training images the held-out "
        "transform (resize, centre crop), for ablations.",
    )
    climate_flip: bool = _field(
        False,
        "Training augmentation of the climate sets: mirror half the examples north-south "
        "(meridional winds negated, boxes mirrored), which keeps cyclones turning the way "
        "their new hemisphere's Coriolis force turns them (docs/detection.md). Off by default: "
        "the reference trains without augmentation.",
    )
    prefetch: int = _field(2, "Batches prepared ahead on the devices.")
    data_workers: int = _field(
        -1,
        "Worker processes that read and augment training examples of tfds sets and of "
        "extremeweather (-1: one per core this process may use, less one, at most 16 per local "
        "device; for synthetic_climate, held in memory, none; 0: none, in the training process).",
    )
    worker_restarts: int = _field(
        3,
        "Times a dead data worker process is restarted, at the element it owed, so the run "
        "reads what it would have; one more death ends the run naming the worker and signal.",
    )
    bad_example_policy: str = _field(
        "fail",
        "A tfds record that does not decode (corrupt JPEG): fail ends the run naming the data "
        "set, split and record; skip replaces it by another real example, the same on every "
        "process and after resume, and lists it in the record (data.skipped_examples).",
        choices=BAD_EXAMPLE_POLICIES,
    )

    @property
    def square_image_size(self) -> int:
        """The side of tfds and synthetic images."""
        return self.image_size or 224

    def validate(self) -> None:
        _require(bool(self.dataset), "--dataset: expected fashion_mnist, synthetic or a tfds name")
        _require(self.train_examples >= 0, f"--train_examples={self.train_examples}: expected >= 0")
        _require(self.eval_examples >= 0, f"--eval_examples={self.eval_examples}: expected >= 0")
        _require(self.oob_examples >= 0, f"--oob_examples={self.oob_examples}: expected >= 0")
        _require(
            self.image_size == 0 or self.image_size >= 8,
            f"--image_size={self.image_size}: expected >= 8 (or 0 for the data set's default)",
        )
        _require(self.num_classes >= 2, f"--num_classes={self.num_classes}: expected >= 2")
        _require(self.prefetch >= 1, f"--prefetch={self.prefetch}: expected >= 1")
        _require(
            self.data_workers >= -1,
            f"--data_workers={self.data_workers}: expected >= 0 (or -1 for one per core)",
        )
        _require(
            self.worker_restarts >= 0,
            f"--worker_restarts={self.worker_restarts}: expected >= 0",
        )


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    workload: str = _field("image_classification", "HPC AI500 workload.", choices=WORKLOADS)
    model: str = _field("resnet_small", "Base model of every member.", choices=MODELS)
    dtype: str = _field(
        "float32",
        "Compute dtype (parameters stay float32; float16 adds dynamic loss scaling; int8: "
        "qwix int8 convolutions and dense layers, forward and backward).",
        choices=DTYPES,
    )

    def validate(self) -> None:
        _one_of("workload", self.workload, WORKLOADS)
        _one_of("model", self.model, MODELS)
        _require(
            self.model in WORKLOAD_MODELS[self.workload],
            f"--model={self.model}: not a model of --workload={self.workload} (expected one "
            f"of {', '.join(WORKLOAD_MODELS[self.workload])})",
        )
        _one_of("dtype", self.dtype, DTYPES)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """How every member is optimised: the paper's Table 2 optimizers and learning-rate rules.

    The peak learning rate is learning_rate × batch_size / lr_reference_batch (the linear scaling
    rule); every schedule warms up to it linearly over --warmup_epochs. docs/optimizers.md
    describes each optimizer, schedule and mask.
    """

    optimizer: str = _field(
        "sgd",
        "Optimizer of every member: sgd (momentum, --nesterov), adam (AdamW: --adam_b1, "
        "--adam_b2, --adam_eps), adagrad, lars (SGD momentum with a per-layer trust ratio) or "
        "lamb (Adam with a per-layer trust ratio).",
        choices=OPTIMIZERS,
    )
    learning_rate: float = _field(
        0.1, "Base learning rate at --lr_reference_batch (linear scaling rule)."
    )
    lr_reference_batch: int = _field(256, "Batch size at which --learning_rate applies unscaled.")
    momentum: float = _field(0.9, "Momentum of sgd and lars.")
    nesterov: bool = _field(False, "Nesterov momentum for sgd and lars.")
    weight_decay: float = _field(
        5e-5,
        "Weight decay on kernels only (never biases or normalisation parameters): added to the "
        "gradient before momentum for sgd and lars, after the adaptive scaling (decoupled) for "
        "adam, adagrad and lamb.",
    )
    adam_b1: float = _field(0.9, "First-moment decay of adam and lamb.")
    adam_b2: float = _field(0.999, "Second-moment decay of adam and lamb.")
    adam_eps: float = _field(1e-8, "Denominator epsilon of adam and lamb.")
    adagrad_initial_accumulator: float = _field(
        0.1, "Starting value of adagrad's sum of squared gradients."
    )
    lars_trust_coefficient: float = _field(
        0.001, "LARS's eta: a layer's step is eta × ‖w‖ / ‖g + wd·w‖ times the learning rate."
    )
    lr_schedule: str = _field(
        "warmup_cosine",
        "Learning-rate schedule after the linear warm-up: constant, warmup_cosine (cosine decay "
        "to --lr_end_value), warmup_polynomial (decay with power --lr_decay_power to "
        "--lr_end_value) or step (× --lr_step_factor at each of --lr_step_epochs).",
        choices=LR_SCHEDULES,
    )
    warmup_epochs: float = _field(0.0, "Linear warm-up length in epochs (every schedule).")
    lr_end_value: float = _field(
        0.0,
        "Learning rate at the last step of warmup_cosine and warmup_polynomial (absolute, not "
        "scaled by the batch size).",
    )
    lr_decay_power: float = _field(2.0, "Power of the warmup_polynomial decay.")
    lr_step_epochs: str = _field(
        "30,60,80",
        "Epochs, counted from the start, at which the step schedule multiplies the learning rate "
        "by --lr_step_factor: comma-separated, increasing.",
    )
    lr_step_factor: float = _field(0.1, "Factor of each step of the step schedule.")
    label_smoothing: float = _field(
        0.0,
        "Label smoothing of the classification loss: the target puts 1 − s on the true class "
        "and s / classes on every class (0: hard labels).",
    )

    @property
    def step_epochs(self) -> tuple[float, ...]:
        """--lr_step_epochs as numbers (validate has checked them)."""
        return tuple(float(e) for e in self.lr_step_epochs.split(","))

    def validate(self) -> None:
        _one_of("optimizer", self.optimizer, OPTIMIZERS)
        _one_of("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _require(self.learning_rate > 0, f"--learning_rate={self.learning_rate}: expected > 0")
        _require(
            self.lr_reference_batch >= 1,
            f"--lr_reference_batch={self.lr_reference_batch}: expected >= 1",
        )
        _require(0 <= self.momentum < 1, f"--momentum={self.momentum}: expected in [0, 1)")
        _require(self.weight_decay >= 0, f"--weight_decay={self.weight_decay}: expected >= 0")
        for name in ("adam_b1", "adam_b2"):
            value = getattr(self, name)
            _require(0 <= value < 1, f"--{name}={value}: expected in [0, 1)")
        _require(self.adam_eps > 0, f"--adam_eps={self.adam_eps}: expected > 0")
        _require(
            self.adagrad_initial_accumulator >= 0,
            f"--adagrad_initial_accumulator={self.adagrad_initial_accumulator}: expected >= 0",
        )
        _require(
            self.lars_trust_coefficient > 0,
            f"--lars_trust_coefficient={self.lars_trust_coefficient}: expected > 0",
        )
        _require(self.warmup_epochs >= 0, f"--warmup_epochs={self.warmup_epochs}: expected >= 0")
        _require(self.lr_end_value >= 0, f"--lr_end_value={self.lr_end_value}: expected >= 0")
        _require(self.lr_decay_power > 0, f"--lr_decay_power={self.lr_decay_power}: expected > 0")
        _require(
            _increasing_epochs(self.lr_step_epochs),
            f"--lr_step_epochs={self.lr_step_epochs}: expected comma-separated epochs > 0 in "
            "increasing order, e.g. 30,60,80",
        )
        _require(
            0 < self.lr_step_factor < 1,
            f"--lr_step_factor={self.lr_step_factor}: expected in (0, 1)",
        )
        _require(
            0 <= self.label_smoothing < 1,
            f"--label_smoothing={self.label_smoothing}: expected in [0, 1)",
        )


def _all_finite(config) -> None:
    """Every float a user can type is finite: inf or nan passes some range checks (inf > 0) and
    fails later, deep inside a computation."""
    for part in dataclasses.fields(config):
        value = getattr(config, part.name)
        if not dataclasses.is_dataclass(value):
            continue
        for field in dataclasses.fields(value):
            number = getattr(value, field.name)
            if isinstance(number, float):
                flag = field.metadata.get("flag") or field.name
                _require(math.isfinite(number), f"--{flag}={number}: expected a finite number")


def _increasing_epochs(text: str) -> bool:
    """Whether `text` is finite epochs > 0, comma-separated, strictly increasing."""
    try:
        epochs = [float(e) for e in text.split(",")]
    except ValueError:
        return False
    return all(0 < e < float("inf") for e in epochs) and sorted(set(epochs)) == epochs


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    batch_size: int = _field(128, "|B|: batch size of one member.")
    epochs: float = _field(1.0, "Training epochs (fractions allowed).")
    steps: int = _field(0, "Training steps; overrides --epochs when > 0.")
    seed: int = _field(0, "Run seed: members' keys and bootstrap samples.")
    bootstrap: str = _field(
        "with_replacement",
        "Per-member resampling: with_replacement (N draws), poisson (Poisson(1) counts), none "
        "(plain shuffling, for ablations).",
        choices=BOOTSTRAP_METHODS,
    )
    eval_batch_size: int = _field(1000, "Held-out examples per eval step.")
    log_every: int = _field(50, "Steps between progress lines.")
    timing_warmup_steps: int = _field(
        1,
        "First steps trained but excluded from the steady-state step-time statistics "
        "(flops_per_s_steady); Eq. 6's per-epoch FLOPS counts them.",
    )
    eval_every_epochs: int = _field(
        0,
        "Evaluate members and ensemble on the held-out set every K epochs during training, "
        "timed apart from training (the record's quality.curve and time to target). 0: only "
        "once, at the end.",
    )
    stop_at_target: bool = _field(
        False,
        "End training at the first evaluation (--eval_every_epochs) where the ensemble reaches "
        "the target quality; the run is complete, its quality that evaluation's.",
    )

    def validate(self) -> None:
        _require(self.batch_size >= 1, f"--batch_size={self.batch_size}: expected >= 1")
        _require(
            self.epochs > 0 or self.steps > 0,
            f"--epochs={self.epochs}, --steps={self.steps}: expected epochs > 0 or steps > 0",
        )
        _require(self.steps >= 0, f"--steps={self.steps}: expected >= 0")
        # The seed becomes a uint32 (the members' keys) and numpy's bootstrap seed.
        _require(0 <= self.seed < 2**32, f"--seed={self.seed}: expected an integer in [0, 2^32)")
        _one_of("bootstrap", self.bootstrap, BOOTSTRAP_METHODS)
        _require(
            self.eval_batch_size >= 1, f"--eval_batch_size={self.eval_batch_size}: expected >= 1"
        )
        _require(self.log_every >= 1, f"--log_every={self.log_every}: expected >= 1")
        _require(
            self.timing_warmup_steps >= 0,
            f"--timing_warmup_steps={self.timing_warmup_steps}: expected >= 0",
        )
        _require(
            self.eval_every_epochs >= 0,
            f"--eval_every_epochs={self.eval_every_epochs}: expected >= 0 (0: only at the end)",
        )
        _require(
            not self.stop_at_target or self.eval_every_epochs > 0,
            "--stop_at_target: needs --eval_every_epochs > 0 (without it the only evaluation is "
            "the last one)",
        )


@dataclasses.dataclass(frozen=True)
class ResultsConfig:
    results_dir: str = _field("results", "Directory for JSON results records.")
    run_name: str = _field("", "Run id, the record's file name (default: <mode>-<UTC time>-<pid>).")
    overwrite: bool = _field(
        False, "Replace an existing record of the same run id instead of refusing to start."
    )
    target_quality: float = _field(
        0.0,
        "Target quality for VFLOPS. 0: the official target of (workload, model, data set), "
        "e.g. 0.763 for ResNet-50 on imagenet2012; any other run must set it.",
    )
    quality_exponent: float = _field(
        -1.0,
        "n of the VFLOPS penalty (Eq. 8). -1: the workload's (5 for image classification); "
        "0 means 0 (no penalty).",
    )
    # Applied by telemetry/flop_count.py: choose_flops.
    flops_source: str = _field(
        "auto",
        "Which FLOP count of the compiled step FLOPS uses: xla (cost analysis), analytic (the "
        "jaxpr walk under XLA's rules), or auto (XLA when it agrees with the analytic count "
        "within the cross-check tolerance, else analytic).",
        choices=FLOPS_SOURCES,
    )
    # Written by hpcai_jax/telemetry/mllog.py.
    mllog: str = _field(
        "",
        "Also write a training run's MLPerf-style :::MLLOG lines to this file (process 0; needs "
        "the mlperf-logging package). Check it with the compliance checker and the ruleset "
        "hpcai_jax/mllog_rules/hpcai500.yaml. Empty: no MLLOG file.",
    )
    submission_org: str = _field(
        "",
        "The submitting organisation, written to the MLLOG's submission_org (empty: unspecified).",
    )
    submission_platform: str = _field(
        "",
        "The system's name, written to the MLLOG's submission_platform (empty: <devices>x<device "
        "kind>, e.g. 8xcpu).",
    )
    submission_status: str = _field(
        "research",
        "The system's availability, written to the MLLOG's submission_status: onprem or cloud "
        "(available now), preview (available within the rules' window), research (neither).",
        choices=SUBMISSION_STATUSES,
    )
    stream_record: str = _field(
        "",
        "A STREAM record (--mode=stream) whose Triad bandwidth per device is the roofline's "
        "memory roof. Empty: a short Triad on every device at once is measured at start.",
    )

    def validate(self) -> None:
        _require(bool(self.results_dir), "--results_dir: expected a directory path")
        _require(
            "/" not in self.run_name and self.run_name not in (".", ".."),
            f"--run_name={self.run_name}: expected a file-name-safe id (no '/')",
        )
        _require(
            0 <= self.target_quality <= 1,
            f"--target_quality={self.target_quality}: expected in (0, 1] (0: the official target)",
        )
        _require(
            self.quality_exponent >= 0 or self.quality_exponent == -1,
            f"--quality_exponent={self.quality_exponent}: expected >= 0 (-1: the workload's n)",
        )
        _one_of("flops_source", self.flops_source, FLOPS_SOURCES)
        _one_of("submission_status", self.submission_status, SUBMISSION_STATUSES)


@dataclasses.dataclass(frozen=True)
class ReliabilityConfig:
    """Checkpoints (orbax), resume, and what to do when a member diverges."""

    checkpoint_dir: str = _field(
        "",
        "Orbax checkpoint directory (empty: no checkpoints); a run started with an existing one "
        "resumes from it.",
    )
    checkpoint_every: int = _field(
        0, "Steps between checkpoints (0: only at the end and on preemption)."
    )
    keep_checkpoints: int = _field(2, "Checkpoints kept.")
    on_divergence: str = _field(
        "stop",
        "A member with a non-finite loss or parameter: stop the run (record marked invalid), or "
        "prune it from the ensemble and go on.",
        choices=ON_DIVERGENCE,
    )
    divergence_check_every: int = _field(
        0, "Steps between host checks of the on-device divergence flags (0: --log_every)."
    )
    inject_nan: str = _field(
        "", "Test hook: MEMBER@STEP sets that member's parameters to NaN before that step."
    )

    @property
    def nan_injection(self) -> tuple[int, int] | None:
        if not self.inject_nan:
            return None
        member, step = self.inject_nan.split("@")
        return int(member), int(step)

    def validate(self) -> None:
        if self.inject_nan:
            parts = self.inject_nan.split("@")
            _require(
                len(parts) == 2 and all(p.isdigit() for p in parts),
                f"--inject_nan={self.inject_nan}: expected MEMBER@STEP, e.g. 1@3",
            )
        _require(
            self.checkpoint_every >= 0, f"--checkpoint_every={self.checkpoint_every}: expected >= 0"
        )
        _require(
            self.keep_checkpoints >= 1, f"--keep_checkpoints={self.keep_checkpoints}: expected >= 1"
        )
        _one_of("on_divergence", self.on_divergence, ON_DIVERGENCE)
        _require(
            self.divergence_check_every >= 0,
            f"--divergence_check_every={self.divergence_check_every}: expected >= 0",
        )


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """BabelStream-style bandwidth run (docs/design.md §2). Exactly one size setting is non-zero."""

    array_size: int = _field(0, "STREAM: elements per array.")
    array_mib: float = _field(0.0, "STREAM: MiB per array.")
    array_fraction: float = _field(
        0.0, "STREAM: fraction of one device's memory for the three arrays."
    )
    num_times: int = _field(100, "STREAM: repetitions of each kernel.")
    # precision, kernels and devices are string flags, not enums: validate() checks them, and only
    # in stream mode.
    precision: str = _field("float64", "STREAM: float64, float32 or bfloat16.")
    kernels: str = _field("all", "STREAM: all, triad or nstream.", flag="stream_kernels")
    devices: str = _field(
        "one",
        "STREAM: one (first local device), all (sharded over every device) or each (every "
        "device alone, in turn, one figure per device).",
        flag="stream_devices",
    )
    csv: bool = _field(False, "STREAM: print CSV instead of the table.")
    mibibytes: bool = _field(False, "STREAM: report MiB/s instead of MB/s.")
    strict_size: bool = _field(
        False, "STREAM: arrays smaller than 4x the largest cache are an error, not a warning."
    )

    def validate(self) -> None:
        """Checks every STREAM flag on its own; raises UsageError with a one-line message naming it."""
        _require(
            self.precision in PRECISIONS,
            f"--precision={self.precision!r}: expected one of {', '.join(PRECISIONS)}",
        )
        _require(
            self.kernels in KERNEL_SETS,
            f"--stream_kernels={self.kernels!r}: expected one of {', '.join(KERNEL_SETS)}",
        )
        _require(
            self.devices in PLACEMENTS,
            f"--stream_devices={self.devices!r}: expected one of {', '.join(PLACEMENTS)}",
        )
        # BabelStream drops the first iteration from the statistics, so it needs two.
        _require(
            self.num_times >= 2,
            f"--num_times={self.num_times}: expected >= 2 (the first "
            "iteration is excluded from the statistics)",
        )
        _require(
            self.array_size >= 0,
            f"--array_size={self.array_size}: expected >= 1 elements "
            f"per array (or 0 for the default 2^25)",
        )
        _require(
            self.array_mib >= 0,
            f"--array_mib={self.array_mib}: expected > 0 MiB per array (or 0 to leave unset)",
        )
        _require(
            0 <= self.array_fraction < 1,
            f"--array_fraction={self.array_fraction}: expected "
            "a fraction of device memory in (0, 1) for the three arrays (or 0 to leave unset)",
        )
        given = [
            f"--{name}={value}"
            for name, value in (
                ("array_size", self.array_size),
                ("array_mib", self.array_mib),
                ("array_fraction", self.array_fraction),
            )
            if value
        ]
        _require(
            len(given) <= 1,
            f"{' and '.join(given)}: set at most one of --array_size, "
            "--array_mib, --array_fraction",
        )


@dataclasses.dataclass(frozen=True)
class CheckConfig:
    """`--mode=check` (hpcai_jax/check/, docs/node_check.md), and the record it leaves for the
    training modes."""

    budget_s: float = _field(
        600.0,
        "Seconds the whole --mode=check command may take, compilation included (it ends within "
        "this plus two minutes); items are cut down or skipped (a WARN row) to fit.",
        flag="check_budget_s",
    )
    record: str = _field(
        "",
        "A --mode=check record: --member_strategy=auto takes the strategy it measured on this "
        "backend. Empty: the per-backend default.",
        flag="check_record",
    )

    def validate(self) -> None:
        _require(self.budget_s > 0, f"--check_budget_s={self.budget_s}: expected > 0 seconds")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    mode: str = _field(
        "train",
        "train: bagged-ensemble training; flops: FLOP accounting report; stream: "
        "memory-bandwidth benchmark; check: judge this node before a run (docs/node_check.md).",
        choices=MODES,
    )
    gpu_settings: str = _field(
        "default",
        "XLA flags and environment set before a GPU backend starts (docs/gpu_settings.md): "
        "default, none, or comma-separated names (default's plus others; '-name' removes one). "
        "Values already in the environment win. No effect off GPUs.",
    )
    mesh: MeshConfig = MeshConfig()
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()
    results: ResultsConfig = ResultsConfig()
    reliability: ReliabilityConfig = ReliabilityConfig()
    distributed: DistributedConfig = DistributedConfig()
    stream: StreamConfig = StreamConfig()
    check: CheckConfig = CheckConfig()

    @property
    def scored(self) -> bool:
        """A training run on real data has a quality, hence a target and a VFLOPS figure."""
        return self.mode == "train" and self.data.dataset != "synthetic"

    def quality_target(self) -> QualityTarget:
        """Raises UsageError when the run has no official target and none was given."""
        return resolve_target(
            self.model.workload,
            self.model.model,
            self.data.dataset,
            self.results.target_quality,
            self.results.quality_exponent,
        )

    def validate(self) -> RunConfig:
        _one_of("mode", self.mode, MODES)
        gpu_settings.select(self.gpu_settings)
        _all_finite(self)
        for part in (
            self.mesh,
            self.data,
            self.model,
            self.optim,
            self.train,
            self.results,
            self.reliability,
            self.distributed,
            self.check,
        ):
            part.validate()
        serves = BUILTIN_DATASETS.get(self.data.dataset, "image_classification")
        _require(
            serves == self.model.workload,
            f"--dataset={self.data.dataset}: a data set of --workload={serves}, not of "
            f"--workload={self.model.workload}",
        )
        _require(
            self.optim.label_smoothing == 0 or self.model.workload == "image_classification",
            f"--label_smoothing={self.optim.label_smoothing}: only for "
            f"--workload=image_classification",
        )
        _require(
            self.mesh.model_parallel == 1 or self.model.dtype != "int8",
            f"--model_parallel={self.mesh.model_parallel}: not with --dtype=int8 (qwix "
            "quantizes whole layers; a split layer's scales would differ per device)",
        )
        _require(
            not self.train.stop_at_target or self.scored,
            f"--stop_at_target: --dataset={self.data.dataset} has no held-out quality to reach",
        )
        if self.scored:
            self.quality_target()
        if self.mode == "stream":
            self.stream.validate()
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
