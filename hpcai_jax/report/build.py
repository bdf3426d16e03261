"""`write_report`: records in, `report.md` and its PNG plots out. The one place that decides
which plots a set of records gets and what their files are called."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hpcai_jax.report import markdown, output, paper, plots, repeats, series
from hpcai_jax.report.collect import Collection, collect

REPORT = "report.md"
# The sections computed over the plotted training records: each says, in one line, that it
# leaves the paper plan's records to the paper's section (markdown.aside).
OVER_TRAINING = frozenset(markdown.SECTIONS[1:9]) | {markdown.SECTIONS[10]}


def default_out(paths: list[str]) -> Path:
    """`report/` under the first results directory (the directory of a first record file)."""
    first = Path(paths[0])
    return (first if first.is_dir() else first.parent) / "report"


def _title(collection: Collection) -> str:
    shared = collection.majority.get("train", {})
    return (
        f"{shared.get('model.model', '?')} on {shared.get('data.dataset', '?')}, batch "
        f"{shared.get('train.batch_size', '?')} per {markdown.batch_unit(shared)}, "
        f"{shared.get('provenance.device_kind', '?')} devices"
    )


def render(collection: Collection, folder: Path) -> str:
    """Draws the plots into `folder` and returns the markdown that shows them."""
    train, parts = collection.train, [markdown.header(collection)]
    metric = series.quality_metric(train) or "quality"
    trade = series.tradeoff(train)
    bodies = [
        [markdown.runs(collection)],
        [_scalability(collection, folder)],
        _tradeoff(trade, metric, folder),
        [_quality_against_m(trade, metric, folder)],
        _quality_curves(train, metric, folder),
        [_mfu(train, folder)],
        [_roofline(train, folder)],
        [markdown.communication(series.communication(train))],
        [markdown.machine(series.machine(train))],
        [_stream(collection, folder)],
        [_repeats(train, metric)],
        [markdown.skipped(collection.skipped)],
    ]
    aside = markdown.aside(collection)
    for heading, body in zip(markdown.SECTIONS, bodies, strict=True):
        caption = markdown.caption(heading, collection)
        left_out = [aside] if aside and heading in OVER_TRAINING else []
        parts += [markdown.heading(heading), *left_out, *([caption] if caption else []), *body]
        if heading == markdown.SECTIONS[0]:  # the paper's experiments, where their records are
            parts += paper.section(collection.aside, folder, plots.paper_fig5)
    return "\n\n".join(parts) + "\n"


def _scalability(collection: Collection, folder: Path) -> str:
    scale = series.scalability(collection.train)
    png = None
    if scale:
        png = "scalability.png"
        plots.scalability(scale, folder / png, _title(collection))
    return markdown.scalability(scale, png)


def _tradeoff(trade: dict, metric: str, folder: Path) -> list[str]:
    """The trade-off section's parts: a plot for each Sys_scale with two points to draw."""
    drawn = {s: series.plottable(points) for s, points in trade.items()}
    drawn = {s: points for s, points in drawn.items() if len(points) >= 2}
    parts = [markdown.tradeoff_intro(len(drawn))]
    for s, points in drawn.items():
        png = f"tradeoff_sys{s}.png"
        plots.tradeoff(points, s, metric, folder / png)
        parts.append(markdown.tradeoff(s, trade[s], metric, png, len(points)))
    return parts


def _quality_against_m(trade: dict, metric: str, folder: Path) -> str:
    """Drawn where a Sys_scale has evaluated runs at several M, or a P_degree at several
    Sys_scale."""
    quality = [p for points in trade.values() for p in points if p.ensemble is not None]
    at_scale = {s: pts for s, pts in trade.items() if len({p.m for p in pts if p.ensemble}) > 1}
    at_scale = {s: [p for p in pts if p.ensemble is not None] for s, pts in at_scale.items()}
    by_p = series.by_parallel_degree(quality)
    by_p = {p: pts for p, pts in by_p.items() if len({t.sys_scale for t in pts}) > 1}
    png = None
    if at_scale or by_p:
        png = "quality_against_m.png"
        plots.quality_against_m(at_scale, by_p, metric, folder / png)
    return markdown.quality_against_m(quality, metric, png)


def _quality_curves(train: list, metric: str, folder: Path) -> list[str]:
    """The quality curves' section, with the links to the runs' observed files after them."""
    curves = series.quality_curves(train)
    png = members_png = None
    if curves:
        png, members_png = "quality_curve.png", "quality_per_member.png"
        plots.quality_curves(curves, metric, folder / png)
        plots.member_curves(curves, metric, folder / members_png)
    parts = [markdown.quality_curves(curves, metric, png, members_png)]
    # The report's folder is a sibling of `folder` (output.staged): the same relative links.
    links = markdown.observed(series.observed(train), lambda p: os.path.relpath(p, folder))
    return parts + ([links] if links else [])


def _mfu(train: list, folder: Path) -> str:
    rows = series.mfu(train)
    png = None
    if any(r.measured is not None or r.datasheet is not None for r in rows):
        png = "mfu.png"
        plots.mfu(rows, folder / png)
    return markdown.mfu(rows, png)


def _roofline(train: list, folder: Path) -> str:
    roofs = series.roofline(train)
    png = None
    if roofs:
        png = "roofline.png"
        plots.roofline(roofs, folder / png)
    return markdown.roofline(roofs, png)


def _stream(collection: Collection, folder: Path) -> str:
    """The STREAM plot of every run, and one per run of several processes."""
    runs = series.stream(collection.stream)
    png, per_process = None, {}
    if any(k.gb_per_s is not None for r in runs for k in r.kernels):
        png = "stream.png"
        plots.stream(runs, folder / png)
    for r in runs:
        if r.per_process and len(r.per_process) > 1:
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", r.run_id)  # a plain link target
            per_process[r.run_id] = f"stream_{safe}_per_process.png"
            plots.stream_per_process(r, folder / per_process[r.run_id])
    return markdown.stream(runs, png, per_process)


def _repeats(train: list, metric: str) -> str:
    found = repeats.groups(train)
    summarised = repeats.repeated(found)
    return markdown.repeats(summarised, len(found) - len(summarised), metric)


def write_report(paths: list[str], out: str | Path | None = None) -> Path:
    """Writes `report.md` and its plots for the records under `paths` into `out` (default:
    `report/` under the first results directory); returns the report's path.

    Raises hpcai_jax.errors.UsageError (one line naming the path or --out) for a missing path,
    no records, or a directory it cannot write; nothing is left half-written.
    """
    return build_report(paths, out)[0]


def build_report(
    paths: list[str], out: str | Path | None = None, runs: tuple[str, ...] = ()
) -> tuple[Path, list[str]]:
    """`write_report` of the records `runs` names (all: none named), and the notes the report
    opens with (a tie between configurations)."""
    collection = collect([str(p) for p in paths], runs)
    out = Path(out) if out else default_out([str(p) for p in paths])
    before = _images(out / REPORT)
    with output.staged(out) as folder:
        text = render(collection, folder)
        (folder / REPORT).write_text(text)
    for name in before - _images(out / REPORT):  # the previous report's plots, now unused
        (out / name).unlink(missing_ok=True)
    return out / REPORT, collection.notes


def _images(report: Path) -> set[str]:
    """The plot files a report.md shows (none when there is no report)."""
    try:
        text = report.read_text()
    except OSError:
        return set()
    found = re.findall(r"^!\[[^\]]*\]\(([^)/]+\.png)\)$", text, flags=re.MULTILINE)
    return set(found)
