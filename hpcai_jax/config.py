"""Typed, frozen run configuration: built once from flags (or in code by tests) and validated.

No module but `flags.py` reads absl FLAGS; everything else takes these objects. Every setting is
described once, on its field (`_field`, hpcai_jax/fields.py): its help, its flag and the values
it accepts; `flags.py` derives each command-line flag from it and `validate` checks each value
against it. The rules between settings are the only checks written out here.

This module holds the training run's settings, which the engine reads, and imports no mode: a
mode's own settings live apart (`stream/config.py`, `check_config.py`, the distributed
start-up's in `distributed.py`), and `settings.py`, above them all, composes them with these
into the one configuration `main` runs (`Settings`).
"""

from __future__ import annotations

import dataclasses

from hpcai_jax import fields, member_forms
from hpcai_jax.errors import UsageError
from hpcai_jax.fields import Checked
from hpcai_jax.fields import setting as _field
from hpcai_jax.quality_targets import QualityTarget, resolve_target
from hpcai_jax.records.train import SweepPlan

MODES = ("train", "flops", "stream", "check")
RESUME_MEMBERS = ("all", "fit")  # --resume_members: docs/reliability.md
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
        "resnet_mini",
        "resnet_tiny",
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
BATCH_POLICIES = ("per_member", "per_device")  # engine/mesh.py: resolved_batch
OPTIMIZERS = ("sgd", "adam", "adagrad", "lars", "lamb")
LR_SCHEDULES = ("constant", "warmup_cosine", "warmup_polynomial", "step")
# How a device runs its members: hpcai_jax/member_forms.py, one row per form.
MEMBER_STRATEGIES = ("auto", "vmap", "unroll")
MEMBER_MAPS = ("auto", *member_forms.VMAP_FORMS)
DTYPES = ("float32", "bfloat16", "float16", "int8")
# Table 2's communication options (engine/collectives.py, docs/system_options.md).
ALLREDUCE_MODES = ("flat", "hierarchical", "2d_torus")
GRAD_ALLREDUCE_DTYPES = ("float32", "bfloat16", "float16", "int8")
ON_DIVERGENCE = ("stop", "prune")
BAD_EXAMPLE_POLICIES = ("fail", "skip")  # data/bad_examples.py
FLOPS_SOURCES = ("auto", "xla", "analytic")
# MLPerf's availability categories, as hpcai_jax/mllog_rules/hpcai500.yaml accepts them.
SUBMISSION_STATUSES = ("onprem", "cloud", "preview", "research")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def _increasing_epochs(text: str) -> bool:
    """Whether `text` is finite epochs > 0, comma-separated, strictly increasing."""
    try:
        epochs = [float(e) for e in text.split(",")]
    except ValueError:
        return False
    return all(0 < e < float("inf") for e in epochs) and sorted(set(epochs)) == epochs


def _file_name_safe(name: str) -> bool:
    """Whether a run id can be a record's file name in --results_dir."""
    return "/" not in name and name not in (".", "..")


def _sweep_plan(text: str) -> bool:
    """Whether --sweep_plan is empty or a plan's fingerprint (records/train.SWEEP_PLAN)."""
    try:
        SweepPlan.parse(text)
    except ValueError:
        return False
    return True


def _step_range(text: str) -> bool:
    """A:B, training steps A to B-1 with 1 <= A < B (a hook runs after a step: not before 0)."""
    first, _, last = text.partition(":")
    return first.isdigit() and last.isdigit() and 1 <= int(first) < int(last)


def _member_at_step(text: str) -> bool:
    """Whether --inject_nan reads MEMBER@STEP."""
    parts = text.split("@")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


_PIPELINE_REFUSAL = (
    "only 1 is supported; pipeline microbatches would change BatchNorm's batch statistics, so "
    "the option would change what is trained (docs/system_options.md); use --model_parallel to "
    "split a member"
)


