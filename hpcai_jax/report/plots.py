"""The report's PNG plots, drawn with matplotlib's Agg renderer from `series` data only.

Figures are built with `matplotlib.figure.Figure`, not pyplot: no global state, no display and
no backend to select, so a report can be written from a sweep, a test or a headless node. Axes
carry units with SI prefixes (FLOP/s, s); bandwidth stays in GB/s, the unit BabelStream prints.
Repeats of one configuration (runs that differ only in their seed) are drawn as one point, their
mean, with an error bar of the mean's 95 % Student-t interval (`repeats.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import (
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    PercentFormatter,
)

from hpcai_jax.report.repeats import summarise
from hpcai_jax.report.series import (
    MfuRow,
    QualityCurve,
    RoofPoint,
    ScalePoint,
    StreamRun,
    TradePoint,
    metric_label,
    sys_scale_label,
)
from hpcai_jax.units import prefix, seconds

DPI = 100
GRID = {"alpha": 0.3, "linewidth": 0.6}
CAPSIZE = 3  # error bars' caps, in points


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI)


def _config(p) -> tuple:
    """What makes two points one configuration (never pooled across: only repeats of one
    configuration, differing in their seed, make an interval)."""
    return (p.sys_scale, p.m, p.p, p.members_per_device, p.model_parallel)


def _merged(points: list, key: Callable) -> list[list]:
    """`points` that share key(p) (repeats of one configuration) together, by key."""
    by_key: dict = {}
    for p in points:
        by_key.setdefault(key(p), []).append(p)
    return [by_key[k] for k in sorted(by_key)]


def _mean(points: list, value: Callable) -> tuple[float | None, float]:
    """value(p)'s mean over `points` and its 95 % interval's half width (0 for one figure)."""
    s = summarise(value(p) for p in points)
    return s.mean, s.half_width or 0.0


def _errorbar(ax, x: list, y: list, yerr: list, fmt: str, xerr: list | None = None, **style):
    """ax.errorbar where some point is a mean of repeats; a plain ax.plot else (the same line,
    and the legend keeps the order the lines were drawn in)."""
    yerr, xerr = (e if e and any(e) else None for e in (yerr, xerr))
    if yerr is None and xerr is None:
        return ax.plot(x, y, fmt, **style)
    return ax.errorbar(x, y, yerr=yerr, xerr=xerr, fmt=fmt, capsize=CAPSIZE, **style)


def _plain(value: float, _pos=None) -> str:
    """A tick as people write it: 0.5, 20, 300, 4000 (no 2×10¹)."""
    return f"{value:g}" if value < 1e5 else f"{value:.0e}".replace("e+0", "e")


def _plain_log(axis) -> None:
    """Log-axis ticks at 1, 2 and 5 × 10^k, written plainly, no minor labels."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())


def _sys_scale_axis(ax, scales: list[int], label: str) -> None:
    ax.set_xlabel(label)
    ticks = sorted(set(scales))
    if len(ticks) <= 12:
        ax.set_xticks(ticks)
    else:  # a long sweep: let matplotlib pick a readable subset
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, max(scales) * 1.08 + 0.5)


def scalability(series: dict[int, list[ScalePoint]], path: Path, title: str) -> None:
    """FLOPS and VFLOPS against Sys_scale on one axis in one unit, one colour per P_degree,
    FLOPS's ideal (the smallest Sys_scale's figure scaled linearly, where a series has two
    Sys_scales) dotted, and the penalty VFLOPS pays (VFLOPS / FLOPS) written at each VFLOPS
    point; a log axis when VFLOPS is under a tenth of FLOPS (the paper's Fig. 5)."""
    points = [p for pts in series.values() for p in pts]
    fig = Figure(figsize=(7.6, 5.4), layout="constrained")
    ax = fig.add_subplot()
    values = [v for p in points for v in (p.flops, p.vflops, p.ideal_flops) if v is not None]
    scale, unit = prefix(values)
    flops = [p.flops for p in points if p.flops]
    vflops = [p.vflops for p in points if p.vflops]
    log = bool(vflops and flops) and min(vflops) < 0.1 * max(flops)
    for j, (p_degree, pts) in enumerate(series.items()):
        have = [p for p in pts if p.flops is not None]
        at = _merged(have, _config)
        flops_at = [_mean(g, lambda p: p.flops / scale) for g in at]
        _errorbar(
            ax,
            [g[0].sys_scale for g in at],
            [m for m, _ in flops_at],
            [e for _, e in flops_at],
            "o-",
            color=f"C{j}",
            label=f"FLOPS, P_degree = {p_degree}",
        )
        _label_m(ax, at, [m for m, _ in flops_at], f"C{j}")
        _ideals(ax, j, have, scale)
        _vflops(ax, j, p_degree, have, scale)
    _sys_scale_axis(ax, [p.sys_scale for p in points], sys_scale_label(points))
    if log:
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
    else:
        ax.set_ylim(bottom=0)
    ax.set_ylabel(f"FLOP/s [{unit}FLOP/s]")
    ax.set_title(
        "FLOPS and VFLOPS against Sys_scale (VFLOPS = FLOPS × penalty, written at each point)",
        fontsize="medium",
    )
    ax.grid(which="major", **GRID)
    # Under the axes: inside it would hide points.
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle(title, fontsize="medium")
    _save(fig, path)


