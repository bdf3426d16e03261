"""The training run's record (`records.TrainRecord`; docs/record.md lists its fields), built
section by section from what the run measured (its console summary: run/summary.py). Every figure is
computed by `metrics` (docs/score.md); this module only gathers them."""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from hpcai_jax import metrics, records, results, rules
from hpcai_jax.engine.evaluate import EnsembleQuality
from hpcai_jax.engine.setup import RunSetup
from hpcai_jax.engine.step import StepMetrics
from hpcai_jax.flops.crosscheck import FlopFigures
from hpcai_jax.flops.roofline import roofline
from hpcai_jax.records import Status, train
from hpcai_jax.run import clock, evaluation, member_figures, startup
from hpcai_jax.run.checkpoint_interval import Interval
from hpcai_jax.run.clock import StepTimes
from hpcai_jax.run.measured_step import MeasuredStep
from hpcai_jax.run.progress import Progress, skipped_examples
from hpcai_jax.telemetry.comm import CommVolume
from hpcai_jax.telemetry.energy import EnergyReading, energy_record
from hpcai_jax.xla_cost import XlaCost


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """What a training run's record is built from, gathered by the trainer at its end.

    `status`: complete | partial (preempted; resumable) | invalid (diverged: no FLOPS figure).
    `step`: the compiled step's measurements; its `flops` (flops/crosscheck.py) hold the count
    FLOPS uses, with its source and why beside it, its `peaks` the per-device peak FLOP/s."""

    setup: RunSetup
    progress: Progress
    step: MeasuredStep
    status: str
    quality: EnsembleQuality | None
    last_metrics: StepMetrics | None
    total_wall_s: float
    reason: str = ""
    stopped_at_target: bool = False
    energy: tuple[EnergyReading | None, EnergyReading] | None = None
    per_process: list[train.ProcessTiming] | None = None
    interval: Interval | None = None
    observe: train.Observe | None = None


def run_figures(run_clock: clock.RunClock, progress: Progress, setup) -> tuple:
    """(the members' last figures, every process's timing): what each process brings to the
    record at the run's end (every process calls it), the epochs then set to last as long as
    the slowest process took (`clock.take_slowest_epochs`)."""
    last = run_clock.last_metrics
    final = None if last is None else member_figures.gather_tree(last)
    timings = clock.per_process(progress, setup.mesh, setup.layout.members_per_device)
    clock.take_slowest_epochs(progress, timings)
    return final, timings


def train_record(end: RunEnd) -> records.TrainRecord:
    """The record, section by section (docs/record.md)."""
    setup, progress, status, quality = end.setup, end.progress, end.status, end.quality
    cost, cross, peaks = end.step.cost, end.step.flops, end.step.peaks
    config, m = setup.config, setup.layout.ensemble_size
    valid = status != Status.INVALID
    per_member_step = cross.train_step_flops / m if cross.train_step_flops else None
    epochs = epochs_of(progress, per_member_step if valid else None, m)
    target = config.quality_target() if config.scored else None
    skipped = skipped_examples(setup, progress)
    submission = rules.of_setup(setup, skipped, len(progress.dropped))
    figures = _metrics(setup, progress, epochs, status, per_member_step, quality, target, peaks)
    to_target, to_target_why = evaluation.time_to_target(
        progress.curve, target.target if target else None, progress.resumes, status
    )
    return results.envelope(
        "train",
        progress.run_id,
        status,
        setup.recorded_config,
        end.reason,
        # The division a ranking reads first: closed, or open with one line per broken rule.
        submission=train.Submission(
            division=submission.division, violations=list(submission.violations)
        ),
        mllog=os.path.abspath(config.results.mllog) if config.results.mllog else None,
        mesh=_mesh(setup),
        precision=_precision(setup),
        data=_data(setup, progress, quality, skipped),
        timing=_timing(setup, progress, progress.eval_s, end.total_wall_s, end.per_process),
        resumes=[
            train.Resume(at_step=r["at_step"], utc=r["utc"], mesh=r.get("mesh", {}))
            for r in progress.resumes
        ],
        divergence=_divergence(config, progress),
        members=train.Members(dropped=[train.DroppedMember(**d) for d in progress.dropped]),
        reliability=_reliability(end.interval),
        flops=_flops(cost, cross, progress, m),
        # Eq. 6 per epoch (docs/score.md §5): what `metrics.flops_per_s` is computed from.
        epochs=epochs,
        metrics=figures,
        peak_flops=_peak_flops(peaks),
        memory_per_device=train.Memory(**end.step.memory) if end.step.memory else None,
        comm=_comm(end.step.comm),
        roofline=_roofline(cost, peaks, figures.flops_per_s_per_device),
        energy=_energy(end.energy, figures.flops_per_s_steady),
        quality=_quality(setup, progress, quality, target, submission, end.stopped_at_target),
        time_to_target_s=to_target,
        time_to_target_why=to_target_why,
        train=_final_step(end.last_metrics),
        observe=end.observe,
        sweep_plan=train.SweepPlan.parse(config.results.sweep_plan),
    )


