"""The report's text: one markdown section per plot, the plot above the table of its numbers.

Every number in a table is the record's own figure (scaled to the column's SI prefix, 4
significant digits), so a reader can check a plot against the records and two reports can be
diffed. Sections are always present; one with nothing to show says why in a sentence.
"""

from __future__ import annotations

from pathlib import Path

from hpcai_jax.report.collect import Collection, Skipped
from hpcai_jax.report.repeats import OLYMPIC_FROM, Group, Summary
from hpcai_jax.report.series import (
    BELOW_RULE_MARK,
    CommRow,
    MachineRow,
    MfuRow,
    Observed,
    QualityCurve,
    RoofPoint,
    ScalePoint,
    StreamRun,
    TradePoint,
    below_rule,
    plottable,
)
from hpcai_jax.report.series import scalability as scalability_series
from hpcai_jax.units import cell, prefix, seconds

SECTIONS = (
    "Runs",
    "FLOPS and VFLOPS against Sys_scale",
    "Ensemble quality against training time",
    "Ensemble quality against M",
    "Quality during training and time to target",
    "MFU per run",
    "Roofline",
    "Communication per step and device",
    "Division, memory and energy",
    "STREAM bandwidth",
    "Repeats",
    "Skipped records",
)


def _escape(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(headers: list[str], rows: list[list]) -> str:
    lines = [
        "| " + " | ".join(map(_escape, headers)) + " |",
        "|" + "|".join(" --- " for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(map(_escape, row)) + " |" for row in rows]
    return "\n".join(lines)


def image(name: str, alt: str) -> str:
    return f"![{alt}]({name})"


def heading(title: str, level: int = 2) -> str:
    return f"{'#' * level} {title}"


def runs(collection: Collection) -> str:
    rows = []
    for r in [*collection.aside, *collection.train]:
        mesh = r.record.mesh
        ensemble, p, s = mesh.ensemble_size, mesh.parallel_degree, mesh.num_devices
        device = _device(r.record.provenance)
        rows.append([r.run_id, "train", ensemble, p, mesh.model_parallel, s, device, r.path.name])
    for r in collection.stream:
        devices = r.record.placement.num_devices
        devices = "n/a" if devices is None else devices
        mode = f"stream, **{BELOW_RULE_MARK}**" if below_rule(r.record) else "stream"
        rows.append(
            [r.run_id, mode, "", "", "", devices, _device(r.record.provenance), r.path.name]
        )
    if not rows:
        return "No record could be plotted: see Skipped records."
    headers = ["run", "mode", "M", "P_degree", "P_model", "Sys_scale (devices)", "device", "file"]
    return table(headers, rows)


def _device(provenance) -> str:
    kind, backend = provenance.device_kind, provenance.backend
    return f"{'?' if kind is None else kind} ({'?' if backend is None else backend})"


def configuration(majority: dict) -> str:
    """The fields every plotted training record shares, the ones a reader asks for first."""
    shown = (
        ("workload", "model.workload"),
        ("model", "model.model"),
        ("data set", "data.dataset"),
        (f"batch size per {batch_unit(majority)}", "train.batch_size"),
        ("steps", "train.steps"),
        ("epochs", "train.epochs"),
        ("dtype", "model.dtype"),
        ("device", "provenance.device_kind"),
    )
    # --steps, when given, overrides --epochs: show the one that decided the run's length.
    skip = "train.epochs" if majority.get("train.steps") else "train.steps"
    parts = [f"{name} {majority[key]}" for name, key in shown if key in majority and key != skip]
    return "Training configuration shared by the plotted runs: " + ", ".join(parts) + "."


def batch_unit(majority: dict) -> str:
    """What the records' train.batch_size counts: a device's batch under
    --batch_policy=per_device (the member's is it × P_degree), else a member's."""
    return "device" if majority.get("train.batch_policy") == "per_device" else "member"


def scalability(series: dict[int, list[ScalePoint]], png: str | None) -> str:
    points = [p for pts in series.values() for p in pts]
    if not points:
        return "No complete training record: nothing to plot."
    f_scale, f_prefix = prefix([p.flops for p in points] + [p.ideal_flops for p in points])
    v_scale, v_prefix = prefix([p.vflops for p in points] + [p.ideal_vflops for p in points])
    rows = [
        [
            p.m,
            p.p,
            p.sys_scale,
            cell(p.flops, f_scale),
            cell(p.ideal_flops, f_scale),
            cell(p.efficiency),
            cell(p.vflops, v_scale),
            cell(p.ideal_vflops, v_scale),
            p.run_id,
        ]
        for p in points
    ]
    headers = [
        "M",
        "P_degree",
        "Sys_scale",
        f"FLOPS [{f_prefix}FLOP/s]",
        f"ideal FLOPS [{f_prefix}FLOP/s]",
        "FLOPS / ideal",
        f"VFLOPS [{v_prefix}FLOP/s]",
        f"ideal VFLOPS [{v_prefix}FLOP/s]",
        "run",
    ]
    parts = [
        "One line per P_degree, each point one configuration (repeats of it, differing only in "
        "their seed, drawn as their mean with its 95 % interval; different M never pooled); its ideal is the figure measured at the "
        "series' smallest Sys_scale (the mean, if several runs share it), scaled linearly. A "
        "series with one Sys_scale has no ideal (n/a): its point would be its own ideal. "
        "VFLOPS = FLOPS × the quality penalty; the plot writes the penalty at each point.",
    ]
    if all(p.vflops is None for p in points):
        parts.append(
            "No run has a VFLOPS figure (no quality or no target, as with synthetic data): "
            "FLOPS only."
        )
    if png:
        parts.append(image(png, "FLOPS and VFLOPS against Sys_scale"))
    parts.append(table(headers, rows))
    return "\n\n".join(parts)


def tradeoff(
    sys_scale: int, points: list[TradePoint], metric: str, png: str | None, plotted: int
) -> str:
    t_scale, t_unit = seconds([p.train_s for p in plottable(points)])  # the plot's unit
    rows = [
        [
            p.m,
            p.p,
            cell(p.train_s, t_scale),
            cell(p.ensemble),
            cell(p.member_mean),
            cell(p.oob),
            p.run_id,
        ]
        for p in points
    ]
    headers = [
        "M",
        "P_degree",
        f"training time [{t_unit}]",
        f"ensemble {metric}",
        f"member mean {metric}",
        f"out-of-bag {metric}",
        "run",
    ]
    parts = [heading(f"Sys_scale = {sys_scale}", 3)]
    if any(p.members_per_device > 1 for p in points):
        parts.append(
            "Not Fig. 7's experiment: these M members share the same devices (several members "
            "per device, docs/members.md), where Fig. 7 splits a fixed set of devices into M "
            "groups of P_degree; the time grows with M because the devices do M members' work."
        )
    if png:
        parts.append(image(png, f"Quality against training time at Sys_scale {sys_scale}"))
    missing = len(points) - plotted
    if missing:
        parts.append(
            f"{missing} run(s) have no quality figure (as with synthetic data): not plotted."
        )
    parts.append(table(headers, rows))
    return "\n\n".join(parts)


# Which experiment of HPC AI500 V3.0 each section mirrors (docs/paper.md); "none": no figure.
MIRRORS = {
    "FLOPS and VFLOPS against Sys_scale": "§4.3 Fig. 5 (P_degree fixed, M growing)",
    "Ensemble quality against training time": "§4.4.1 Fig. 7 (one Sys_scale split into (M, P_degree))",
    "Ensemble quality against M": "§4.3 and §4.4.1 (the quality of Fig. 5's and Fig. 7's points)",
    "Quality during training and time to target": "§4.4.1 Fig. 7's time to target (the evaluations behind it)",
    "MFU per run": "none: §4.3 Fig. 6's device utilisation is the nearest (docs/paper.md)",
    "Roofline": "none",
}


def aside(collection: Collection) -> str:
    """The one line a section computed over the plotted training records says when the paper
    plan's records are in the report: why it leaves them out."""
    n = len(collection.aside)
    if not n:
        return ""
    return (
        f"The {n} record(s) of the paper's plan are left out here: their points differ in "
        "configuration by design, so each is reported once, in \"The paper's experiments at one "
        "machine's scale\" above, with one FLOPS, VFLOPS and quality per point."
    )


def caption(section: str, collection: Collection) -> str:
    """Which experiment of the paper a section's figure mirrors and how this one differs (scale,
    data, devices); empty for a section without a figure."""
    if section not in MIRRORS:
        return ""
    train = collection.train
    if not train:
        return ""
    rec = train[0].record
    devices = max(int(r.record.mesh.num_devices) for r in train)
    cpu = rec.provenance.backend == "cpu"
    here = (
        f"here {rec.data.dataset} ({rec.data.train_examples} training examples), up to {devices} "
        f"{rec.provenance.device_kind or '?'} devices"
        + (
            " forced on one host's CPU, sharing its cores (FLOPS cannot grow with them)"
            if cpu
            else ""
        )
    )
    paper = "the paper: ResNet-50 on ImageNet, 8 nodes × 8 V100 GPUs, Sys_scale 8 to 64"
    mirror = MIRRORS[section]
    if section == SECTIONS[1] and not _grows(train):
        return (
            "Not HPC AI500 V3.0 §4.3 Fig. 5's shape: no P_degree here has runs at two Sys_scales "
            f"(each line below is one point, without an ideal); {here}."
        )
    if mirror.startswith("none"):
        return f"No figure of HPC AI500 V3.0{mirror[4:]}; {here}."
    return f"Mirrors HPC AI500 V3.0 {mirror}; {here}; {paper}."


def _grows(train: list) -> bool:
    """Whether some P_degree has training runs at two Sys_scales: a line Fig. 5 could mirror."""
    return any(
        len({p.sys_scale for p in points}) > 1 for points in scalability_series(train).values()
    )


def tradeoff_intro(count: int) -> str:
    intro = "At one Sys_scale, every split into M members of P_degree devices each; the training time is the timed steps' wall time (timing.train_wall_s)."
    if not count:
        intro += (
            " No Sys_scale has two or more runs with a training time and a quality figure: "
            "nothing to plot."
        )
    return intro


def quality_curves(
    curves: list[QualityCurve], metric: str, png: str | None, members_png: str | None = None
) -> str:
    if not curves:
        return "No training record has a held-out evaluation: nothing to plot."
    parts = [
        "Every held-out evaluation of a run (--eval_every_epochs, and the last one), against "
        "epochs trained and against wall time since run_start; the time to target is from "
        "run_start to the end of the first evaluation that reached the target (docs/score.md)."
    ]
    if png:
        parts.append(image(png, "Quality during training"))
    summary = [
        [
            c.run_id,
            len(c.points),
            cell(c.target),
            cell(c.time_to_target_s),
            c.time_to_target_why or "",
        ]
        for c in curves
    ]
    parts.append(table(["run", "evaluations", "target", "time to target [s]", "why none"], summary))
    points = [
        [c.run_id, cell(p.epoch), cell(p.wall_s), cell(p.ensemble), cell(p.member_mean)]
        for c in curves
        for p in c.points
    ]
    headers = ["run", "epoch", "wall time [s]", f"ensemble {metric}", f"member mean {metric}"]
    parts.append(table(headers, points))
    if members_png:
        parts.append(image(members_png, "Quality per member and of the ensemble"))
    return "\n\n".join(parts)


def observed(rows: list[Observed], link) -> str:
    """Each run's TensorBoard events and profiler trace (docs/observe.md), linked; `link` makes
    a path relative to the report."""
    if not rows:
        return ""

    def where(path) -> str:
        return f"[{path.name}]({link(path)})" if path is not None else "not found here"

    cells = [[r.run_id, where(r.events), where(r.trace), r.lost] for r in rows]
    intro = (
        "Looking inside the runs (docs/observe.md): `tensorboard --logdir` on an events "
        "directory shows its curves; a trace opens in ui.perfetto.dev or TensorBoard's profile "
        "plugin."
    )
    headers = ["run", "TensorBoard events", "profiler trace (Perfetto)", "lost"]
    return intro + "\n\n" + table(headers, cells)


def quality_against_m(points: list[TradePoint], metric: str, png: str | None) -> str:
    have = [p for p in points if p.ensemble is not None]
    if not have:
        return "No training record has a quality figure: nothing to plot."
    parts = [
        "Bagging's claim (HPC AI500 V3.0 §4.3, §4.4.1): the ensemble is better than its members, and "
        "more so as M grows. Quality against M at each fixed Sys_scale (the trade-off's splits) "
        "and against Sys_scale at each fixed P_degree (the scalability sweep: M grows); every "
        "member, their mean, the ensemble and its out-of-bag estimate."
    ]
    if png:
        parts.append(image(png, "Ensemble quality against M"))
    else:
        parts.append("No Sys_scale or P_degree has two values of M with quality: nothing to plot.")
    rows = [
        [
            p.sys_scale,
            p.m,
            p.p,
            cell(p.ensemble),
            cell(p.member_mean),
            cell(max(p.members)) if p.members else "n/a",
            cell(min(p.members)) if p.members else "n/a",
            cell(p.oob),
            cell(p.target),
            p.run_id,
        ]
        for p in sorted(have, key=lambda p: (p.sys_scale, p.m, p.run_id))
    ]
    headers = [
        "Sys_scale",
        "M",
        "P_degree",
        f"ensemble {metric}",
        f"member mean {metric}",
        "best member",
        "worst member",
        f"out-of-bag {metric}",
        "target",
        "run",
    ]
    parts.append(table(headers, rows))
    return "\n\n".join(parts)


def mfu(rows: list[MfuRow], png: str | None) -> str:
    if not rows:
        return "No complete training record: nothing to plot."
    f_scale, f_prefix = prefix([r.flops_per_device for r in rows])
    p_scale, p_prefix = prefix([r.peak_measured for r in rows] + [r.peak_datasheet for r in rows])
    body = [
        [
            r.run_id,
            r.sys_scale,
            cell(r.flops_per_device, f_scale),
            cell(r.peak_measured, p_scale),
            cell(None if r.measured is None else r.measured * 100),
            cell(r.peak_datasheet, p_scale),
            cell(None if r.datasheet is None else r.datasheet * 100),
        ]
        for r in rows
    ]
    headers = [
        "run",
        "Sys_scale",
        f"FLOPS per device [{f_prefix}FLOP/s]",
        f"measured peak per device [{p_prefix}FLOP/s]",
        "MFU measured [%]",
        f"datasheet peak per device [{p_prefix}FLOP/s]",
        "MFU datasheet [%]",
    ]
    parts = [
        "FLOPS per device over the matmul peak measured on all devices at once at the start of "
        "the run, and over the vendor's dense peak where the device has one (docs/score.md §6)."
    ]
    if png:
        parts.append(image(png, "MFU per run"))
    else:
        parts.append("No run has an MFU figure: nothing to plot.")
    parts.append(table(headers, body))
    return "\n\n".join(parts)


def roofline(points: list[RoofPoint], png: str | None) -> str:
    if not points:
        return "No training record has a roofline (a bandwidth and XLA's bytes accessed)."
    f_scale, f_prefix = prefix([p.peak for p in points])
    b_scale, b_prefix = prefix([p.bandwidth for p in points])
    parts = [
        "Per device: the matmul peak and STREAM Triad bandwidth measured at the start of the run "
        "(or read from a STREAM record), and the training step at XLA's FLOPs over bytes "
        "accessed. Below the ridge point the step is memory-bound (docs/score.md)."
    ]
    if png:
        parts.append(image(png, "every run's step on its roofline"))
    body = [
        [
            p.run_id,
            cell(p.peak, f_scale),
            cell(p.bandwidth, b_scale),
            cell(p.peak / p.bandwidth),
            cell(p.intensity),
            cell(p.attainable, f_scale),
            cell(p.achieved, f_scale),
        ]
        for p in points
    ]
    headers = [
        "run",
        f"peak [{f_prefix}FLOP/s]",
        f"bandwidth [{b_prefix}B/s]",
        "ridge [FLOP/B]",
        "intensity [FLOP/B]",
        f"attainable [{f_prefix}FLOP/s]",
        f"achieved [{f_prefix}FLOP/s]",
    ]
    parts.append(table(headers, body))
    return "\n\n".join(parts)


_AXES = ("ensemble", "data", "model")


def communication(rows: list[CommRow]) -> str:
    if not rows:
        return "No training record has a communication count (comm)."
    axes = [a for a in _AXES if any(a in r.payload for r in rows)]
    axes += sorted({a for r in rows for a in r.payload} - set(axes))
    values = [v for r in rows for v in (*r.payload.values(), *(r.wire or {}).values())]
    scale, unit = prefix(values + [r.intra_node for r in rows] + [r.inter_node for r in rows])
    body = [
        [
            r.run_id,
            r.m,
            r.p,
            r.p_model,
            r.allreduce,
            "n/a" if r.nodes is None else r.nodes,
            *(cell(r.payload.get(a), scale) for a in axes),
            *(cell((r.wire or {}).get(a), scale) for a in axes),
            cell(r.intra_node, scale),
            cell(r.inter_node, scale),
        ]
        for r in rows
    ]
    headers = [
        "run",
        "M",
        "P_degree",
        "P_model",
        "gradient reduction",
        "nodes",
        *(f"payload {a} [{unit}B]" for a in axes),
        *(f"wire {a} [{unit}B]" for a in axes),
        f"intra-node [{unit}B]",
        f"inter-node [{unit}B]",
    ]
    intro = (
        "Training collectives of the compiled step, per device and step, by mesh axis, read from "
        "its optimized HLO (docs/score.md §8). Payload: each collective's result; wire: the bytes "
        "a device sends under ring algorithms over each collective's own group (all-reduce "
        "2 (n − 1) / n × payload); intra- and inter-node: the wire bytes split by where the "
        "ring's hops run (a model of what NCCL or a TPU would do, not a measurement). The "
        "members' per-step figures gathered for the host are left out. Members never exchange "
        "training data: the ensemble columns are 0."
    )
    return "\n\n".join([intro, table(headers, body)])


def machine(rows: list[MachineRow]) -> str:
    if not rows:
        return "No complete training record."
    m_scale, m_unit = prefix([r.memory_bytes for r in rows])
    f_scale, f_unit = prefix([r.flops_per_watt for r in rows])
    body = [
        [
            r.run_id,
            (r.division or "n/a")
            + (
                f" ({r.violations} rule{'s' if r.violations != 1 else ''} broken)"
                if r.violations
                else ""
            ),
            cell(r.memory_bytes, m_scale),
            cell(r.joules),
            cell(r.average_watts),
            cell(r.flops_per_watt, f_scale),
            r.energy_why or "",
        ]
        for r in rows
    ]
    headers = [
        "run",
        "division",
        f"memory per device [{m_unit}B]",
        "energy [J]",
        "average power [W]",
        f"FLOPS per watt [{f_unit}FLOP/J]",
        "energy not measured: why",
    ]
    intro = (
        "The division each run qualifies for (its record's submission.violations list every "
        "rule an open run breaks; docs/score.md §10), the compiled step's memory per device "
        "(arguments + outputs − aliased + temporaries) and energy over the timed steps where "
        "the device has a counter (NVML), never an estimate."
    )
    return "\n\n".join([intro, table(headers, body)])


def stream(runs: list[StreamRun], png: str | None, per_process: dict[str, str]) -> str:
    if not runs:
        return "No complete STREAM record: nothing to plot."
    rows = [
        [
            r.run_id,
            r.num_devices,
            "n/a" if r.elements is None else f"{r.elements:,}",
            k.label,
            cell(k.gb_per_s),
            cell(k.gb_per_s_per_device),
            f"**{BELOW_RULE_MARK}**" if r.below_rule else "kept",
        ]
        for r in runs
        for k in r.kernels
    ]
    headers = ["run", "devices", "elements per array", "kernel", "GB/s", "GB/s per device"]
    headers += ["size rule"]
    parts = [
        "BabelStream's figures: bytes moved over the fastest call, first call excluded "
        "(10^9 bytes per GB). Per device: the all-devices figure divided by the devices. Size "
        "rule: NERSC-10's, each array at least 4x the largest cache in front of the device; a "
        "run below it measured a cache as much as memory (hatched bars)."
    ]
    if png:
        parts.append(image(png, "STREAM bandwidth per kernel"))
    parts.append(table(headers, rows))
    below = [f"- {r.run_id}: {r.below_rule}" for r in runs if r.below_rule]
    if below:
        parts.append(f"Runs {BELOW_RULE_MARK}:\n\n" + "\n".join(below))
    for r in runs:
        if not r.per_process or len(r.per_process) < 2:
            continue
        keys = list(r.per_process[0])
        labels = {k.key: k.label for k in r.kernels}
        parts.append(f"Each process's own device ({r.run_id}, --stream_devices=one):")
        if r.run_id in per_process:
            parts.append(image(per_process[r.run_id], f"STREAM per process, {r.run_id}"))
        parts.append(
            table(
                ["process", *(f"{labels.get(k, k)} [GB/s]" for k in keys)],
                [[i, *(cell(rates.get(k)) for k in keys)] for i, rates in enumerate(r.per_process)],
            )
        )
    return "\n\n".join(parts)


def _summary_row(summary: Summary, scale: float) -> list:
    """N, mean, std, min, max, the 95 % interval's ends and the olympic mean, in one unit."""
    values = (summary.mean, summary.std, summary.low, summary.high)
    values += (summary.ci_low, summary.ci_high, summary.olympic)
    return [summary.n, *(cell(v, scale) for v in values)]


def repeats(groups: list[Group], singles: int, metric: str) -> str:
    """One row per repeated configuration and figure: the runs' spread and the mean's 95 %
    interval, so a difference between two points can be read against the noise of one."""
    if not groups:
        return (
            "No configuration has two or more complete runs (runs that differ only in --seed, "
            "as a sweep's --repeats makes them): nothing to summarise."
        )
    figures = [
        ("FLOPS", lambda g: g.flops, "FLOP/s"),
        ("VFLOPS", lambda g: g.vflops, "FLOP/s"),
        (f"ensemble {metric}", lambda g: g.quality, None),
        ("time to target", lambda g: g.time_to_target, "s"),
    ]
    headers = ["M", "P_degree", "Sys_scale", "figure", "N", "mean", "std", "min", "max"]
    headers += ["95 % interval low", "95 % interval high", "olympic mean"]
    body = []
    for name, summary, unit in figures:
        values = [v for g in groups for v in (summary(g).mean, summary(g).low, summary(g).high)]
        scale, p = prefix(values) if unit == "FLOP/s" else (1.0, "")
        label = f"{name} [{p}{unit}]" if unit else name
        body += [[g.m, g.p, g.sys_scale, label, *_summary_row(summary(g), scale)] for g in groups]
    body.sort(key=lambda row: (row[2], row[0], row[1]))  # a configuration's figures together
    runs = [
        [g.m, g.p, g.sys_scale, len(g.run_ids), ", ".join(g.run_ids), _seeds(g)] for g in groups
    ]
    intro = (
        "Runs of one configuration that differ only in their seed (`--repeats` of "
        "`python -m hpcai_jax.sweep`), each figure over the runs that have it (N; a run that never "
        "reached the target has no time to target): the mean, the sample standard deviation "
        "(n − 1) and range, the mean's 95 % Student-t interval (mean ± t_{0.975, N − 1} × std / "
        f"√N; none for N = 1) and, from N = {OLYMPIC_FROM}, MLPerf's olympic mean (the best and "
        "the worst run dropped). The plots draw such a point as its mean with this interval as "
        "its error bar (docs/score.md §9)."
    )
    parts = [intro, table(["M", "P_degree", "Sys_scale", "runs", "run ids", "seeds"], runs)]
    if singles:
        parts.append(f"{singles} other configuration(s) ran once: not summarised.")
    parts.append(table(headers, body))
    return "\n\n".join(parts)


def _seeds(group: Group) -> str:
    return ", ".join("n/a" if s is None else str(s) for s in group.seeds)


def skipped(items: list[Skipped]) -> str:
    if not items:
        return "None: every record found was used."
    rows = [[s.path.name, s.run_id or "n/a", s.why] for s in items]
    return table(["file", "run", "why it was not used"], rows)


def _inputs(paths: list[str], shown: int = 3) -> str:
    parents = {Path(p).parent for p in paths}
    if len(paths) > 1 and len(parents) == 1 and all(Path(p).is_file() for p in paths):
        return f"{len(paths)} files in `{parents.pop()}`"
    names = ", ".join(f"`{p}`" for p in paths[:shown])
    return names + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def header(collection: Collection) -> str:
    aside = len(collection.aside)
    used = sum(len(v) for v in collection.used.values()) + aside
    counts = ", ".join(f"{len(v)} {mode}" for mode, v in sorted(collection.used.items()))
    if aside:
        counts = ", ".join(filter(None, [f"{aside} train in the paper's section", counts]))
    lines = [
        "# hpcai_jax report",
        "",
        *(f"Note: {note}" for note in collection.notes),
        *([""] if collection.notes else []),
        f"Records read from {_inputs(collection.inputs)}: "
        f"{used} used ({counts or 'none'}), {len(collection.skipped)} skipped.",
    ]
    if "train" in collection.majority:
        lines += ["", configuration(collection.majority["train"])]
    return "\n".join(lines)