def _label_m(ax, at: list[list], means: list, color: str) -> None:
    """Writes M beside each point where several configurations share one Sys_scale (an
    ablation's members on the same devices): separate points, never one pooled."""
    if len(at) == len({g[0].sys_scale for g in at}):
        return
    for g, mean in zip(at, means, strict=True):
        ax.annotate(
            f"M={g[0].m}",
            (g[0].sys_scale, mean),
            textcoords="offset points",
            xytext=(6, 0),
            fontsize="x-small",
            color=color,
        )


def _ideals(ax, j: int, have: list[ScalePoint], scale: float) -> None:
    """Series `j`'s ideal FLOPS and VFLOPS lines, where it has two Sys_scales to draw them at."""
    ideal = sorted({(p.sys_scale, p.ideal_flops) for p in have if p.ideal_flops})
    _ideal(ax, ideal, scale, ":", f"C{j}", "ideal FLOPS")
    ideal_v = sorted({(p.sys_scale, p.ideal_vflops) for p in have if p.ideal_vflops})
    _ideal(ax, ideal_v, scale, "-.", f"C{j}", "ideal VFLOPS", alpha=0.7)


def _ideal(ax, ideal: list[tuple], scale: float, fmt: str, color: str, name: str, **style) -> None:
    if len(ideal) >= 2:
        ax.plot(
            [s for s, _ in ideal],
            [v / scale for _, v in ideal],
            fmt,
            color=color,
            label=f"{name}: linear from Sys_scale = {ideal[0][0]}",
            **style,
        )


def _vflops(ax, j: int, p_degree: int, have: list[ScalePoint], scale: float) -> None:
    """Series `j`'s VFLOPS line, the band down from its FLOPS that the penalty takes, and the
    penalty written at each point."""
    both = _merged([p for p in have if p.vflops is not None], _config)
    if not both:
        return
    x = [g[0].sys_scale for g in both]
    f = [_mean(g, lambda p: p.flops / scale)[0] for g in both]
    v = [_mean(g, lambda p: p.vflops / scale) for g in both]
    _errorbar(
        ax,
        x,
        [m for m, _ in v],
        [e for _, e in v],
        "s--",
        color=f"C{j}",
        mfc="none",
        label=f"VFLOPS, P_degree = {p_degree}",
    )
    band = "what the penalty takes (FLOPS - VFLOPS)" if j == 0 else None
    ax.fill_between(x, [m for m, _ in v], f, color=f"C{j}", alpha=0.08, label=band)
    for s, fm, (vm, _) in zip(x, f, v, strict=True):
        ax.annotate(
            f"× {vm / fm:.2g}",
            (s, vm),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize="small",
            color=f"C{j}",
        )


def _target(ax, points) -> None:
    for target in sorted({p.target for p in points if p.target is not None}):
        ax.axhline(target, color="0.3", ls=":", lw=1.2, label=f"target {target:g}")


