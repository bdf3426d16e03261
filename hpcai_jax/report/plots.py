"""The report's PNG plots, drawn with matplotlib's Agg renderer from `series` data only.

Figures are built with `matplotlib.figure.Figure`, not pyplot: no global state, no display and
no backend to select, so a report can be written from a sweep, a test or a headless node. Axes
carry units with SI prefixes (FLOP/s, s); bandwidth stays in GB/s, the unit BabelStream prints.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from hpcai_jax.report.series import (
    MfuRow,
    QualityCurve,
    RoofPoint,
    ScalePoint,
    StreamRun,
    TradePoint,
)
from hpcai_jax.report.units import prefix, seconds

DPI = 100
GRID = {"alpha": 0.3, "linewidth": 0.6}


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI)


def _sys_scale_axis(ax, scales: list[int]) -> None:
    ax.set_xlabel("Sys_scale (devices = M × P_degree)")
    ticks = sorted(set(scales))
    if len(ticks) <= 12:
        ax.set_xticks(ticks)
    else:  # a long sweep: let matplotlib pick a readable subset
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, max(scales) * 1.08 + 0.5)


def scalability(series: dict[int, list[ScalePoint]], path: Path, title: str) -> None:
    """FLOPS (and VFLOPS, where any run has it) against Sys_scale, one line per P_degree, each
    with its ideal: the smallest Sys_scale's figure scaled linearly (the paper's Fig. 5)."""
    panels = [("FLOPS", "flops", "ideal_flops")]
    if any(p.vflops is not None for points in series.values() for p in points):
        panels.append(("VFLOPS", "vflops", "ideal_vflops"))
    fig = Figure(figsize=(5.2 * len(panels), 5.0), layout="constrained")
    points = [p for pts in series.values() for p in pts]
    for i, (name, key, ideal_key) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        scale, unit = prefix([getattr(p, k) for p in points for k in (key, ideal_key)])
        for j, (p_degree, pts) in enumerate(series.items()):
            have = [p for p in pts if getattr(p, key) is not None]
            ax.plot(
                [p.sys_scale for p in have],
                [getattr(p, key) / scale for p in have],
                "o-",
                color=f"C{j}",
                label=f"measured, P_degree = {p_degree}",
            )
            ideal = sorted({(p.sys_scale, getattr(p, ideal_key)) for p in have})
            if len(ideal) >= 2:
                ax.plot(
                    [s for s, _ in ideal],
                    [v / scale for _, v in ideal],
                    "--",
                    color=f"C{j}",
                    alpha=0.7,
                    label=f"ideal: linear from Sys_scale = {ideal[0][0]}",
                )
        _sys_scale_axis(ax, [p.sys_scale for p in points])
        ax.set_ylim(bottom=0)
        ax.set_ylabel(f"{name} [{unit}FLOP/s]")
        ax.set_title(f"{name} against Sys_scale")
        ax.grid(**GRID)
    # One legend for both panels, under them: inside an axes it would hide points.
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle(title, fontsize="medium")
    _save(fig, path)


def tradeoff(points: list[TradePoint], sys_scale: int, metric: str, path: Path) -> None:
    """Ensemble quality (and the member mean) against training time for the (M, P_degree)
    splits of one Sys_scale (the paper's Fig. 7), each point labelled (M, P)."""
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.add_subplot()
    scale, unit = seconds([p.train_s for p in points])
    x = [p.train_s / scale for p in points]
    ax.plot(x, [p.ensemble for p in points], "o", color="C0", ms=8, label="bagged ensemble")
    mean = [(p.train_s / scale, p.member_mean) for p in points if p.member_mean is not None]
    if mean:
        ax.plot(
            *zip(*mean, strict=True), "s", color="C1", mfc="none", ms=7, label="mean of its members"
        )
    for p in points:
        ax.annotate(
            f"(M={p.m}, P={p.p})",
            (p.train_s / scale, p.ensemble),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize="small",
        )
    ax.margins(x=0.2, y=0.25)
    ax.set_xlabel(f"training time (timed steps) [{unit}]")
    ax.set_ylabel(f"held-out {metric}")
    ax.set_title(f"Quality against training time, Sys_scale = {sys_scale}")
    ax.grid(**GRID)
    ax.legend(fontsize="small")
    _save(fig, path)


def quality_curves(curves: list[QualityCurve], metric: str, path: Path) -> None:
    """Held-out quality during training, against epochs and against wall time since run_start:
    each run's ensemble (solid) and member mean (dashed) in its colour, the target as a dotted
    line, and a run's time to target as a vertical mark on the time panel."""
    fig = Figure(figsize=(11.0, 4.6), layout="constrained")
    scale, unit = seconds([p.wall_s for c in curves for p in c.points])
    panels = (
        ("epochs trained", lambda p: p.epoch),
        (f"wall time since run_start [{unit}]", lambda p: p.wall_s / scale),
    )
    for i, (xlabel, x) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1, sharey=fig.axes[0] if i else None)
        for j, c in enumerate(curves):
            ax.plot(
                [x(p) for p in c.points],
                [p.ensemble for p in c.points],
                "o-",
                color=f"C{j}",
                label=f"{c.run_id}: ensemble",
            )
            mean = [(x(p), p.member_mean) for p in c.points if p.member_mean is not None]
            if mean:
                ax.plot(
                    *zip(*mean, strict=True),
                    "s--",
                    color=f"C{j}",
                    mfc="none",
                    alpha=0.7,
                    label=f"{c.run_id}: member mean",
                )
            if i and c.time_to_target_s is not None:
                ax.axvline(c.time_to_target_s / scale, color=f"C{j}", ls=":", lw=1.0)
        for target in sorted({c.target for c in curves if c.target is not None}):
            ax.axhline(target, color="0.3", ls=":", lw=1.2, label=f"target {target:g}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"held-out {metric}")
        ax.grid(**GRID)
    fig.axes[0].set_title("Quality against epochs")
    fig.axes[1].set_title("Quality against wall time (dotted: time to target)")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize="small")
    _save(fig, path)


