"""The training run's results record and its human-readable summary."""

from __future__ import annotations

import os

import jax
import numpy as np

from hpcai_jax import metrics, results, rules
from hpcai_jax.distributed import allgather
from hpcai_jax.engine.evaluate import EnsembleQuality
from hpcai_jax.flops.xla import XlaCost
from hpcai_jax.run import curve
from hpcai_jax.run.progress import Progress
from hpcai_jax.run.timing import StepTimes
from hpcai_jax.telemetry.comm import CommVolume
from hpcai_jax.telemetry.energy import EnergyReading, energy_record
from hpcai_jax.telemetry.flop_count import FlopFigures
from hpcai_jax.telemetry.roofline import roofline


def build(
    setup,
    progress: Progress,
    cost: XlaCost,
    cross: FlopFigures,
    peaks: dict,
    status: str,
    quality: EnsembleQuality | None,
    last_metrics,
    eval_s: float,
    total_wall_s: float,
    reason: str = "",
    *,
    memory: dict | None = None,
    comm: CommVolume | None = None,
    energy: tuple[EnergyReading | None, EnergyReading] | None = None,
    stopped_at_target: bool = False,
) -> dict:
    """status: complete | partial (preempted; resumable) | invalid (diverged: no FLOPS figure).

    `cross` is telemetry.flop_count.crosscheck's figures: train_step_flops is what FLOPS uses (the
    source and why are beside it). `peaks` holds the per-device peak FLOP/s figures. Every
    figure is computed by `metrics`; this function only gathers them.
    """
    config, layout, tc = setup.config, setup.layout, setup.config.train
    m, b = layout.ensemble_size, tc.batch_size
    timed = len(progress.step_s)
    wall = progress.train_wall_s
    valid = status != "invalid"
    useful = progress.useful_member_steps(m)
    step_flops = cross.train_step_flops
    per_member_step = step_flops / m if step_flops else None
    steady = metrics.per_second(per_member_step, useful, wall) if valid else None
    per_device = steady / layout.num_devices if steady else None
    epochs = _epochs(progress, per_member_step if valid else None, m)
    counted = [e for e in epochs if e["flops"] is not None]
    flops = metrics.over_epochs([e["flops"] for e in counted], [e["wall_s"] for e in counted])
    achieved = quality.ensemble if quality else None
    target = config.quality_target() if config.scored else None
    skipped = skipped_examples(setup, progress)
    submission = rules.of_setup(setup, skipped)
    kept = [i for i in range(m) if i not in progress.diverged]

    def vflops(figure: float | None) -> float | None:
        return metrics.vflops_per_s(figure, achieved, target.target, target.exponent)

    to_target, to_target_why = curve.time_to_target(
        progress.curve, target.target if target else None, progress.resumes, status
    )
    return results.envelope(
        "train",
        progress.run_id,
        status,
        config,
        reason,
        # The division a ranking reads first: closed, or open with one line per broken rule.
        submission=submission.to_dict(),
        mllog=os.path.abspath(config.results.mllog) if config.results.mllog else None,
        mesh={
            "shape": dict(setup.mesh.shape),
            "ensemble_size": m,
            "members_per_device": layout.members_per_device,
            "parallel_degree": layout.parallel_degree,
            "model_parallel": layout.model_parallel,
            "pipeline_stages": config.mesh.pipeline_stages,
            "devices_per_member": layout.devices_per_member,
            "num_devices": layout.num_devices,
            "member_strategy": setup.member_strategy,
            "member_strategy_why": setup.member_strategy_why,
        },
        # Table 2's precision and communication options, as the compiled step runs them.
        precision={
            "dtype": config.model.dtype,
            "master_weights": "float32",
            "loss_scaling": "dynamic" if config.model.dtype == "float16" else None,
            "quantized": (
                "convolutions and dense layers int8 x int8 -> int32, forward and backward "
                "(qwix, per-channel absmax scales); FLOPs are the same ops, counted as float"
                if config.model.dtype == "int8"
                else None
            ),
            **setup.allreduce.to_dict(),
        },
        data={
            "dataset": config.data.dataset,
            "synthetic": setup.datasets.synthetic,
            "train_examples": setup.sampler.num_examples,
            "eval_examples": quality.examples if quality else 0,
            "bootstrap": tc.bootstrap,
            "steps_per_epoch": setup.sampler.steps_per_epoch,
            "epochs_trained": progress.step / setup.sampler.steps_per_epoch,
            # Per member: the share of the training set its one sample holds (≈ 0.632).
            "distinct_fraction": _distinct_fractions(setup),
            # Split → records that did not decode and were replaced (--bad_example_policy=skip).
            "skipped_examples": skipped,
        },
        timing={
            "compile_s": float(sum(progress.compile_s)),
            "steps": progress.step,
            "planned_steps": setup.total_steps,
            "timed_steps": timed,
            "step_s": StepTimes.of(progress.step_s).__dict__,
            "train_wall_s": wall,
            "data_wait_s": progress.data_wait_s,
            "eval_s": eval_s,  # every held-out evaluation, during training and at the end
            "checkpoint_s": progress.checkpoint_s,
            "total_wall_s": total_wall_s,
        },
        resumes=progress.resumes,
        divergence={
            "policy": config.reliability.on_divergence,
            "nonfinite_first_step": {str(k): v for k, v in sorted(progress.diverged.items())},
            "pruned_members": sorted(progress.diverged)
            if config.reliability.on_divergence == "prune"
            else [],
        },
        flops={
            "per_step": step_flops,
            "source": cross.train_step_flops_source,
            "source_reason": cross.source_reason,
            "crosscheck_ok": cross.crosscheck_ok,
            "xla_per_step": cost.flops,
            "xla_per_step_per_device": cost.flops_per_device,
            "xla_note": cost.note,
            "useful_member_steps": useful,
            "timed_member_steps": timed * m,
            "crosscheck": cross.to_dict(),
        },
        # Eq. 6 per epoch (docs/score.md §5): what `metrics.flops_per_s` is computed from.
        epochs=epochs,
        metrics={
            "flops_per_s": flops,
            "flops_per_s_why": None if flops else _why_no_flops(status, progress, setup, epochs),
            "vflops_per_s": vflops(flops) if target else None,
            "vflops_per_s_why": (
                metrics.vflops_per_s_why(flops, achieved, target.target, target.exponent)
                if target
                else "not a scored run (no quality target)"
            ),
            # Over the timed steps: warm-up, checkpoint saves and evaluations left out.
            "flops_per_s_steady": steady,
            "vflops_per_s_steady": vflops(steady) if target else None,
            "penalty": (
                metrics.penalty(achieved, target.target, target.exponent)
                if target and achieved is not None
                else None
            ),
            # Every member's images, and those of members still healthy (what FLOPS counts).
            "images_per_s": metrics.per_second(b, timed * m, wall),
            "useful_images_per_s": metrics.per_second(b, useful, wall),
            "images_per_s_per_member": metrics.per_second(b, timed, wall),
            "flops_per_s_per_device": per_device,
            "mfu_datasheet": metrics.mfu(per_device, peaks.get("datasheet_per_device")),
            "mfu_measured": metrics.mfu(per_device, peaks.get("measured_per_device")),
        },
        peak_flops=peaks,
        memory_per_device=memory or {},
        comm=comm.to_dict() if comm else None,
        roofline=(
            roofline(
                cost,
                peaks.get("measured_per_device"),
                peaks["bandwidth_per_device"],
                peaks["bandwidth_source"],
                per_device,
            )
            if peaks.get("bandwidth_per_device")
            else None
        ),
        energy=_energy(energy, steady),
        quality={
            "metric": setup.workload.metric,
            "target": target.target if target else None,
            "exponent": target.exponent if target else None,
            # Official only where the whole run is: a shrunk ImageNet run is not scored officially.
            "target_is_official": (
                target.target_is_official and submission.division == rules.CLOSED
                if target
                else None
            ),
            "exponent_is_official": target.exponent_is_official if target else None,
            "members": quality.members if quality else None,
            "kept_members": kept if quality else None,
            "member_mean": quality.member_mean if quality else None,
            "ensemble": achieved,
            "ensemble_members": len(kept) if quality else None,
            "oob": quality.oob.to_dict() if quality and quality.oob else None,
            "details": quality.details if quality else None,
            "curve": progress.curve,
            "stopped_at_target": stopped_at_target,
        },
        time_to_target_s=to_target,
        time_to_target_why=to_target_why,
        train={
            "final_loss": None if last_metrics is None else np.asarray(last_metrics.loss).tolist(),
            "final_metrics": (
                None
                if last_metrics is None
                else {k: np.asarray(v).tolist() for k, v in last_metrics.metrics.items()}
            ),
            # Per member: steps skipped on float16 overflow (None without loss scaling).
            "skipped_steps": (
                None
                if last_metrics is None or last_metrics.skipped is None
                else np.asarray(last_metrics.skipped).tolist()
            ),
        },
    )