def tradeoff(points: list[TradePoint], sys_scale: int, metric: str, path: Path) -> None:
    """Ensemble quality (and the member mean) against training time for the (M, P_degree)
    splits of one Sys_scale (the paper's Fig. 7), each point labelled (M, P), with the target."""
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.add_subplot()
    scale, unit = seconds([p.train_s for p in points])
    splits = _merged(points, lambda p: (p.m, p.p, p.members_per_device))
    x = [_mean(g, lambda p: p.train_s / scale) for g in splits]
    y = [_mean(g, lambda p: p.ensemble) for g in splits]
    xs, ys = [m for m, _ in x], [m for m, _ in y]
    style = {"color": "C0", "ms": 8, "label": "bagged ensemble"}
    _errorbar(ax, xs, ys, [e for _, e in y], "o", xerr=[e for _, e in x], **style)
    mean = [(xm, *_mean(g, lambda p: p.member_mean)) for xm, g in zip(xs, splits, strict=True)]
    mean = [(xm, m, e) for xm, m, e in mean if m is not None]
    if mean:
        style = {"color": "C1", "mfc": "none", "ms": 7, "label": "mean of its members"}
        mx, my, me = (list(c) for c in zip(*mean, strict=True))
        _errorbar(ax, mx, my, me, "s", **style)
    for g, xm, ym in zip(splits, xs, ys, strict=True):
        runs = f", {len(g)} runs" if len(g) > 1 else ""
        ax.annotate(
            f"(M={g[0].m}, P={g[0].p}{runs})",
            (xm, ym),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize="small",
        )
    _target(ax, points)
    ax.margins(x=0.2, y=0.15)
    ax.set_xlabel(f"training time (timed steps) [{unit}]")
    ax.set_ylabel(f"held-out {metric_label(metric)}")
    title = f"Quality against training time, Sys_scale = {sys_scale}"
    if any(p.members_per_device > 1 for p in points):  # not Fig. 7's split of devices
        title += "\nmembers sharing the devices (not Fig. 7: no split of devices)"
    ax.set_title(title, fontsize="medium")
    ax.grid(**GRID)
    ax.legend(fontsize="small")
    _save(fig, path)


def _quality_lines(ax, points: list[TradePoint], x, color: str, name: str) -> None:
    """Ensemble, member mean, out-of-bag and every member's quality of `points` against x(p);
    repeats at one x drawn as their mean with its interval."""
    lines = (
        ("ensemble", "ensemble", "o-", {}),
        ("member mean", "member_mean", "s--", {"mfc": "none", "alpha": 0.8}),
        ("out of bag", "oob", "^:", {"mfc": "none", "alpha": 0.8}),
    )
    for label, key, fmt, style in lines:
        at = _merged(
            [p for p in points if getattr(p, key) is not None], lambda p: (x(p), *_config(p))
        )
        if at:
            y = [_mean(g, lambda p, key=key: getattr(p, key)) for g in at]
            _errorbar(
                ax,
                [x(g[0]) for g in at],
                [m for m, _ in y],
                [e for _, e in y],
                fmt,
                color=color,
                label=f"{name}: {label}",
                **style,
            )
    members = [(x(p), q) for p in points for q in p.members]
    if members:
        ax.plot(*zip(*members, strict=True), ".", color=color, alpha=0.35, ms=5)


def quality_against_m(
    at_scale: dict[int, list[TradePoint]],
    by_p: dict[int, list[TradePoint]],
    metric: str,
    path: Path,
) -> None:
    """Bagging's claim: the ensemble beats its members, more so as M grows. Left: quality
    against M at each fixed Sys_scale (the trade-off splits); right: against Sys_scale at each
    fixed P_degree (the scalability sweep, M growing). Solid: ensemble; dashed: member mean;
    dotted: out of bag; dots: each member."""
    panels = [p for p in (at_scale, by_p) if p]
    fig = Figure(figsize=(6.0 * len(panels), 5.0), layout="constrained")
    axes = [fig.add_subplot(1, len(panels), i + 1) for i in range(len(panels))]
    i = 0
    if at_scale:
        ax = axes[i]
        for j, (s, pts) in enumerate(at_scale.items()):
            _quality_lines(ax, pts, lambda p: p.m, f"C{j}", f"Sys_scale = {s}")
        ms = sorted({p.m for pts in at_scale.values() for p in pts})
        ax.set_xticks(ms)
        ax.set_xlabel("ensemble size M (P_degree = Sys_scale / M)")
        ax.set_title("At a fixed Sys_scale", fontsize="medium")
        i += 1
    if by_p:
        ax = axes[i]
        for j, (p_degree, pts) in enumerate(by_p.items(), start=len(at_scale)):
            _quality_lines(ax, pts, lambda p: p.sys_scale, f"C{j}", f"P_degree = {p_degree}")
            for g in _merged(pts, _config):
                ax.annotate(
                    f"M={g[0].m}",
                    (g[0].sys_scale, _mean(g, lambda p: p.ensemble)[0]),
                    textcoords="offset points",
                    xytext=(5, 5),
                    fontsize="small",
                )
        every = [p for pts in by_p.values() for p in pts]
        _sys_scale_axis(ax, [p.sys_scale for p in every], sys_scale_label(every))
        ax.set_title("At a fixed P_degree, M growing", fontsize="medium")
    every = [p for panel in panels for pts in panel.values() for p in pts]
    for ax in axes:
        _target(ax, every)
        ax.set_ylabel(f"held-out {metric_label(metric)}")
        ax.grid(**GRID)
    handles, labels = {}, []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.legend(
        [handles[k] for k in labels], labels, loc="outside lower center", ncols=3, fontsize="small"
    )
    fig.suptitle(
        f"Ensemble quality against M (dots: each member's {metric_label(metric)})",
        fontsize="medium",
    )
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
        ax.set_ylabel(f"held-out {metric_label(metric)}")
        ax.grid(**GRID)
    fig.axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs: 1, 2, ...
    fig.axes[0].set_title("Quality against epochs")
    fig.axes[1].set_title("Quality against wall time (dotted: time to target)")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize="small")
    _save(fig, path)