def mfu(rows: list[MfuRow], path: Path) -> None:
    """Model FLOPs utilisation per run: against the measured matmul peak and, where the device
    has one, the datasheet peak; horizontal bars so that long run ids stay readable."""
    kinds = [
        (name, key)
        for name, key in (("measured matmul peak", "measured"), ("datasheet peak", "datasheet"))
        if any(getattr(r, key) is not None for r in rows)
    ]
    height = 0.8 / len(kinds)
    fig = Figure(figsize=(7.5, 1.6 + 0.5 * len(rows) * len(kinds)), layout="constrained")
    ax = fig.add_subplot()
    for i, (name, key) in enumerate(kinds):
        have = [(j, getattr(r, key)) for j, r in enumerate(rows) if getattr(r, key) is not None]
        bars = ax.barh(
            [j + (i - (len(kinds) - 1) / 2) * height for j, _ in have],
            [v for _, v in have],
            height * 0.9,
            color=f"C{i}",
            label=f"against the {name}",
        )
        ax.bar_label(bars, [f"{v:.1%}" for _, v in have], padding=3, fontsize="small")
    ax.set_yticks(range(len(rows)), [f"{r.run_id}\n(Sys_scale {r.sys_scale})" for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.set_xlabel("MFU = FLOPS per device / peak FLOP/s per device")
    ax.set_xlim(0, max(getattr(r, k) or 0 for r in rows for _, k in kinds) * 1.18)
    ax.set_title("Model FLOPs utilisation per run")
    ax.grid(axis="x", **GRID)
    fig.legend(loc="outside lower center", ncols=len(kinds), fontsize="small")
    _save(fig, path)


def roofline(point: RoofPoint, path: Path) -> None:
    """The device's roofline (log-log): the memory roof (bandwidth × intensity) up to the ridge,
    the compute roof (matmul peak) after it, and the training step at its arithmetic intensity."""
    ridge = point.peak / point.bandwidth
    low = min(point.intensity, ridge) / 20
    high = max(point.intensity, ridge) * 20
    scale, unit = prefix([point.peak])
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.loglog(
        [low, ridge, high],
        [low * point.bandwidth / scale, point.peak / scale, point.peak / scale],
        color="C0",
        label="roofline",
    )
    ax.axvline(ridge, color="C0", ls=":", lw=0.8)
    ax.plot(
        point.intensity,
        point.attainable / scale,
        "o",
        mfc="none",
        color="C1",
        label="attainable at the step's intensity",
    )
    if point.achieved:
        ax.plot(point.intensity, point.achieved / scale, "o", color="C2", label="achieved")
    ax.set_xlabel("arithmetic intensity [FLOP/byte] (XLA: FLOPs / bytes accessed of the step)")
    ax.set_ylabel(f"per device [{unit}FLOP/s]")
    ax.set_title(f"{point.run_id}: the training step on the roofline")
    ax.grid(which="both", **GRID)
    ax.legend(fontsize="small", loc="lower right")
    _save(fig, path)


def _grouped_bars(ax, runs: list[StreamRun], value) -> None:
    """One group per kernel, one bar per run; run i is colour Ci in every panel."""
    keys = list(dict.fromkeys(k.key for r in runs for k in r.kernels))
    labels = {k.key: k.label for r in runs for k in r.kernels}
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        have = [(keys.index(k.key), value(k)) for k in run.kernels if value(k) is not None]
        ax.bar(
            [x + (i - (len(runs) - 1) / 2) * width for x, _ in have],
            [v for _, v in have],
            width,
            color=f"C{i}",
            label=run.label,
        )
    ax.set_xticks(range(len(keys)), [labels[k] for k in keys])
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.grid(axis="y", **GRID)


def stream(runs: list[StreamRun], path: Path) -> None:
    """Bandwidth per kernel (fastest call), one bar per run; beside it each device's share,
    when any run's arrays spanned several devices."""
    panels = [("bandwidth [GB/s]", "STREAM bandwidth per kernel", lambda k: k.gb_per_s)]
    if any(r.num_devices > 1 for r in runs):
        panels.append(
            (
                "bandwidth per device [GB/s]",
                "Per device (run's figure / its devices)",
                lambda k: k.gb_per_s_per_device,
            )
        )
    fig = Figure(figsize=(6.2 * len(panels), 5.0), layout="constrained")
    for i, (ylabel, title, value) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        _grouped_bars(ax, runs, value)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    # Under the panels: inside an axes the legend hides the bars.
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    _save(fig, path)


def stream_per_process(run: StreamRun, path: Path) -> None:
    """--stream_devices=one on several processes: each process's device measured on its own."""
    keys = list(run.per_process[0])
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(run.per_process)
    for i, rates in enumerate(run.per_process):
        ax.bar(
            [x + (i - (len(run.per_process) - 1) / 2) * width for x in range(len(keys))],
            [rates[k] for k in keys],
            width,
            color=f"C{i}",
            label=f"process {i}",
        )
    labels = {k.key: k.label for k in run.kernels}
    ax.set_xticks(range(len(keys)), [labels.get(k, k) for k in keys])
    ax.set_ylabel("bandwidth [GB/s]")
    ax.set_title(f"STREAM per process's device: {run.run_id}")
    ax.grid(axis="y", **GRID)
    fig.legend(loc="outside lower center", ncols=min(4, len(run.per_process)), fontsize="small")
    _save(fig, path)
