"""The training run's record (`--mode=train`), section by section; `run/record.py` builds it.
docs/record.md lists every field (generated from these), docs/score.md says how the figures are
computed."""

from __future__ import annotations

import re

from hpcai_jax.records.envelope import Record
from hpcai_jax.records.fields import field
from hpcai_jax.records.schema import section


@section
class Submission:
    division: str = field("closed or open, by `hpcai_jax/rules.py` (docs/score.md §10)")
    violations: list[str] = field(
        "one line per closed-division rule the run breaks, naming the flag; empty when closed"
    )


@section
class Mesh:
    shape: dict[str, int] = field(
        "devices along each mesh axis: ensemble (M / members_per_device), data (P_degree), "
        "model (P_model)",
        "devices",
    )
    ensemble_size: int = field("M, the members of the bagged ensemble", "members")
    members_per_device: int = field("members sharing one device group", "members")
    parallel_degree: int = field("P_degree: data-parallel devices of one member", "devices")
    model_parallel: int = field(
        "P_model: devices splitting one member's layers (1 without `--model_parallel`)", "devices"
    )
    pipeline_stages: int = field("pipeline stages (always 1: pipelining is refused)")
    devices_per_member: int = field("P_degree × P_model", "devices")
    num_devices: int = field(
        "Sys_scale, the devices of the mesh: M / members_per_device × P_degree × P_model (Eq. 5)",
        "devices",
    )
    member_strategy: str = field(
        "how a device runs its members: unroll (one program per member) or vmap (batched)"
    )
    member_strategy_why: str = field(
        "why that strategy and mapping: the flags, a check record, an acceptance or the default"
    )
    member_mapping: str | None = field(
        "how the device's members ran, resolved: unroll, or the --member_map form under vmap "
        "(scan, conv_loop, batched, batched_grouped, grouped; docs/members.md), with /k where "
        "--member_group batched k at a time; absent in older records",
        omit_none=True,
    )


@section
class Precision:
    dtype: str = field("the compute dtype (`--dtype`): float32, bfloat16, float16 or int8")
    master_weights: str = field("the dtype parameters and optimizer state are kept in")
    loss_scaling: str | None = field("dynamic for float16; None otherwise")
    quantized: str | None = field("what int8 quantizes and how (qwix); None for other dtypes")
    allreduce: str = field(
        "the gradient reduction's algorithm over `data`: flat, hierarchical or 2d_torus "
        "(docs/score.md §7)"
    )
    grad_allreduce_dtype: str = field("the element type gradients are reduced in")
    inner_group_size: int = field(
        "devices of the first stage's groups (P_degree when flat)", "devices"
    )
    outer_group_size: int = field("groups the second stage reduces across (1 when flat)", "groups")


@section
class Data:
    dataset: str = field("the data set (`--dataset`)")
    synthetic: bool = field("whether the data is generated (no quality then)")
    train_examples: int = field("examples of the training split loaded", "examples")
    eval_examples: int = field(
        "held-out examples evaluated at the end (0 when there was no evaluation)", "examples"
    )
    bootstrap: str = field(
        "how each member's sample is drawn: with_replacement, poisson or none (docs/score.md §1)"
    )
    steps_per_epoch: int = field("steps of one epoch over the loaded training split", "steps")
    epochs_trained: float = field("steps done / steps_per_epoch", "epochs")
    distinct_fraction: list[float] = field(
        "per member, the share of the training set its bootstrap sample holds (≈ 0.632 with "
        "replacement), from the sampler of the first process training it",
        "fraction",
    )
    skipped_examples: dict[str, list[int]] | None = field(
        "split → indices of records that did not decode and were replaced under "
        "`--bad_example_policy=skip`, every process's; None in records older than it"
    )


@section
class StepTimes:
    count: int = field("timed steps", "steps")
    min_s: float = field("the fastest timed step", "s")
    median_s: float = field("the median timed step", "s")
    max_s: float = field("the slowest timed step", "s")
    mean_s: float = field("the mean timed step", "s")
    total_s: float = field("all timed steps together", "s")