def _epochs(progress: Progress, per_member_step: float | None, m: int) -> list[dict]:
    """Each completed epoch with its training FLOPs (healthy member-steps only, as FLOPS counts)
    and its FLOPS; FLOPs are None where the step has no count or the run is invalid."""
    out = []
    for e in progress.epochs:
        first, steps = e["first_step"], e["steps"]
        useful = progress.healthy_member_steps(first, first + steps, m)
        flops = per_member_step * useful if per_member_step else None
        out.append(
            {
                **e,
                "flops": flops,
                "flops_per_s": metrics.per_second(per_member_step, useful, e["wall_s"]),
            }
        )
    return out


def _why_no_flops(status: str, progress: Progress, setup, epochs: list[dict]) -> str:
    if status == "invalid":
        return "the run is invalid"
    if epochs:
        return "the training step has no FLOP count"
    return (
        f"no completed epoch ({progress.step} steps of {setup.sampler.steps_per_epoch} per "
        "epoch): Eq. 6 is per epoch; flops_per_s_steady is the steady-state figure"
    )


def _energy(readings, flops: float | None) -> dict:
    if readings is None:
        return {"available": False, "why": "not measured"}
    start, end = readings
    if start is None:
        return {"available": False, "why": "no timed step"}
    return energy_record(start, end, flops)