@dataclasses.dataclass(frozen=True)
class MeshConfig(Checked):
    """Eq. 5 generalised: (ensemble_size / members_per_device) × parallel_degree × model_parallel
    = devices.

    0 means "derive": parallel_degree from the local device count (the paper's acc_num) over
    model_parallel, members_per_device from the other numbers.
    """

    ensemble_size: int = _field(4, "M: number of bagged base models.", ge=1)
    members_per_device: int | None = _field(
        1,
        "Members held by one device (>1: members share devices). auto: derive it from M, "
        "P_degree and the device count (--mode=flops' default); otherwise Eq. 5 must hold as "
        "given.",
        ge=1,
        auto=0,
        note="or auto",
        # The FLOP accounting compiles the step on whatever devices exist, so its members
        # share them unless told otherwise (M = 4 with one member per device fits no machine
        # with P_degree = the device count).
        mode_defaults={"flops": "auto"},
    )
    parallel_degree: int | None = _field(
        None,
        "P_degree: devices that data-parallel-train one member. auto: the local device count "
        "(the paper's acc_num) over --model_parallel.",
        ge=1,
        auto=0,
        note="or auto for the local device count",
    )
    model_parallel: int = _field(
        1,
        "P_model: devices that share one member's layers (tensor parallel: every convolution's "
        "and dense layer's output features split over them). Eq. 5 becomes (M / "
        "members_per_device) × P_degree × P_model = devices.",
        ge=1,
    )
    pipeline_stages: int = _field(
        1,
        "Pipeline stages per member. Only 1: pipeline parallelism is not offered "
        "(docs/system_options.md says why).",
        ge=1,
        le=1,
        message=_PIPELINE_REFUSAL,
    )
    member_strategy: str = _field(
        "auto",
        "How a device runs its several members: vmap, unroll (a loop inside the step), or auto "
        "(the measured default for the backend).",
        choices=MEMBER_STRATEGIES,
    )
    member_map: str = _field(
        "auto",
        "Under --member_strategy=vmap, how the members are mapped: scan (sequential: whole "
        "members in a loop), conv_loop (jax.vmap, each convolution a loop over the members), "
        "batched (one kernel per layer: every convolution a batched product over k² slices), "
        "batched_grouped (one kernel per layer: k×k convolutions one grouped convolution, "
        "differentiated as such), grouped (plain jax.vmap: XLA's grouped convolutions, an "
        "ablation), or auto (the measured default for the backend; docs/members.md).",
        choices=MEMBER_MAPS,
    )
    member_group: int = _field(
        0,
        "Under the jax.vmap forms of --member_map, how many of a device's members are batched "
        "at once, the groups one after another (the memory knob); 0: all of them. Must divide "
        "--members_per_device.",
        ge=0,
    )
    acceptance: str = _field(
        "",
        "An acceptance.json of benchmarks/accelerator/acceptance.sh run on this backend: "
        "--member_map=auto takes its members decision (and --member_strategy=auto vmap where "
        "the decision chose a form). Empty: the per-backend default (docs/members.md).",
    )
    allreduce: str = _field(
        "flat",
        "How a member's gradient is summed over its P_degree devices: flat (one all-reduce), "
        "hierarchical (reduce-scatter in a node, all-reduce across nodes, all-gather in a node), "
        "2d_torus (the same over the data axis factored into two sides).",
        choices=ALLREDUCE_MODES,
    )
    allreduce_group_size: int | None = _field(
        None,
        "Devices in the inner group of --allreduce=hierarchical (a node) or 2d_torus (the first "
        "side). auto: devices per process (hierarchical), the squarest factoring (2d_torus).",
        ge=2,
        # 1 passes here, as it always has: --allreduce=flat ignores the size and the grouped
        # modes refuse 1 with their own message (engine/collectives.py: resolve_plan).
        allow=(1,),
        auto=0,
        note="or auto to derive",
    )
    grad_allreduce_dtype: str = _field(
        "float32",
        "Element type of the gradient all-reduce (cast back to float32 after); int8 is "
        "all-gathered with per-tensor scales (--allreduce=flat only).",
        choices=GRAD_ALLREDUCE_DTYPES,
    )