@section
class Startup:
    python_s: float | None = field(
        "the interpreter's start and imports until main (Linux's process start time)", "s"
    )
    distributed_s: float | None = field("jax.distributed's start: joining every process", "s")
    imports_s: float | None = field("importing the mode (JAX and the engine)", "s")
    setup_s: float | None = field("the mesh, the data sets opened, the steps built", "s")
    state_s: float | None = field("the members' initial state, or a checkpoint's restore", "s")
    compile_s: float | None = field("the first compile of the training step", "s")
    crosscheck_s: float | None = field(
        "XLA's FLOP count of the compiled step and its cross-check against the analytic one", "s"
    )
    traffic_s: float | None = field(
        "the devices' nodes (a collective) and the step's collectives read from its HLO", "s"
    )
    peaks_s: float | None = field(
        "the matmul peak measured on every local device at once (once per process)", "s"
    )
    stream_s: float | None = field(
        "STREAM's Triad measured at start on every device (once per process); about 0 under "
        "--stream_record, whose figure is read before the setup",
        "s",
    )
    barrier_s: float | None = field("waiting for every process before the first step", "s")
    counting_s: float | None = field(
        "tracing the step with its loops over members written out, for XLA's FLOP count (0 "
        "where no member is mapped); absent in older records",
        "s",
        omit_none=True,
    )


@section
class ProcessStepTimes:
    median_s: float | None = field("the process's median timed step, on its own clock", "s")
    max_s: float | None = field("its slowest timed step", "s")


@section
class ProcessTiming:
    process_index: int = field("the JAX process")
    members: list[int] = field("the members whose devices it drives")
    step_s: ProcessStepTimes = field("its timed steps: members never wait for another's")
    agree_s: float = field(
        "its waits in the periodic agreements of all processes (kept out of step times)", "s"
    )
    startup_s: float = field("its start-up, every phase of `timing.startup` on it", "s")
    epoch_wall_s: list[float] = field("each completed epoch's wall time on its clock", "s")


@section
class Timing:
    compile_s: float = field("compiling the training step, summed over segments", "s")
    steps: int = field("steps completed", "steps")
    planned_steps: int = field("steps the configuration asked for", "steps")
    timed_steps: int = field(
        "steps timed: all but `--timing_warmup_steps` per segment, without checkpoint saves and "
        "evaluations",
        "steps",
    )
    step_s: StepTimes = field("statistics of the timed steps' durations")
    train_wall_s: float = field("the timed steps' wall time (their sum)", "s")
    data_wait_s: float = field("time the loop waited for input batches", "s")
    eval_s: float = field("every held-out evaluation, during training and at the end", "s")
    checkpoint_s: float = field("the blocking part of checkpoint saves", "s")
    total_wall_s: float = field("from the run's start to the record, this segment", "s")
    startup: Startup | None = field(
        "process 0's start-up by phase (docs/scale.md); None in older records"
    )
    per_process: list[ProcessTiming] | None = field(
        "one entry per process, in process order (docs/scale.md); None in older records"
    )


@section
class Resume:
    at_step: int = field("the step the segment resumed at", "steps")
    utc: str = field("when it resumed (UTC, ISO 8601)")
    mesh: dict[str, int] = field(
        "the layout it resumed on: ensemble_size, members_per_device, parallel_degree, "
        "num_devices, model_parallel (docs/reliability.md)"
    )


@section
class DroppedMember:
    member: int = field("the member's index in the checkpoint's ensemble")
    step: int = field("the step it stopped at: its member-steps before it count", "steps")
    why: str = field("why: the resume that could not hold it")


@section
class Members:
    dropped: list[DroppedMember] = field(
        "members a `--resume_members=fit` resume left behind (docs/reliability.md); empty when "
        "every member trained to the end"
    )


@section
class Reliability:
    checkpoint_every_steps: int | None = field(
        "steps between this segment's checkpoints; None: at the end and on preemption only",
        "steps",
    )
    checkpoint_every_why: str = field(
        "the flag, or under `--checkpoint_every=auto` the Young/Daly arithmetic with the measured "
        "save and step times (docs/reliability.md)"
    )
    mtbf_hours: float | None = field(
        "the job's mean time between failures the auto interval used; None without auto", "h"
    )