def _mesh(setup) -> train.Mesh:
    layout = setup.layout
    return train.Mesh(
        shape=dict(setup.mesh.shape),
        ensemble_size=layout.ensemble_size,
        members_per_device=layout.members_per_device,
        parallel_degree=layout.parallel_degree,
        model_parallel=layout.model_parallel,
        pipeline_stages=setup.config.mesh.pipeline_stages,
        devices_per_member=layout.devices_per_member,
        num_devices=layout.num_devices,
        member_strategy=setup.plan.mapping.strategy,
        member_strategy_why=setup.member_strategy_why,
        member_mapping=setup.plan.mapping.recorded,
    )


def _precision(setup) -> train.Precision:
    """Table 2's precision and communication options, as the compiled step runs them."""
    dtype, plan = setup.config.model.dtype, setup.plan.allreduce
    return train.Precision(
        dtype=dtype,
        master_weights="float32",
        loss_scaling="dynamic" if dtype == "float16" else None,
        quantized=(
            "convolutions and dense layers int8 x int8 -> int32, forward and backward "
            "(qwix, per-channel absmax scales); FLOPs are the same ops, counted as float"
            if dtype == "int8"
            else None
        ),
        **plan.to_dict(),  # allreduce, grad_allreduce_dtype, inner_ and outer_group_size
    )


def _data(setup, progress: Progress, quality, skipped: dict[str, list[int]]) -> train.Data:
    tc, sampler = setup.config.train, setup.sampler
    return train.Data(
        dataset=setup.config.data.dataset,
        synthetic=setup.datasets.synthetic,
        train_examples=sampler.num_examples,
        eval_examples=quality.examples if quality else 0,
        bootstrap=tc.bootstrap,
        steps_per_epoch=sampler.steps_per_epoch,
        epochs_trained=progress.step / sampler.steps_per_epoch,
        distinct_fraction=_distinct_fractions(setup),
        skipped_examples=skipped,
    )


def _timing(
    setup,
    progress: Progress,
    eval_s: float,
    total_wall_s: float,
    per_process: list[train.ProcessTiming] | None,
) -> train.Timing:
    return train.Timing(
        compile_s=float(sum(progress.compile_s)),
        steps=progress.step,
        planned_steps=setup.total_steps,
        timed_steps=len(progress.step_s),
        step_s=train.StepTimes(**dataclasses.asdict(StepTimes.of(progress.step_s))),
        train_wall_s=progress.train_wall_s,
        data_wait_s=progress.data_wait_s,
        eval_s=eval_s,
        checkpoint_s=progress.checkpoint_s,
        total_wall_s=total_wall_s,
        startup=train.Startup(**{f"{k}_s": v for k, v in startup.phases().items()}),
        per_process=per_process,
    )


def _reliability(interval: Interval | None) -> train.Reliability:
    interval = interval or Interval(None, "not recorded")
    return train.Reliability(
        checkpoint_every_steps=interval.steps,
        checkpoint_every_why=interval.why,
        mtbf_hours=interval.mtbf_hours,
    )