def skipped_examples(setup, progress: Progress) -> dict[str, list[int]]:
    """Split → sorted indices of the records every process replaced so far (those of earlier
    segments from `progress`), for the record and the checkpoint. A collective."""
    found = {split: set(indices) for split, indices in progress.skipped_examples.items()}
    sources = [] if setup.datasets is None else [setup.datasets.train, setup.datasets.eval]
    tallies = [getattr(s, "bad_examples", None) for s in sources]
    for tally in filter(None, tallies):
        found.setdefault(tally.split, set()).update(tally.skipped())
    out = {}
    for split in sorted({t.split for t in filter(None, tallies)} | set(found)):
        mine = np.asarray(sorted(found.get(split, ())), np.int64)
        width = int(allgather(np.int64(len(mine))).max())
        if width == 0:
            continue
        padded = np.full(width, -1, np.int64)
        padded[: len(mine)] = mine
        every = allgather(padded)
        out[split] = sorted({int(i) for i in every.flat if i >= 0})
    return {split: indices for split, indices in out.items() if indices}


def _distinct_fractions(setup) -> list[float]:
    """Each member's distinct fraction as the first process that trains it derives it from its
    own sampler: a process whose samples differ from process 0's (another seed, another data set
    size) shows in the record instead of hiding behind process 0's figures. A collective."""
    m, per_device = setup.layout.ensemble_size, setup.layout.members_per_device
    mine = np.full(m, np.nan)
    for e, row in enumerate(setup.mesh.devices):  # [ensemble, data, model]
        if any(d.process_index == jax.process_index() for d in row.flat):
            for member in range(e * per_device, (e + 1) * per_device):
                mine[member] = setup.sampler.distinct_fraction(member)
    every = allgather(mine)  # [processes, M]; NaN where a process trains no part of the member
    first = np.argmax(~np.isnan(every), axis=0)
    return [float(every[p, member]) for member, p in enumerate(first)]