@section
class Divergence:
    policy: str = field(
        "`--on_divergence`: stop (the run is invalid) or prune (the member is dropped)"
    )
    nonfinite_first_step: dict[str, int] = field(
        "member (as a string) → its first step with a non-finite loss or parameter", "steps"
    )
    pruned_members: list[int] = field("members pruned from the ensemble (prune only)")


@section
class Crosscheck:
    """telemetry/flop_count.FlopFigures: the two counts of the step and which one FLOPS uses."""

    model: str = field("the model counted")
    input_shape: list[int] = field("one example's shape")
    batch_size: int = field("examples per member per step", "examples")
    ensemble_size: int = field("M", "members")
    analytic: dict = field(
        "the analytic counts per example and per step: Table 3 as written, Table 3 with 2·MAC "
        "(both × 3 for training) and the jaxpr walk under XLA's rules (docs/flops.md)",
        "FLOP",
    )
    xla_train_step_flops: float | None = field(
        "XLA's cost analysis of the compiled step, all devices; None where XLA gives none", "FLOP"
    )
    xla_over_analytic: float | None = field("XLA's count / the walk under XLA's rules")
    xla_over_table3: float | None = field("XLA's count / 3 × Table 3's forward")
    tolerance: float = field("the cross-check's tolerance on xla_over_analytic", "fraction")
    crosscheck_ok: bool | None = field(
        "XLA and the walk agree within the tolerance; None when XLA gave no figure"
    )
    train_step_flops: float = field(
        "the count FLOPS uses for one step of the whole ensemble (docs/score.md §4)", "FLOP"
    )
    train_step_flops_source: str = field("xla_cost_analysis or analytic")
    source_reason: str = field("why that source (`--flops_source` and the cross-check)")
    apc: float = field(
        "APC (Eq. 4): the whole ensemble's computation in one iteration, by the source", "FLOP"
    )
    apc_table3: float = field("APC by the paper's rule: 3 × Table 3's forward", "FLOP")
    notes: list[str] = field("what the counts could not see, one line each")
    scopes: dict = field(
        "named stages of the step counted apart (a detector's NMS, RoIAlign, ...): FLOPs per "
        "step under XLA's rules and share of the walk; counted, not excluded"
    )


@section
class Flops:
    per_step: float = field(
        "FLOPs of one step of the whole ensemble, the count FLOPS uses (= "
        "`flops.crosscheck.train_step_flops`)",
        "FLOP",
    )
    source: str = field("where per_step comes from: xla_cost_analysis or analytic")
    source_reason: str = field("why that source (docs/score.md §4)")
    crosscheck_ok: bool | None = field(
        "XLA's and the analytic count agree within ±10%; False is flagged in the summary"
    )
    xla_per_step: float | None = field("XLA's count of the step, all devices", "FLOP")
    xla_per_step_per_device: float | None = field("XLA's count of the step, one device", "FLOP")
    xla_note: str = field("why XLA gave no count, or empty")
    useful_member_steps: int = field(
        "timed member-steps of healthy members: what FLOPS counts (docs/score.md §5)",
        "member-steps",
    )
    timed_member_steps: int = field("timed steps × M", "member-steps")
    crosscheck: Crosscheck = field("the cross-check behind per_step (docs/flops.md)")


@section
class Epoch:
    index: int = field("the epoch, from 1, as MLLOG's epoch_num")
    first_step: int = field("its first step", "steps")
    steps: int = field("its steps", "steps")
    wall_s: float = field(
        "its wall time, run_start or the last epoch's end to its last step's completion, "
        "evaluations cut out (docs/score.md §5)",
        "s",
    )
    flops: float | None = field(
        "its training FLOPs: per_step / M × healthy member-steps; None for an invalid run",
        "FLOP",
    )
    flops_per_s: float | None = field("flops / wall_s", "FLOP/s")


