"""The training record's console summary: a short table of its headline figures, read from the
record itself (`records.read`), so that what is printed is what was written."""

from __future__ import annotations

from hpcai_jax import records, units
from hpcai_jax.records import Status, train
from hpcai_jax.telemetry import mllog


def summary(r: records.TrainRecord, path: str | None = None) -> str:
    """A short human-readable table of the record's headline figures; `path`: where it was
    written (None: nowhere, on a process that writes nothing)."""
    m, q, t, mesh, f = r.metrics, r.quality, r.timing, r.mesh, r.flops
    num = units.formatted
    rows = [
        ("status", _status(r)),
        ("division", str(r.submission.division)),
        *(("  rule broken", v) for v in r.submission.violations),
        (
            "mesh (ensemble x data x model)",
            f"{mesh.shape}  M={mesh.ensemble_size} P_degree={mesh.parallel_degree} "
            f"P_model={mesh.model_parallel} {_strategy(mesh)}",
        ),
        ("members per device", _members_per_device(r)),
        ("steps", f"{t.steps} of {t.planned_steps} ({t.timed_steps} timed)"),
        ("step time median [s]", num(t.step_s.median_s)),
        ("compile / data wait [s]", f"{t.compile_s:.1f} / {t.data_wait_s:.2f}"),
        (
            "images/s (all / healthy members)",
            f"{num(m.images_per_s, '{:.1f}')} / {num(m.useful_images_per_s, '{:.1f}')}",
        ),
        (
            "FLOPS (Eq. 6, per epoch)",
            f"{units.si(m.flops_per_s, 'FLOP/s')} over {len(r.epochs)} epoch(s)"
            if m.flops_per_s is not None
            else f"n/a ({m.flops_per_s_why})",
        ),
        (
            "FLOPS steady",
            f"{units.si(m.flops_per_s_steady, 'FLOP/s')} (from {f.source}; XLA/analytic "
            f"{num(f.crosscheck.xla_over_analytic, '{:.3f}')}"
            f"{'' if f.crosscheck_ok is not False else ': CROSS-CHECK FAILED'})",
        ),
        (
            "MFU datasheet / measured",
            f"{num(m.mfu_datasheet, '{:.3f}')} / {num(m.mfu_measured, '{:.3f}')}",
        ),
        (
            f"member {q.metric}",
            "n/a"
            if q.members is None
            else " ".join(
                num(a, "{:.4f}") + ("" if i in (q.kept_members or []) else " (pruned)")
                for i, a in enumerate(q.members)
            ),
        ),
        ("member mean (kept members)", num(q.member_mean, "{:.4f}")),
        (f"ensemble {q.metric}", num(q.ensemble, "{:.4f}")),
        (f"out-of-bag {q.metric}", _oob(q)),
        *_scored_rows(r),
        ("roofline bandwidth", _bandwidth(r.roofline)),
        ("energy", _energy_line(r.energy)),
        ("record", str(path)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _bandwidth(roofline: train.Roofline | None) -> str:
    """The roofline's bandwidth and its source: where STREAM measured a cache at start, the
    source says so here, once per run, rather than in a warning."""
    if roofline is None:
        return "n/a (no bandwidth figure)"
    return f"{units.si(roofline.bandwidth_bytes_per_s, 'B/s')} ({roofline.bandwidth_source})"


def _strategy(mesh: train.Mesh) -> str:
    """The strategy asked and, where it differs, the form the members ran as (vmap runs as one
    of the --member_map forms): a reader sees how the step ran, not only the flag."""
    ran = mesh.member_mapping
    if ran is None or ran == mesh.member_strategy:
        return f"strategy={mesh.member_strategy}"
    return f"strategy={mesh.member_strategy}, run as {ran}"


def _status(r: records.TrainRecord) -> str:
    """The record's status; a complete run that missed its target is scored, and where the run
    wrote an MLLOG (`--mllog`) its run_stop says aborted, which the line says too
    (telemetry/mllog.py). Without an MLLOG, none is named."""
    if r.status != Status.COMPLETE:
        return r.status + (f" ({r.reason})" if r.reason else "")
    stop = mllog.outcome(r)
    if stop["status"] == "success":
        return "complete, target reached"
    why = stop["reason"]
    if r.mllog is None:
        return f"complete, {why}"
    words = "target not reached" if "not reached" in why else why
    return f"complete, {words} (MLLOG run_stop: aborted, {why})"


def _members_per_device(r: records.TrainRecord) -> str:
    """Resolved, and what the flags asked (auto: derived from M, P_degree and the devices)."""
    asked = (r.config.get("mesh") or {}).get("members_per_device")
    words = {0: "auto", None: "not recorded"}
    return f"{r.mesh.members_per_device} (asked: {words.get(asked, asked)})"


def _oob(q: train.Quality) -> str:
    oob, num = q.oob, units.formatted
    if not oob:
        return "n/a"
    return (
        f"{num(oob.quality, '{:.4f}')} ({oob.scored} of {oob.subset} training examples, "
        f"{oob.mean_voters:.2f} members each)"
    )


def _scored_rows(r: records.TrainRecord) -> list[tuple[str, str]]:
    """VFLOPS and time to target, for a run with a quality target."""
    q, m, num = r.quality, r.metrics, units.formatted
    if q.target is None:
        return []
    official = "official" if q.target_is_official else "not official"
    reached = (
        f"{r.time_to_target_s:.1f} s after run_start"
        + (" (stopped there)" if q.stopped_at_target else "")
        if r.time_to_target_s is not None
        else f"n/a ({r.time_to_target_why})"
    )
    vflops = (
        f"{units.si(m.vflops_per_s, 'FLOP/s')} = FLOPS × {num(m.penalty, '{:.4f}')} "
        f"(({num(q.ensemble, '{:.4f}')} / {q.target})^{q.exponent:g}; target {official})"
        if m.vflops_per_s is not None and m.penalty is not None and q.ensemble is not None
        else f"n/a ({m.vflops_per_s_why or 'no penalty'}; target {q.target}, {official})"
    )
    return [
        ("VFLOPS", vflops),
        ("time to target", reached),
    ]


def _energy_line(energy: train.Energy) -> str:
    num = units.formatted
    if not energy.available:
        return f"not available ({energy.why or 'not measured'})"
    return (
        f"{energy.joules:.4g} J, {num(energy.average_watts)} W, {num(energy.flops_per_watt)} FLOP/J"
    )