def summary(record: dict) -> str:
    """A short human-readable table of the record's headline figures."""
    m, q, t, mesh = record["metrics"], record["quality"], record["timing"], record["mesh"]
    f, oob, metric = record["flops"], record["quality"]["oob"], record["quality"]["metric"]

    num = results.cell
    division, broken = record["submission"]["division"], len(record["submission"]["violations"])
    rows = [
        ("status", record["status"] + (f" ({record['reason']})" if record["reason"] else "")),
        (
            "division",
            division
            + (
                f" ({broken} rule{'s' if broken > 1 else ''} broken: submission.violations)"
                if broken
                else ""
            ),
        ),
        (
            "mesh (ensemble x data x model)",
            f"{mesh['shape']}  M={mesh['ensemble_size']} "
            f"P_degree={mesh['parallel_degree']} P_model={mesh.get('model_parallel', 1)} "
            f"strategy={mesh['member_strategy']}",
        ),
        ("steps (timed)", f"{t['steps']}/{t['planned_steps']} ({t['timed_steps']})"),
        ("step time median [s]", num(t["step_s"]["median_s"])),
        ("compile / data wait [s]", f"{t['compile_s']:.1f} / {t['data_wait_s']:.2f}"),
        (
            "images/s (all / healthy members)",
            f"{num(m['images_per_s'], '{:.1f}')} / {num(m['useful_images_per_s'], '{:.1f}')}",
        ),
        (
            "FLOPS [FLOP/s] (Eq. 6, per epoch)",
            (
                f"{num(m['flops_per_s'])} over {len(record['epochs'])} epoch(s)"
                if m["flops_per_s"] is not None
                else f"n/a ({m['flops_per_s_why']})"
            ),
        ),
        (
            "FLOPS steady [FLOP/s]",
            f"{num(m['flops_per_s_steady'])} (from {f['source']}; XLA/analytic "
            f"{num(f['crosscheck'].get('xla_over_analytic'), '{:.3f}')}"
            f"{'' if f['crosscheck_ok'] is not False else ': CROSS-CHECK FAILED'})",
        ),
        (
            "MFU datasheet / measured",
            f"{num(m['mfu_datasheet'], '{:.3f}')} / {num(m['mfu_measured'], '{:.3f}')}",
        ),
        (
            f"member {metric}",
            "n/a"
            if q["members"] is None
            else " ".join(
                num(a, "{:.4f}") + ("" if i in q["kept_members"] else " (pruned)")
                for i, a in enumerate(q["members"])
            ),
        ),
        ("member mean (kept members)", num(q["member_mean"], "{:.4f}")),
        (f"ensemble {metric}", num(q["ensemble"], "{:.4f}")),
        (
            f"out-of-bag {metric}",
            "n/a"
            if not oob
            else f"{num(oob['quality'], '{:.4f}')} ({oob['scored']} of {oob['subset']} training examples, "
            f"{oob['mean_voters']:.2f} members each)",
        ),
    ]
    if q["target"] is not None:
        rows.append(
            (
                "VFLOPS [FLOP/s]",
                f"{num(m['vflops_per_s'])} = FLOPS × {num(m['penalty'], '{:.4f}')} "
                f"(({num(q['ensemble'], '{:.4f}')} / {q['target']})^{q['exponent']:g}; target "
                f"{'official' if q['target_is_official'] else 'not official'})",
            )
        )
        rows.append(
            (
                "time to target",
                f"{record['time_to_target_s']:.1f} s after run_start"
                + (" (stopped there)" if q["stopped_at_target"] else "")
                if record["time_to_target_s"] is not None
                else f"n/a ({record['time_to_target_why']})",
            )
        )
    energy = record.get("energy") or {}
    rows.append(
        (
            "energy",
            f"{energy['joules']:.4g} J, {num(energy['average_watts'])} W, "
            f"{num(energy['flops_per_watt'])} FLOP/J"
            if energy.get("available")
            else f"not available ({energy.get('why', 'not measured')})",
        )
    )
    rows.append(("record", str(record.get("path"))))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