@section
class Metrics:
    flops_per_s: float | None = field(
        "FLOPS, Eq. 6: Σ `epochs[].flops` / Σ `epochs[].wall_s`; None without a completed epoch "
        "or for an invalid run (docs/score.md §5)",
        "FLOP/s",
    )
    flops_per_s_why: str | None = field("why there is no FLOPS figure; None when there is one")
    vflops_per_s: float | None = field(
        "VFLOPS, Eq. 7: flops_per_s × penalty (docs/score.md §3)", "FLOP/s"
    )
    vflops_per_s_why: str | None = field("why there is no VFLOPS figure; None when there is one")
    flops_per_s_steady: float | None = field(
        "per_step / M × useful member-steps / train_wall_s: the rate over the timed steps",
        "FLOP/s",
    )
    vflops_per_s_steady: float | None = field("flops_per_s_steady × penalty", "FLOP/s")
    penalty: float | None = field(
        "(ensemble quality / target)^n, Eq. 8; None where undefined or unscored"
    )
    images_per_s: float | None = field(
        "every member's examples over the timed steps' wall time", "examples/s"
    )
    useful_images_per_s: float | None = field(
        "healthy members' examples over the timed steps' wall time", "examples/s"
    )
    images_per_s_per_member: float | None = field(
        "one member's examples over the timed steps' wall time", "examples/s"
    )
    flops_per_s_per_device: float | None = field(
        "flops_per_s_steady / Sys_scale (MFU and the roofline use it)", "FLOP/s"
    )
    mfu_datasheet: float | None = field(
        "flops_per_s_per_device / the vendor's dense peak; None where unknown (docs/score.md §6)",
        "fraction",
    )
    mfu_measured: float | None = field(
        "flops_per_s_per_device / the matmul peak measured at start", "fraction"
    )


@section
class PeakFlops:
    device_kind: str = field("the device the peaks are of")
    dtype: str = field("the dtype they are for")
    datasheet_per_device: float | None = field(
        "the vendor's dense peak (`hpcai_jax/flops/peaks.py`); None where unknown", "FLOP/s"
    )
    measured_per_device: float | None = field(
        "a large matmul's rate per device, all of the process's devices at once", "FLOP/s"
    )
    measured_aggregate: float | None = field("the same, all of the process's devices", "FLOP/s")
    measured_method: str | None = field("how it was measured")
    bandwidth_per_device: float | None = field(
        "STREAM Triad's bandwidth per device (measured at start or `--stream_record`)", "B/s"
    )
    bandwidth_source: str | None = field("where the bandwidth comes from")


@section
class Memory:
    argument_bytes: int = field("the compiled step's arguments, per device", "B")
    output_bytes: int = field("its outputs", "B")
    alias_bytes: int = field("output bytes aliased to (donated) arguments", "B")
    temp_bytes: int = field("its temporaries", "B")
    generated_code_bytes: int = field("its generated code", "B")


@section
class LinkBytes:
    intra_node: int = field("training wire bytes that stay inside a node", "B")
    inter_node: int = field("training wire bytes that cross the network", "B")


@section
class Comm:
    payload_bytes: dict[str, int] = field(
        "mesh axis → each training collective's result per device and step, in the element "
        "type the backend runs it in (`bytes_per_step` in older records; docs/score.md §8)",
        "B",
    )
    wire_bytes: dict[str, int] | None = field(
        "mesh axis → bytes a device sends under ring algorithms; None in records older than it",
        "B",
    )
    metrics_payload_bytes: dict[str, int] | None = field(
        "mesh axis → payload of the step's reporting collectives (input flags over `data`)", "B"
    )
    metrics_wire_bytes: dict[str, int] | None = field("the same, sent under rings", "B")
    link_bytes: LinkBytes | None = field(
        "the training wire bytes split by where the ring's hops run (mean over devices)"
    )
    nodes: int | None = field("nodes the mesh's devices sit on")
    collectives: int | None = field("collectives in the compiled step")
    by_collective: dict[str, dict[str, int]] | None = field(
        'mesh axis → "collective element-type" → payload bytes', "B"
    )
    wire_by_collective: dict[str, dict[str, int]] | None = field(
        'mesh axis → "collective element-type" → wire bytes', "B"
    )
    unit: str | None = field("what the figures are per")
    model: str | None = field("the algorithm model behind the wire and link figures")