def member_curves(curves: list[QualityCurve], metric: str, path: Path) -> None:
    """Each run's held-out quality per member (thin) and of the ensemble (thick) against epochs,
    one panel per run: whether the ensemble beats every member, and which member lags."""
    cols = min(3, len(curves))
    rows = -(-len(curves) // cols)
    fig = Figure(figsize=(3.8 * cols, 2.9 * rows + 0.4), layout="constrained")
    for k, c in enumerate(curves):
        ax = fig.add_subplot(rows, cols, k + 1)
        epochs = [p.epoch for p in c.points]
        width = max((len(p.members) for p in c.points), default=0)
        for m in range(width):
            pts = [(p.epoch, p.members[m]) for p in c.points if m < len(p.members)]
            pts = [(x, y) for x, y in pts if y is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), "-", lw=0.9, alpha=0.6, color=f"C{m % 10}")
        ax.plot(epochs, [p.ensemble for p in c.points], "o-", lw=2.2, color="k", label="ensemble")
        if c.target is not None:
            ax.axhline(c.target, color="0.3", ls=":", lw=1.0)
        ax.set_title(f"{c.run_id} ({width} member{'' if width == 1 else 's'})", fontsize="small")
        ax.set_xlabel("epochs trained")
        ax.set_ylabel(f"held-out {metric_label(metric)}", fontsize="small")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(**GRID)
    fig.suptitle("Each member (thin, one colour each) and the ensemble (black)", fontsize="small")
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
    title = "Model FLOPs utilisation per run"
    if any(r.shared_cores for r in rows):  # forced CPU devices split the same cores
        title += (
            "\nCPU devices share the host's cores: per-device figures are not comparable "
            "across device counts"
        )
    ax.set_title(title, fontsize="medium")
    ax.grid(axis="x", **GRID)
    fig.legend(loc="outside lower center", ncols=len(kinds), fontsize="small")
    _save(fig, path)


def roofline(points: list[RoofPoint], path: Path) -> None:
    """Every run's step on its roofline (log-log, per device): the memory roof (bandwidth ×
    intensity) up to the ridge, the compute roof (matmul peak) after it, both measured by the
    run, with their values in the legend; the step's achieved FLOP/s (filled) and what the roof
    allows at its intensity (hollow), one colour per run."""
    ridges = [p.peak / p.bandwidth for p in points]
    low = min(min(p.intensity for p in points), min(ridges)) / 8
    high = max(max(p.intensity for p in points), max(ridges)) * 8
    scale, unit = prefix([p.peak for p in points])
    fig = Figure(figsize=(8.0, 5.6), layout="constrained")
    ax = fig.add_subplot()
    for j, (p, ridge) in enumerate(zip(points, ridges, strict=True)):
        gb = p.bandwidth / 1e9
        ax.loglog(
            [low, ridge, high],
            [low * p.bandwidth / scale, p.peak / scale, p.peak / scale],
            color=f"C{j}",
            lw=1.0,
            alpha=0.6,
            label=f"{p.run_id}: peak {p.peak / scale:.3g} {unit}FLOP/s, {gb:.3g} GB/s, "
            f"ridge {ridge:.3g} FLOP/B",
        )
        ax.plot(p.intensity, p.attainable / scale, "o", mfc="none", color=f"C{j}", ms=9)
        if p.achieved:
            ax.plot(p.intensity, p.achieved / scale, "o", color=f"C{j}", ms=6)
            # Runs of one configuration sit on one another: each point names its run.
            ax.annotate(
                p.run_id,
                (p.intensity, p.achieved / scale),
                textcoords="offset points",
                xytext=(8, -3),
                fontsize="x-small",
                color=f"C{j}",
            )
    ax.plot([], [], "o", color="0.4", ms=6, label="achieved by the step (filled)")
    ax.plot([], [], "o", mfc="none", color="0.4", ms=9, label="attainable at its intensity")
    _plain_log(ax.xaxis)
    _plain_log(ax.yaxis)
    ax.set_xlabel("arithmetic intensity [FLOP/byte] (XLA: FLOPs / bytes accessed of the step)")
    ax.set_ylabel(f"per device [{unit}FLOP/s]")
    devices = sorted({p.device for p in points if p.device}) or ["?"]
    ax.set_title(f"Roofline per device: {', '.join(devices)}", fontsize="medium")
    ax.grid(which="major", **GRID)
    fig.legend(loc="outside lower center", ncols=1, fontsize="small")
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
            hatch="//" if run.below_rule else None,  # a cache's figure as much as memory's
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