def _divergence(config, progress: Progress) -> train.Divergence:
    policy = config.reliability.on_divergence
    return train.Divergence(
        policy=policy,
        nonfinite_first_step={str(k): v for k, v in sorted(progress.diverged.items())},
        pruned_members=sorted(progress.diverged) if policy == "prune" else [],
    )


def _flops(cost: XlaCost, cross: FlopFigures, progress: Progress, m: int) -> train.Flops:
    return train.Flops(
        per_step=cross.train_step_flops,
        source=cross.train_step_flops_source,
        source_reason=cross.source_reason,
        crosscheck_ok=cross.crosscheck_ok,
        xla_per_step=cost.flops,
        xla_per_step_per_device=cost.flops_per_device,
        xla_note=cost.note,
        useful_member_steps=progress.useful_member_steps(m),
        timed_member_steps=progress.timed_member_steps(m),
        crosscheck=train.Crosscheck(**cross.to_dict()),
    )


def _metrics(
    setup,
    progress: Progress,
    epochs: list[train.Epoch],
    status: str,
    per_member_step: float | None,
    quality: EnsembleQuality | None,
    target,
    peaks: dict,
) -> train.Metrics:
    """The headline figures: Eq. 6 over the epochs, the steady rate over the timed steps, VFLOPS
    of both, throughput and MFU (docs/score.md §3, §5, §6)."""
    layout, b = setup.layout, setup.config.train.batch_size
    m, timed, wall = layout.ensemble_size, len(progress.step_s), progress.train_wall_s
    useful = progress.useful_member_steps(m)
    valid = status != Status.INVALID
    steady = metrics.per_second(per_member_step, useful, wall) if valid else None
    per_device = steady / layout.num_devices if steady else None
    counted = [e for e in epochs if e.flops is not None]
    flops = metrics.over_epochs([e.flops for e in counted], [e.wall_s for e in counted])
    achieved = quality.ensemble if quality else None

    def vflops(figure: float | None) -> float | None:
        return metrics.vflops_per_s(figure, achieved, target.target, target.exponent)

    return train.Metrics(
        flops_per_s=flops,
        flops_per_s_why=None if flops else _why_no_flops(status, progress, setup, epochs),
        vflops_per_s=vflops(flops) if target else None,
        vflops_per_s_why=(
            metrics.vflops_per_s_why(flops, achieved, target.target, target.exponent)
            if target
            else "not a scored run (no quality target)"
        ),
        # Over the timed steps: warm-up, checkpoint saves and evaluations left out.
        flops_per_s_steady=steady,
        vflops_per_s_steady=vflops(steady) if target else None,
        penalty=(
            metrics.penalty(achieved, target.target, target.exponent)
            if target and achieved is not None
            else None
        ),
        # Every member's images, and those of members still healthy (what FLOPS counts).
        images_per_s=metrics.per_second(b, timed * m, wall),
        useful_images_per_s=metrics.per_second(b, useful, wall),
        images_per_s_per_member=metrics.per_second(b, timed, wall),
        flops_per_s_per_device=per_device,
        mfu_datasheet=metrics.mfu(per_device, peaks.get("datasheet_per_device")),
        mfu_measured=metrics.mfu(per_device, peaks.get("measured_per_device")),
    )


def _peak_flops(peaks: dict) -> train.PeakFlops:
    """The peaks measured at start (flops/peaks.py); a figure not measured is None."""
    return train.PeakFlops(
        **{f.name: peaks.get(f.name) for f in dataclasses.fields(train.PeakFlops)}
    )


def _comm(comm: CommVolume | None) -> train.Comm | None:
    if comm is None:
        return None
    figures = comm.to_dict()
    return train.Comm(**{**figures, "link_bytes": train.LinkBytes(**figures["link_bytes"])})


def _roofline(cost: XlaCost, peaks: dict, per_device: float | None) -> train.Roofline | None:
    if not peaks.get("bandwidth_per_device"):
        return None
    return train.Roofline(
        **roofline(
            cost,
            peaks.get("measured_per_device"),
            peaks["bandwidth_per_device"],
            peaks["bandwidth_source"],
            per_device,
        )
    )