@section
class Roofline:
    peak_flops_per_s: float | None = field("the measured matmul peak per device", "FLOP/s")
    bandwidth_bytes_per_s: float = field("STREAM Triad bandwidth per device", "B/s")
    bandwidth_source: str = field("where the bandwidth comes from")
    ridge_point_flops_per_byte: float | None = field("peak / bandwidth", "FLOP/B")
    arithmetic_intensity_flops_per_byte: float | None = field(
        "XLA's FLOPs / bytes accessed of the compiled step, per device", "FLOP/B"
    )
    attainable_flops_per_s: float | None = field("min(peak, bandwidth × intensity)", "FLOP/s")
    achieved_flops_per_s: float | None = field("`metrics.flops_per_s_per_device`", "FLOP/s")
    fraction_of_attainable: float | None = field("achieved / attainable", "fraction")
    bound: str | None = field("memory or compute: which roof is lower at the intensity")
    per: str = field("what the figures are per")


@section
class Energy:
    available: bool = field("whether the devices have an energy counter (NVML)")
    why: str | None = field("why there is no figure; present only when unavailable", omit_none=True)
    joules: float | None = field(
        "energy of every device over the timed steps, summed over processes", "J", omit_none=True
    )
    seconds: float | None = field("the time between the two readings", "s", omit_none=True)
    average_watts: float | None = field("joules / seconds", "W", omit_none=True)
    flops_per_watt: float | None = field(
        "`metrics.flops_per_s_steady` / average_watts", "FLOP/J", omit_none=True
    )
    source: str | None = field("the counter read", omit_none=True)

    def omitted(self) -> tuple[str, ...]:
        """An unavailable counter's record holds only `available` and `why`, as always."""
        if self.available:
            return ("why",)
        return ("joules", "seconds", "average_watts", "flops_per_watt", "source")


@section
class OutOfBag:
    quality: float | None = field(
        "the ensemble's quality on training examples scored only by members that never saw them "
        "(docs/score.md §2); None when no example had a voter"
    )
    scored: int = field("examples at least one kept member never trained on", "examples")
    subset: int = field("training examples looked at (`--oob_examples`)", "examples")
    mean_voters: float = field("kept members voting on a scored example, on average", "members")
    why_none: str = field("why quality is None, or empty")


@section
class SubEnsemble:
    k: int = field("members in each sub-ensemble", "members")
    first: float | None = field("the quality of the ensemble of members 0…k-1")
    random_mean: float | None = field("the mean quality over the k-subsets of the members")
    random_sd: float | None = field(
        "their spread: the sample SD over random draws, the population's over every subset"
    )
    subsets: int = field("k-subsets the mean is over (with quality)")
    exhaustive: bool = field(
        "every k-subset, each once (C(M, k) ≤ the draws); else draws seeded by (seed, k)"
    )


@section
class Correct:
    examples: int = field("held-out examples, each one bit", "examples")
    order_sha256: str = field(
        "SHA-256 of the examples' keys (labels, int32 little-endian) in held-out order: two "
        "records' bits pair up when this and `examples` agree"
    )
    ensemble: str = field("the ensemble's verdicts: base64 of numpy.packbits, example 0 first")
    members: list[str] = field("each member's verdicts, packed the same way")


@section
class CurvePoint:
    epoch: float = field("epochs trained: step / steps_per_epoch", "epochs")
    step: int = field("the step evaluated after", "steps")
    wall_s: float = field("from run_start to the end of the evaluation (docs/score.md §11)", "s")
    ensemble: float = field("the ensemble's held-out quality")
    member_mean: float | None = field("the kept members' mean quality")
    members: list[float | None] = field("every member's quality")