def paper_fig5(full: list, points: list, path: Path) -> None:
    """Fig. 5's shape (report/paper.py): left, quality against k from the sub-ensembles of the
    M = 8 runs (first k and random k-subsets, mean with its 95 % interval over the seeds) and
    the member mean, best member and out-of-bag estimate at k = M; right, FLOPS and VFLOPS per
    M point over its seeds (report/paper.Fig5Point), with no ideal line (devices share the
    host's cores)."""
    fig = Figure(figsize=(11.0, 4.6), layout="constrained")
    ax = fig.add_subplot(1, 2, 1)
    subs = [s for r in full for s in r.rec.quality.sub_ensembles or []]
    ks = sorted({s.k for s in subs})
    for key, fmt, name in (("first", "o-", "first k members"), ("random_mean", "s--", "random k")):
        at = [_mean([s for s in subs if s.k == k], lambda s, key=key: getattr(s, key)) for k in ks]
        _errorbar(ax, ks, [m for m, _ in at], [e for _, e in at], fmt, label=name, mfc="none")
    m = full[0].m
    extras = (
        ("member mean", "v", lambda q: q.member_mean),
        ("best member", "^", lambda q: max(v for v in q.members if v is not None)),
        ("out of bag", "D", lambda q: q.oob.quality if q.oob else None),
    )
    for name, fmt, value in extras:
        mean, err = _mean(full, lambda r, value=value: value(r.rec.quality))
        if mean is not None:
            _errorbar(ax, [m + 0.15], [mean], [err], fmt, label=f"{name} (M = {m} runs)")
    ax.set_xticks(ks)
    ax.set_xlabel(f"k: members of the sub-ensemble (of each M = {m} run)")
    ax.set_ylabel("held-out quality")
    ax.set_title(
        f"Quality against k, mean ± 95 % interval over {len(full)} seeds", fontsize="medium"
    )
    ax.grid(**GRID)
    ax.legend(fontsize="small")
    _paper_flops(fig.add_subplot(1, 2, 2), points)
    _save(fig, path)


def _paper_flops(ax, points: list) -> None:
    """FLOPS and VFLOPS per Fig. 5 point (report/paper.Fig5Point: a FLOPS-only point's VFLOPS
    from the full runs' random k-subsets), mean with its 95 % interval over its seeds."""
    runs = [r for p in points for r in p.runs]
    scale, unit = prefix([r.rec.metrics.flops_per_s for r in runs])
    ms = [p.runs[0].m for p in points]
    for key, fmt, name in (("flops", "o-", "FLOPS"), ("vflops", "s--", "VFLOPS")):
        shown = [(m, getattr(p, key)) for m, p in zip(ms, points, strict=True)]
        shown = [(m, f) for m, f in shown if f is not None and f.mean is not None]
        x = [m for m, _ in shown]
        y = [f.mean / scale for _, f in shown]
        err = [(f.half_width or 0.0) / scale for _, f in shown]
        _errorbar(ax, x, y, err, fmt, label=name, mfc="none")
    ax.set_xticks(ms)
    ax.set_xlabel("M (P_degree fixed)")
    ax.set_ylabel(f"[{unit}FLOP/s]")
    ax.set_ylim(bottom=0)
    shared = any(r.rec.provenance.backend == "cpu" for r in runs)
    title = "FLOPS and VFLOPS per M, mean ± 95 % interval over seeds"
    if any(p.from_subsets for p in points):
        title += "\nVFLOPS of a FLOPS-only point: the quality of the full runs' k-subsets"
    if shared:
        title += "\ndevices share the host's CPU cores: FLOPS stays flat, no ideal line"
    ax.set_title(title, fontsize="small")
    ax.grid(**GRID)
    ax.legend(fontsize="small")
