"""The training run's results record and its human-readable summary."""

from __future__ import annotations

import numpy as np

from hpcai_jax import metrics, results
from hpcai_jax.evaluate import EnsembleQuality
from hpcai_jax.flops.xla import XlaCost
from hpcai_jax.progress import Progress
from hpcai_jax.timing import StepTimes


def build(setup, progress: Progress, cost: XlaCost, cross: dict, peaks: dict, status: str,
          quality: EnsembleQuality | None, last_metrics, eval_s: float, total_wall_s: float,
          reason: str = "") -> dict:
    """status: complete | partial (preempted; resumable) | invalid (diverged: no FLOPS figure).

    `cross` is flops.report.crosscheck's dict: its train_step_flops (XLA's, or the analytic count
    when XLA has none) is what FLOPS uses. `peaks` holds the per-device peak FLOP/s figures.
    """
    config, layout, tc = setup.config, setup.layout, setup.config.train
    m = layout.ensemble_size
    timed = len(progress.step_s)
    wall = progress.train_wall_s
    valid = status != "invalid"
    useful = progress.useful_member_steps(m)
    step_flops = cross.get("train_step_flops")
    per_member_step = step_flops / m if step_flops else None
    flops = metrics.flops_per_s(per_member_step, useful, wall) if valid else None
    per_device = flops / layout.num_devices if flops else None
    achieved = quality.ensemble if quality else None
    return {
        "run_id": progress.run_id,
        "mode": "train",
        "status": status,
        "reason": reason,
        "config": config.to_dict(),
        "provenance": results.provenance(),
        "mesh": {
            "shape": dict(setup.mesh.shape), "ensemble_size": m,
            "members_per_device": layout.members_per_device,
            "parallel_degree": layout.parallel_degree, "num_devices": layout.num_devices,
            "member_strategy": setup.member_strategy,
            "member_strategy_why": setup.member_strategy_why,
        },
        "data": {
            "dataset": config.data.dataset, "synthetic": setup.datasets.synthetic,
            "train_examples": setup.sampler.num_examples,
            "eval_examples": quality.examples if quality else 0,
            "bootstrap": tc.bootstrap, "steps_per_epoch": setup.sampler.steps_per_epoch,
            "epochs_trained": progress.step / setup.sampler.steps_per_epoch,
        },
        "timing": {
            "compile_s": float(sum(progress.compile_s)), "steps": progress.step,
            "planned_steps": setup.total_steps, "timed_steps": timed,
            "step_s": StepTimes.of(progress.step_s).__dict__,
            "train_wall_s": wall, "data_wait_s": progress.data_wait_s, "eval_s": eval_s,
            "checkpoint_s": progress.checkpoint_s,
            "total_wall_s": total_wall_s,
        },
        "resumes": progress.resumes,
        "divergence": {
            "policy": config.reliability.on_divergence,
            "nonfinite_first_step": {str(k): v for k, v in sorted(progress.pruned.items())},
            "pruned_members": sorted(progress.pruned) if config.reliability.on_divergence == "prune" else [],
        },
        "flops": {
            "per_step": step_flops, "source": cross.get("train_step_flops_source"),
            "xla_per_step": cost.flops, "xla_per_step_per_device": cost.flops_per_device,
            "xla_note": cost.note, "useful_member_steps": useful,
            "crosscheck": cross,
        },
        "metrics": {
            "flops_per_s": flops,
            "vflops_per_s": metrics.vflops_per_s(flops, achieved, config.target_quality,
                                                 config.quality_exponent),
            "penalty": (metrics.penalty(achieved, config.target_quality, config.quality_exponent)
                        if achieved is not None else None),
            "images_per_s": m * tc.batch_size * timed / wall if wall else None,
            "images_per_s_per_member": tc.batch_size * timed / wall if wall else None,
            "flops_per_s_per_device": per_device,
            "mfu_datasheet": (per_device / peaks["datasheet_per_device"]
                              if per_device and peaks.get("datasheet_per_device") else None),
            "mfu_measured": (per_device / peaks["measured_per_device"]
                             if per_device and peaks.get("measured_per_device") else None),
        },
        "peak_flops": peaks,
        "quality": {
            "metric": "top1_accuracy", "target": config.target_quality,
            "exponent": config.quality_exponent,
            "members": quality.members if quality else None,
            "member_mean": quality.member_mean if quality else None,
            "ensemble": achieved,
            "ensemble_members": (m - len(progress.pruned)) if quality else None,
        },
        "train": {
            "final_loss": None if last_metrics is None else np.asarray(last_metrics.loss).tolist(),
            "final_batch_accuracy": (None if last_metrics is None
                                     else np.asarray(last_metrics.accuracy).tolist()),
        },
    }


def summary(record: dict) -> str:
    """A short human-readable table of the record's headline figures."""
    m, q, t, mesh = record["metrics"], record["quality"], record["timing"], record["mesh"]

    def num(value, fmt="{:.4g}"):
        return "n/a" if value is None else fmt.format(value)

    rows = [
        ("status", record["status"] + (f" ({record['reason']})" if record["reason"] else "")),
        ("mesh (ensemble x data)", f"{mesh['shape']}  M={mesh['ensemble_size']} "
                                   f"P_degree={mesh['parallel_degree']} strategy={mesh['member_strategy']}"),
        ("steps (timed)", f"{t['steps']}/{t['planned_steps']} ({t['timed_steps']})"),
        ("step time median [s]", num(t["step_s"]["median_s"])),
        ("compile / data wait [s]", f"{t['compile_s']:.1f} / {t['data_wait_s']:.2f}"),
        ("images/s", num(m["images_per_s"], "{:.1f}")),
        ("FLOPS [FLOP/s]", f"{num(m['flops_per_s'])} (from {record['flops']['source']}; XLA/analytic "
                           f"{num(record['flops']['crosscheck'].get('xla_over_analytic'), '{:.3f}')})"),
        ("MFU datasheet / measured", f"{num(m['mfu_datasheet'], '{:.3f}')} / "
                                     f"{num(m['mfu_measured'], '{:.3f}')}"),
        ("member accuracies", "n/a" if q["members"] is None
         else " ".join(f"{a:.4f}" for a in q["members"])),
        ("ensemble accuracy", num(q["ensemble"], "{:.4f}")),
        ("VFLOPS [FLOP/s]", f"{num(m['vflops_per_s'])} (target {q['target']}, n={q['exponent']:g})"),
        ("record", str(record.get("path"))),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