@section
class Quality:
    metric: str = field("the workload's quality metric, e.g. top1_accuracy, map_iou50, r2")
    target: float | None = field("the target quality; None for an unscored run (synthetic data)")
    exponent: float | None = field("n of the penalty (quality / target)^n")
    target_is_official: bool | None = field(
        "the target is the official one and the run is closed (docs/score.md §3)"
    )
    exponent_is_official: bool | None = field("n is the workload's official exponent")
    members: list[float | None] | None = field(
        "each member's held-out quality, pruned members included"
    )
    kept_members: list[int] | None = field("members in the ensemble (not pruned)")
    member_mean: float | None = field("the kept members' mean quality")
    ensemble: float | None = field(
        "the bagged ensemble's held-out quality (mean of the kept members' predictions): what "
        "VFLOPS uses"
    )
    ensemble_members: int | None = field("members in the ensemble", "members")
    oob: OutOfBag | None = field("the out-of-bag estimate; None when not computed")
    details: dict | None = field(
        "the workload's further figures (a detector's mAP@[.5:.95], per-class AP), for the "
        "ensemble and each member; None where the workload has none"
    )
    sub_ensembles: list[SubEnsemble] | None = field(
        "per k = 1…M, sub-ensembles of this run's members at the final evaluation, each the mean "
        "of its kept members' predictions as the ensemble's is (docs/score.md §2); None for a "
        "detector, above 32 members, or without a held-out set (then left out)",
        omit_none=True,
    )
    correct: Correct | None = field(
        "each member's and the ensemble's right/wrong per held-out example at the final "
        "evaluation, for paired tests (`hpcai_jax/report/paired.py`); None where the workload "
        "has no per-example verdict (regression, detection; then left out)",
        omit_none=True,
    )
    curve: list[CurvePoint] = field(
        "one point per held-out evaluation (`--eval_every_epochs`, and the last one)"
    )
    stopped_at_target: bool | None = field("`--stop_at_target` ended the run at the target")


@section
class FinalStep:
    final_loss: list[float] | None = field("each member's training loss at the last step")
    final_metrics: dict[str, list[float]] | None = field(
        "the workload's training metrics at the last step, per member"
    )
    skipped_steps: list[int] | None = field(
        "per member, steps skipped on a float16 overflow; None without loss scaling", "steps"
    )


@section
class TensorBoard:
    dir: str = field("the run's TensorBoard event directory (`--tensorboard_dir`/<run_id>)")
    scalars_written: int = field("scalars handed to the file system", "scalars")
    scalars_lost: int = field("scalars not written once writing failed", "scalars")
    lost: str | None = field("why writing stopped (a read-only or full directory); None when not")


@section
class Profile:
    steps: list[int] = field("[A, B]: the traced training steps A to B-1 (`--profile_steps`)")
    traced: bool = field("this process wrote a trace (`--noprofile_all_processes`: process 0 only)")
    dir: str | None = field("the process's trace directory, beside the record; None untraced")
    files: list[str] = field("the files of the trace, relative to `dir`")
    perfetto_trace: str | None = field(
        "the Perfetto-readable trace (`.trace.json.gz`, relative to `dir`) if the JAX made one"
    )
    aside_s: float = field(
        "starting and writing the trace: in no step time and no Eq. 6 epoch (the profiled steps "
        "themselves are, so a profiled run is open)",
        "s",
    )
    lost: str | None = field("why the trace is missing or partial; None when it is whole")


@section
class Observe:
    tensorboard: TensorBoard | None = field("the TensorBoard curves; None under --notensorboard")
    profile: Profile | None = field("the profiler trace; None without `--profile_steps`")


# A sweep plan's fingerprint as --sweep_plan gives it: <experiment>:<smoke|full>:<16 hex digits>,
# then the run's place in the plan, :<point label>:<seed index> (older sweeps left it out).
SWEEP_PLAN = re.compile(
    r"(?P<experiment>[a-z_]+):(?P<size>smoke|full):(?P<digest>[0-9a-f]{16})"
    r"(?::(?P<point>[A-Za-z0-9._-]+):(?P<seed_index>[0-9]+))?"
)
SWEEP_PLAN_FORM = "<experiment>:<smoke|full>:<16 hex digits>[:<point>:<seed index>]"