@dataclasses.dataclass(frozen=True)
class DataConfig(Checked):
    """Where examples come from. Any dataset name that is not built in is a tfds name."""

    dataset: str = _field(
        "fashion_mnist",
        "fashion_mnist (Debian IDX files), synthetic (generated on device), friedman1 (generated "
        "regression data, for --workload=regression), extremeweather (the ExtremeWeather HDF5 "
        "files or their converted form under --data_dir) or synthetic_climate (generated "
        "climate-like fields), both for --workload=extreme_weather, or any tensorflow-datasets "
        "name prepared in array_record format (e.g. imagenet2012).",
        valid=bool,
        message="expected fashion_mnist, synthetic or a tfds name",
    )
    data_dir: str = _field(
        "",
        "Data directory. Default: /usr/share/datasets/fashion-mnist for fashion_mnist, "
        "~/tensorflow_datasets for tfds data sets.",
    )
    train_examples: int = _field(0, "Use the first N training examples (0: all).", ge=0)
    eval_examples: int = _field(0, "Evaluate on the first N held-out examples (0: all).", ge=0)
    oob_examples: int = _field(
        10_000,
        "Out-of-bag estimate on the first N training examples: each is predicted by the members "
        "that never trained on it (0: no estimate).",
        ge=0,
    )
    image_size: int = _field(
        0,
        "Image size: the square side for tfds and synthetic images (default 224); the height of "
        "the climate grid for extremeweather and synthetic_climate, a divisor of 768 with the "
        "width 1.5 × the height (default 768 and 96). 0: the data set's default.",
        ge=8,
        allow=(0,),
        note="or 0 for the data set's default",
    )
    # Resolved to the data set's count before a run (data/datasets.py `resolved`): the record
    # states the classes the run trained on.
    num_classes: int = _field(
        0,
        "Number of classes: of synthetic data (0: 1000); a real data set has its own, which "
        "another value contradicts (0: the data set's).",
        ge=2,
        allow=(0,),
        note="or 0 for the data set's",
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
    prefetch: int = _field(2, "Batches prepared ahead on the devices.", ge=1)
    eval_cache_mib: float = _field(
        1024.0,
        "Held-out examples a process has read and decoded are kept in host memory up to this "
        "many MiB, so that later evaluations do not read them again (0: none).",
        ge=0,
        unit="MiB",
    )
    data_workers: int = _field(
        -1,
        "Worker processes that read and augment training examples of tfds sets and of "
        "extremeweather (-1: one per core this process may use, less one, at most 16 per local "
        "device; for synthetic_climate, held in memory, none; 0: none, in the training process).",
        ge=0,
        allow=(-1,),
        note="or -1 for one per core",
    )
    worker_restarts: int = _field(
        3,
        "Times a dead data worker process is restarted, at the element it owed, so the run "
        "reads what it would have; one more death ends the run naming the worker and signal.",
        ge=0,
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


@dataclasses.dataclass(frozen=True)
class ModelConfig(Checked):
    workload: str = _field("image_classification", "HPC AI500 workload.", choices=WORKLOADS)
    model: str = _field("resnet_small", "Base model of every member.", choices=MODELS)
    dtype: str = _field(
        "float32",
        "Compute dtype (parameters stay float32; float16 adds dynamic loss scaling; int8: "
        "qwix int8 convolutions and dense layers, forward and backward).",
        choices=DTYPES,
    )

    def validate(self) -> None:
        super().validate()
        _require(
            self.model in WORKLOAD_MODELS[self.workload],
            f"--model={self.model}: not a model of --workload={self.workload} (expected one "
            f"of {', '.join(WORKLOAD_MODELS[self.workload])})",
        )


@dataclasses.dataclass(frozen=True)
class OptimConfig(Checked):
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
        0.1, "Base learning rate at --lr_reference_batch (linear scaling rule).", gt=0
    )
    lr_reference_batch: int = _field(
        256, "Batch size at which --learning_rate applies unscaled.", ge=1
    )
    momentum: float = _field(0.9, "Momentum of sgd and lars.", ge=0, lt=1)
    nesterov: bool = _field(False, "Nesterov momentum for sgd and lars.")
    weight_decay: float = _field(
        5e-5,
        "Weight decay on kernels only (never biases or normalisation parameters): added to the "
        "gradient before momentum for sgd and lars, after the adaptive scaling (decoupled) for "
        "adam, adagrad and lamb.",
        ge=0,
    )
    adam_b1: float = _field(0.9, "First-moment decay of adam and lamb.", ge=0, lt=1)
    adam_b2: float = _field(0.999, "Second-moment decay of adam and lamb.", ge=0, lt=1)
    adam_eps: float = _field(1e-8, "Denominator epsilon of adam and lamb.", gt=0)
    adagrad_initial_accumulator: float = _field(
        0.1, "Starting value of adagrad's sum of squared gradients.", ge=0
    )
    lars_trust_coefficient: float = _field(
        0.001,
        "LARS's eta: a layer's step is eta × ‖w‖ / ‖g + wd·w‖ times the learning rate.",
        gt=0,
    )
    lr_schedule: str = _field(
        "warmup_cosine",
        "Learning-rate schedule after the linear warm-up: constant, warmup_cosine (cosine decay "
        "to --lr_end_value), warmup_polynomial (decay with power --lr_decay_power to "
        "--lr_end_value) or step (× --lr_step_factor at each of --lr_step_epochs).",
        choices=LR_SCHEDULES,
    )
    warmup_epochs: float = _field(0.0, "Linear warm-up length in epochs (every schedule).", ge=0)
    lr_end_value: float = _field(
        0.0,
        "Learning rate at the last step of warmup_cosine and warmup_polynomial (absolute, not "
        "scaled by the batch size).",
        ge=0,
    )
    lr_decay_power: float = _field(2.0, "Power of the warmup_polynomial decay.", gt=0)
    lr_step_epochs: str = _field(
        "30,60,80",
        "Epochs, counted from the start, at which the step schedule multiplies the learning rate "
        "by --lr_step_factor: comma-separated, increasing.",
        valid=_increasing_epochs,
        message="expected comma-separated epochs > 0 in increasing order, e.g. 30,60,80",
    )
    lr_step_factor: float = _field(0.1, "Factor of each step of the step schedule.", gt=0, lt=1)
    label_smoothing: float = _field(
        0.0,
        "Label smoothing of the classification loss: the target puts 1 − s on the true class "
        "and s / classes on every class (0: hard labels).",
        ge=0,
        lt=1,
    )

    @property
    def step_epochs(self) -> tuple[float, ...]:
        """--lr_step_epochs as numbers (validate has checked them)."""
        return tuple(float(e) for e in self.lr_step_epochs.split(","))


@dataclasses.dataclass(frozen=True)
class TrainConfig(Checked):
    batch_size: int = _field(
        128,
        "|B|: batch size of one member (--batch_policy=per_device: of one device, the member's "
        "being it × P_degree).",
        ge=1,
    )
    batch_policy: str = _field(
        "per_member",
        "How the batch follows P_degree: per_member (--batch_size is the member's batch, split "
        "over its P_degree devices) or per_device (--batch_size is each device's batch: the "
        "member's is --batch_size × P_degree and its learning rate grows with it by the linear "
        "rule, warm-up epochs unchanged; the record's train.batch_size states the member's).",
        choices=BATCH_POLICIES,
    )
    epochs: float = _field(1.0, "Training epochs (fractions allowed).")
    steps: int = _field(0, "Training steps; overrides --epochs when > 0.", ge=0)
    # The seed becomes a uint32 (the members' keys) and numpy's bootstrap seed.
    seed: int = _field(
        0,
        "Run seed: members' keys and bootstrap samples.",
        ge=0,
        lt=2**32,
        message="expected an integer in [0, 2^32)",
    )
    bootstrap: str = _field(
        "with_replacement",
        "Per-member resampling: with_replacement (N draws), poisson (Poisson(1) counts), none "
        "(plain shuffling, for ablations).",
        choices=BOOTSTRAP_METHODS,
    )
    eval_batch_size: int = _field(1000, "Held-out examples per eval step.", ge=1)
    log_every: int = _field(50, "Steps between progress lines.", ge=1)
    timing_warmup_steps: int = _field(
        1,
        "First steps trained but excluded from the steady-state step-time statistics "
        "(flops_per_s_steady); Eq. 6's per-epoch FLOPS counts them.",
        ge=0,
    )
    eval_every_epochs: int = _field(
        0,
        "Evaluate members and ensemble on the held-out set every K epochs during training, "
        "timed apart from training (the record's quality.curve and time to target). 0: only "
        "once, at the end.",
        ge=0,
        note="0: only at the end",
    )
    stop_at_target: bool = _field(
        False,
        "End training at the first evaluation (--eval_every_epochs) where the ensemble reaches "
        "the target quality; the run is complete, its quality that evaluation's.",
    )

    def validate(self) -> None:
        super().validate()
        _require(
            self.epochs > 0 or self.steps > 0,
            f"--epochs={self.epochs}, --steps={self.steps}: expected epochs > 0 or steps > 0",
        )
        _require(
            not self.stop_at_target or self.eval_every_epochs > 0,
            "--stop_at_target: needs --eval_every_epochs > 0 (without it the only evaluation is "
            "the last one)",
        )


@dataclasses.dataclass(frozen=True)
class ResultsConfig(Checked):
    results_dir: str = _field(
        "results",
        "Directory for JSON results records.",
        valid=bool,
        message="expected a directory path",
    )
    run_name: str = _field(
        "",
        "Run id, the record's file name (default: <mode>-<UTC time>-<pid>).",
        valid=_file_name_safe,
        message="expected a file-name-safe id (no '/')",
    )
    overwrite: bool = _field(
        False,
        "Replace this run id's earlier record, MLLOG, events and kept weights instead of "
        "refusing to start: only files this project wrote, told by their content; a directory "
        "or another file under those names is refused either way.",
    )
    target_quality: float | None = _field(
        None,
        "Target quality for VFLOPS. auto: the official target of (workload, model, data set), "
        "e.g. 0.763 for ResNet-50 on imagenet2012; any other run must set it.",
        gt=0,
        le=1,
        auto=0.0,
        note="auto: the official target",
    )
    quality_exponent: float | None = _field(
        None,
        "n of the VFLOPS penalty (Eq. 8). auto: the workload's (5 for image classification); "
        "0 means 0 (no penalty).",
        ge=0,
        auto=-1.0,
        note="auto: the workload's n",
    )
    # Applied by flops/crosscheck.py: choose_flops.
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
    # Set by python -m hpcai_jax.sweep (hpcai_jax/sweep_plan.py); the record's sweep_plan.
    sweep_plan: str = _field(
        "",
        "The sweep plan this run belongs to, <experiment>:<smoke|full>:<digest>, then the run's "
        "place in it, :<point>:<seed index>, which python -m hpcai_jax.sweep gives each of its "
        "runs and reads back from its record before taking the run as done. Empty: not a "
        "sweep's run.",
        valid=_sweep_plan,
        message="expected <experiment>:<smoke|full>:<16 hex digits>[:<point>:<seed index>]",
    )
    stream_record: str = _field(
        "",
        "A STREAM record (--mode=stream) whose Triad bandwidth per device is the roofline's "
        "memory roof. Empty: a short Triad on every device at once is measured at start.",
    )
    # Written by hpcai_jax/run/observe.py (docs/observe.md).
    tensorboard: bool = _field(
        True,
        "Write TensorBoard curves while a training run goes (process 0): per step loss and "
        "examples/s, per evaluation the members' and ensemble's quality (and the out-of-bag "
        "estimate at the end), per epoch Eq. 6 FLOPS. --notensorboard: none.",
    )
    tensorboard_dir: str = _field(
        "",
        "TensorBoard's log directory; a run writes its events to <dir>/<run_id>, so that one "
        "`tensorboard --logdir` compares runs. Empty: <results_dir>/tensorboard.",
    )
    profile_steps: str = _field(
        "",
        "A:B: a jax.profiler trace of training steps A to B-1 (1 <= A < B), written to "
        "<results_dir>/<run_id>.profile and named in the record; a profiled run is open "
        "(docs/observe.md). Empty: no trace.",
        allow=("",),
        valid=_step_range,
        message="expected A:B with 1 <= A < B, e.g. 5:8",
    )
    profile_all_processes: bool = _field(
        True,
        "With --profile_steps, every process writes its own trace; "
        "--noprofile_all_processes: process 0 only.",
    )
    # Kept by hpcai_jax/run/kept_weights.py; re-evaluated by `submission check --reevaluate`.
    keep_weights: bool = _field(
        True,
        "A complete training run keeps its members' final parameters and model state (in the "
        "final checkpoint under --checkpoint_dir, else in <results_dir>/<run_id>.weights) and "
        "logs their digest, so that a reviewer can evaluate them again (docs/submission.md). "
        "--nokeep_weights for throughput runs.",
    )

    @property
    def profile_range(self) -> tuple[int, int] | None:
        """--profile_steps as (A, B), steps A to B-1; None without it."""
        if not self.profile_steps:
            return None
        first, last = self.profile_steps.split(":")
        return int(first), int(last)


@dataclasses.dataclass(frozen=True)
class ReliabilityConfig(Checked):
    """Checkpoints (orbax), resume, and what to do when a member diverges."""

    checkpoint_dir: str = _field(
        "",
        "Orbax checkpoint directory (empty: no checkpoints); a run started with an existing one "
        "resumes from it.",
    )
    checkpoint_every: str = _field(
        "0",
        "Steps between checkpoints (0: only at the end and on preemption), or auto: the "
        "Young/Daly interval from a save measured early in the run and --mtbf_hours "
        "(docs/reliability.md).",
        valid=lambda v: v == "auto" or str(v).isdigit(),
        message="expected a number of steps >= 0, or auto",
    )
    mtbf_hours: float | None = _field(
        None,
        "The job's mean time between failures, for --checkpoint_every=auto (auto: from the "
        "device count at 2e-5 interruptions per device-hour, docs/reliability.md).",
        gt=0,
        auto=-1.0,
        unit="hours",
        note="or auto to derive it from the device count",
    )
    keep_checkpoints: int = _field(2, "Checkpoints kept.", ge=1)
    resume_members: str = _field(
        "all",
        "A resume on fewer devices than its checkpoint's members need: all refuses it (Eq. 5); "
        "fit goes on with the largest M' that fits, dropping members M'..M-1 "
        "(docs/reliability.md).",
        choices=RESUME_MEMBERS,
    )
    on_divergence: str = _field(
        "stop",
        "A member with a non-finite loss or parameter: stop the run (record marked invalid), or "
        "prune it from the ensemble and go on.",
        choices=ON_DIVERGENCE,
    )
    divergence_check_every: int | None = _field(
        None,
        "Steps between host checks of the on-device divergence flags (auto: --log_every).",
        ge=1,
        auto=0,
    )
    watchdog_factor: float = _field(
        100.0,
        "Hang watchdog: a step, or a wait for the other processes, longer than this many "
        "median steps (and than --watchdog_min_s) ends the process with the hung exit code.",
        gt=1,
    )
    watchdog_min_s: float = _field(
        600.0,
        "Hang watchdog: the shortest wait it ends (seconds; leaves stalls of a few seconds and "
        "slow first steps alone), and the longest a checkpoint save or one eval batch may take.",
        gt=0,
        unit="s",
    )
    inject_nan: str = _field(
        "",
        "Test hook: MEMBER@STEP sets that member's parameters to NaN before that step.",
        allow=("",),
        valid=_member_at_step,
        message="expected MEMBER@STEP, e.g. 1@3",
    )

    @property
    def checkpoint_auto(self) -> bool:
        return self.checkpoint_every == "auto"

    @property
    def checkpoint_steps(self) -> int:
        """Steps between saves; 0 under auto until the run has measured a save."""
        return 0 if self.checkpoint_auto else int(self.checkpoint_every)

    @property
    def nan_injection(self) -> tuple[int, int] | None:
        if not self.inject_nan:
            return None
        member, step = self.inject_nan.split("@")
        return int(member), int(step)


@dataclasses.dataclass(frozen=True)
class CheckRecordConfig(Checked):
    """The one setting of the node check that a training run reads: the record whose measured
    member strategy --member_strategy=auto takes (engine/member_map.py). The node check's own
    settings extend it (`check_config.py`)."""

    record: str = _field(
        "",
        "A --mode=check record: --member_strategy=auto takes the strategy it measured on this "
        "backend. Empty: the per-backend default.",
        flag="check_record",
    )


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
    check: CheckRecordConfig = CheckRecordConfig()

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

    def parts(self) -> tuple:
        """The sections whose own rules `validate` applies (a composed configuration adds its
        modes': settings.Settings)."""
        return (
            self.mesh,
            self.data,
            self.model,
            self.optim,
            self.train,
            self.results,
            self.reliability,
            self.check,
        )

    def validate(self) -> RunConfig:
        """Each part's declared checks and own rules, then the rules between parts."""
        fields.check(self)
        for part in self.parts():
            fields.check_finite(part)
        for part in self.parts():
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
        if self.mode == "train":
            self._training_rules()
        if self.scored:
            self.quality_target()
        return self

    def _training_rules(self) -> None:
        """Rules between a training run's flags that the run would otherwise meet late (the
        profile window past the last step) or never say (a warm-up longer than the run,
        checkpoints with nowhere to go)."""
        every = self.reliability.checkpoint_every
        _require(
            every == "0" or bool(self.reliability.checkpoint_dir),
            f"--checkpoint_every={every}: needs --checkpoint_dir (without it no checkpoint is "
            "written)",
        )
        window, steps = self.results.profile_range, self.train.steps
        _require(
            not (window and steps and window[1] > steps),
            f"--profile_steps={self.results.profile_steps}: the run has {steps} steps; B may be "
            f"at most {steps}",
        )
        warmup, epochs = self.optim.warmup_epochs, self.train.epochs
        _require(
            steps > 0 or warmup <= epochs,
            f"--warmup_epochs={warmup:g}: longer than the run's --epochs={epochs:g} (the "
            "learning rate would never reach its peak); expected at most --epochs",
        )

    def to_dict(self) -> dict:
        return fields.as_dict(self)