def _quality(
    setup,
    progress: Progress,
    quality: EnsembleQuality | None,
    target,
    submission: rules.Submission,
    stopped_at_target: bool,
) -> train.Quality:
    kept = [i for i in range(setup.layout.ensemble_size) if i not in progress.diverged]
    oob = quality.oob if quality else None
    return train.Quality(
        metric=setup.workload.metric,
        target=target.target if target else None,
        exponent=target.exponent if target else None,
        # Official only where the whole run is: a shrunk ImageNet run is not scored officially.
        target_is_official=(
            target.target_is_official and submission.division == rules.CLOSED if target else None
        ),
        exponent_is_official=target.exponent_is_official if target else None,
        members=quality.members if quality else None,
        kept_members=kept if quality else None,
        member_mean=quality.member_mean if quality else None,
        ensemble=quality.ensemble if quality else None,
        ensemble_members=len(kept) if quality else None,
        oob=train.OutOfBag(**oob.to_dict()) if oob else None,
        details=quality.details if quality else None,
        sub_ensembles=[train.SubEnsemble(**e) for e in quality.sub_ensembles]
        if quality and quality.sub_ensembles
        else None,
        correct=train.Correct(**quality.correct) if quality and quality.correct else None,
        curve=[train.CurvePoint(**point) for point in progress.curve],
        stopped_at_target=stopped_at_target,
    )


def _final_step(last_metrics) -> train.FinalStep:
    if last_metrics is None:
        return train.FinalStep(final_loss=None, final_metrics=None, skipped_steps=None)
    skipped = last_metrics.skipped
    return train.FinalStep(
        final_loss=np.asarray(last_metrics.loss).tolist(),
        final_metrics={k: np.asarray(v).tolist() for k, v in last_metrics.metrics.items()},
        # Per member: steps skipped on float16 overflow (None without loss scaling).
        skipped_steps=None if skipped is None else np.asarray(skipped).tolist(),
    )


def epochs_of(progress: Progress, per_member_step: float | None, m: int) -> list[train.Epoch]:
    """Each completed epoch with its training FLOPs (healthy member-steps only, as FLOPS counts)
    and its FLOPS; FLOPs are None where the step has no count or the run is invalid."""
    out = []
    for e in progress.epochs:
        first, steps = e["first_step"], e["steps"]
        useful = progress.healthy_member_steps(first, first + steps, m)
        out.append(
            train.Epoch(
                index=e["index"],
                first_step=first,
                steps=steps,
                wall_s=e["wall_s"],
                flops=per_member_step * useful if per_member_step else None,
                flops_per_s=metrics.per_second(per_member_step, useful, e["wall_s"]),
            )
        )
    return out


def _why_no_flops(status: str, progress: Progress, setup, epochs: list) -> str:
    if status == Status.INVALID:
        return "the run is invalid"
    if epochs:
        return "the training step has no FLOP count"
    return (
        f"no completed epoch ({progress.step} steps of {setup.sampler.steps_per_epoch} per "
        "epoch): Eq. 6 is per epoch; flops_per_s_steady is the steady-state figure"
    )


def _energy(readings, flops: float | None) -> train.Energy:
    if readings is None:
        return train.Energy(available=False, why="not measured")
    start, end = readings
    if start is None:
        return train.Energy(available=False, why="no timed step")
    return train.Energy(**energy_record(start, end, flops))


def _distinct_fractions(setup) -> list[float]:
    """Each member's distinct fraction as the first process that trains it derives it from its
    own sampler: a process whose samples differ from process 0's (another seed, another data set
    size) shows in the record instead of hiding behind process 0's figures. A collective."""
    owner = clock.owners(setup.mesh, setup.layout.members_per_device)
    me = jax.process_index()
    mine = {m: setup.sampler.distinct_fraction(m) for m, p in enumerate(owner) if p == me}
    return [float(v) for v in member_figures.gather_owned(mine, owner, me)]