@section
class SweepPlan:
    experiment: str = field("the sweep's --experiment: paper, scalability or tradeoff")
    size: str = field("full, or smoke (`--smoke`: the plan at toy size)")
    digest: str = field(
        "the first 16 hex digits of the SHA-256 of the flags that decide the plan's results "
        "(`hpcai_jax/sweep_plan.py`)"
    )
    point: str | None = field(
        "the label of the plan's point the run belongs to (e.g. fig7-M2-P4), which the report "
        "reads instead of the run id; None in records of sweeps before it",
        omit_none=True,
    )
    seed_index: int | None = field(
        "which of its point's seeds the run is (0, 1, ...): runs of two points pair by it; None "
        "in records of sweeps before it",
        omit_none=True,
    )

    def __str__(self) -> str:
        """The plan's fingerprint alone: every run of one plan has the same."""
        return f"{self.experiment}:{self.size}:{self.digest}"

    @classmethod
    def parse(cls, text: str) -> SweepPlan | None:
        """The plan `--sweep_plan` names (None for ''); ValueError for any other form."""
        if not text:
            return None
        match = SWEEP_PLAN.fullmatch(text)
        if not match:
            raise ValueError(f"expected {SWEEP_PLAN_FORM}, got {text!r}")
        found = match.groupdict()
        index = found.pop("seed_index")
        return cls(**found, seed_index=None if index is None else int(index))


@section
class TrainRecord(Record):
    submission: Submission = field("the division the run qualifies for (docs/score.md §10)")
    mllog: str | None = field("the absolute path of the run's MLLOG (`--mllog`), or None")
    mesh: Mesh = field("the ensemble's mesh and how members are placed (Eq. 5)")
    precision: Precision = field(
        "Table 2's precision and communication options, as the compiled step runs them"
    )
    data: Data = field("the data the members trained on and how it was sampled")
    timing: Timing = field("where the run's time went")
    resumes: list[Resume] = field("one entry per resumed segment (docs/reliability.md)")
    divergence: Divergence = field("members that went non-finite and what was done")
    members: Members | None = field(
        "what happened to whole members; None in records written before it"
    )
    reliability: Reliability | None = field(
        "how often the run saved checkpoints, and why; None in records written before it"
    )
    flops: Flops = field("the step's FLOPs and the cross-check of its two counts")
    epochs: list[Epoch] = field("every completed epoch: what Eq. 6 is computed from")
    metrics: Metrics = field("the headline figures (docs/score.md §5, §6)")
    peak_flops: PeakFlops = field("the devices' peaks measured at the run's start")
    memory_per_device: Memory | None = field(
        "the compiled step's memory per device (XLA's memory analysis); `{}` where the backend "
        "gives none",
        none_as={},
    )
    comm: Comm | None = field(
        "the compiled step's collectives per device and step, read from its optimized HLO; "
        "None where not counted"
    )
    roofline: Roofline | None = field(
        "the step on its device's roofline; None without a bandwidth figure"
    )
    energy: Energy = field("energy over the timed steps, where the devices count it")
    quality: Quality = field("members' and ensemble's quality, targets and the curve")
    time_to_target_s: float | None = field(
        "from run_start to the end of the first evaluation that reached the target; None "
        "otherwise (docs/score.md §11)",
        "s",
    )
    time_to_target_why: str | None = field("why there is no time to target; None when there is")
    train: FinalStep = field("the last step's training figures")
    observe: Observe | None = field(
        "what was written to look inside the run (docs/observe.md); None in records written "
        "before it"
    )
    sweep_plan: SweepPlan | None = field(
        "the sweep plan that ran it (`--sweep_plan`, given by `hpcai_jax/sweep.py`): a rerun of "
        "the plan takes the record as done only under the same fingerprint; left out outside a "
        "sweep",
        omit_none=True,
    )
