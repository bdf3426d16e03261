"""The report's section on the paper's experiments at one machine's scale (`python -m
hpcai_jax.sweep --experiment=paper`; what each table mirrors and how it differs: docs/paper.md).

It reads every complete record of the paper's plan, each point's label and seed index read from
its `sweep_plan` (collect.point; never from its run id), and is the one section that reports
them: the others leave them out (collect.is_paper). It gives an interval only over repeats of
one point (its seeds): mean ± t_{0.975, n − 1} × sd / √n (`repeats.summarise`). Paired tests pair the runs of two points by seed index, on the same
held-out examples.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta

from hpcai_jax.metrics import penalty
from hpcai_jax.report import paired, seeds
from hpcai_jax.report.collect import SEED, Record, flatten
from hpcai_jax.report.collect import point as plan_point
from hpcai_jax.report.markdown import heading, image, table
from hpcai_jax.report.repeats import Summary, summarise
from hpcai_jax.units import cell, number, prefix

BOOTSTRAP_DRAWS = 10_000
BOOTSTRAP_SEED = 0
# Fig. 5's points trained only for their FLOPS (one epoch of a small subset): their quality, and
# so their VFLOPS, say nothing; Fig. 5's quality comes from the largest M's sub-ensembles.
FLOPS_ONLY = "-flops"
NOT_TRAINED = "n/a (FLOPS only)"
# ... unless full runs give the quality of their random k-subsets (k = the point's M).
FROM_SUBSETS = "(quality: the full runs' random k-subsets)"
KNOWN = ("fig5-", "fig7-", "control-")  # the point labels the section's tables read
ALPHA = 0.05  # a difference is read only where McNemar p < ALPHA and the interval excludes 0
SHARED_CORES = "devices simulated on shared CPU cores: FLOPS stays flat, an ideal line cannot hold"
PAPER_SETTING = (
    "the paper: ResNet-50 on ImageNet and Faster R-CNN on ExtremeWeather, 8 nodes × 8 V100 "
    "GPUs, Sys_scale 8 to 64"
)


@dataclasses.dataclass(frozen=True)
class Run:
    """One paper record: its point's label, its seed index and its seed."""

    label: str
    index: int
    seed: int
    record: Record

    @property
    def rec(self):
        return self.record.record

    @property
    def m(self) -> int:
        return int(self.rec.mesh.ensemble_size)

    @property
    def p(self) -> int:
        return int(self.rec.mesh.parallel_degree)

    @property
    def sys_scale(self) -> int:
        return int(self.rec.mesh.num_devices)

    @property
    def bootstrap(self) -> str:
        return str(self.rec.data.bootstrap)


def paper_runs(records: list[Record]) -> dict[str, list[Run]]:
    """The paper records by point label, each point's runs by seed index; other records left
    out, and a smoke plan's where a full plan's are there (toy runs
    are no seeds of the real ones)."""
    points: dict[str, list[Run]] = {}
    found = [(plan_point(r), r) for r in records if r.mode == "train"]
    found = [(p, r) for p, r in found if p is not None and p.experiment == "paper"]
    full = any(not p.smoke for p, _ in found)
    for p, r in found:
        if not (full and p.smoke):
            seed = int(flatten(r.record.config or {}).get(SEED) or 0)
            points.setdefault(p.label, []).append(Run(p.label, p.seed_index, seed, r))
    return {label: sorted(runs, key=_order) for label, runs in sorted(points.items())}


def _order(run: Run) -> tuple:
    """By seed index, then seed."""
    return (run.index, run.seed)


def fig5(points: dict[str, list[Run]]) -> dict[str, list[Run]]:
    """Fig. 5's points (labels fig5-…), by M."""
    found = {k: v for k, v in points.items() if k.startswith("fig5-")}
    return dict(sorted(found.items(), key=lambda kv: kv[1][0].m))


def largest(points: dict[str, list[Run]]) -> list[Run]:
    """The runs of Fig. 5's largest M: the full ensembles the sub-ensembles come from."""
    found = fig5(points)
    return list(found.values())[-1] if found else []


def fig7(points: dict[str, list[Run]]) -> dict[tuple[int, int], list[Run]]:
    """Fig. 7's splits (labels fig7-…) and, where they have no (M = Sys_scale, 1) point of their
    own, the Fig. 5 point at their Sys_scale, by (M, P_degree), M falling."""
    runs = [r for k, v in points.items() if k.startswith("fig7-") for r in v]
    scales, splits = {r.sys_scale for r in runs}, {(r.m, r.p) for r in runs}
    runs += [
        r
        for v in fig5(points).values()
        for r in v
        if r.sys_scale in scales and (r.m, r.p) not in splits  # a Fig. 7 point of its own wins
    ]
    out: dict[tuple[int, int], list[Run]] = {}
    for r in runs:
        out.setdefault((r.m, r.p), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: (-kv[0][0], kv[0][1])))


def control(points: dict[str, list[Run]], single: bool) -> list[Run]:
    """The control of --bootstrap=none: one member on all the data (`single`), else the
    ensemble of independent initialisations."""
    for label, runs in points.items():
        r = runs[0]
        if label.startswith("control-") and r.bootstrap == "none" and (r.m == 1) == single:
            return runs
    return []


def interval(s: Summary, scale: float = 1.0) -> list[str]:
    """[mean, 95 % interval, n] cells: the interval only from two repeats."""
    if s.n == 0:
        return ["n/a", "n/a", "0"]
    ci = (
        "n/a (one run)"
        if s.ci_low is None
        else f"{cell(s.ci_low, scale)} to {cell(s.ci_high, scale)}"
    )
    return [cell(s.mean, scale), ci, str(s.n)]


def best_member(quality) -> int | None:
    """The index of the kept member of highest held-out quality."""
    members = quality.members or []
    kept = quality.kept_members or range(len(members))
    scored = [(number(members[i]), i) for i in kept if number(members[i]) is not None]
    return max(scored)[1] if scored else None


def setting(runs: list[Run]) -> str:
    """How these runs differ from the paper's: model, data, devices."""
    if not runs:
        return ""
    rec = runs[0].rec
    config = rec.config or {}
    model = config.get("model", {}).get("model", "?")
    device = rec.provenance.device_kind or "?"
    shared = (
        " forced on one host's CPU, sharing its cores" if rec.provenance.backend == "cpu" else ""
    )
    scales = sorted({r.sys_scale for r in runs})
    return (
        f"Here: {model} on {rec.data.dataset} ({rec.data.train_examples} training examples, "
        f"{rec.data.eval_examples} held out), Sys_scale {scales[0]} to {scales[-1]} {device} "
        f"devices{shared}; {PAPER_SETTING}."
    )


@dataclasses.dataclass(frozen=True)
class Pair:
    """One paired test: a against b on the same held-out examples (one seed index)."""

    name: str
    index: int
    a: str
    b: str
    quality_a: float | None
    quality_b: float | None
    examples: int
    comparable: bool
    only_a: int = 0
    only_b: int = 0
    p: float | None = None
    diff: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def reading(self) -> str:
        if not self.comparable:
            return "not comparable: different held-out examples"
        if self.p < ALPHA and self.low > 0:
            return "a better"
        if self.p < ALPHA and self.high < 0:
            return "b better"
        return "no difference shown"


def pair(name: str, index: int, a: tuple, b: tuple) -> Pair:
    """a, b: (run id, quality, Correct section, verdicts). McNemar's exact test and the paired
    bootstrap of the accuracy difference, where the two verdict vectors pair up."""
    (a_id, qa, ca, va), (b_id, qb, cb, vb) = a, b
    base = Pair(name, index, a_id, b_id, qa, qb, ca.examples, paired.comparable(ca, cb))
    if not base.comparable:
        return base
    only_b, only_a, p = paired.mcnemar(va, vb)
    diff, low, high = paired.paired_bootstrap(va, vb, BOOTSTRAP_DRAWS, BOOTSTRAP_SEED)
    return dataclasses.replace(
        base, only_a=only_a, only_b=only_b, p=p, diff=diff, low=low, high=high
    )


def _ensemble(run: Run) -> tuple | None:
    c = run.rec.quality.correct
    if c is None:
        return None
    return run.record.run_id, number(run.rec.quality.ensemble), c, paired.verdicts(c)[0]


def _member(run: Run) -> tuple | None:
    c, best = run.rec.quality.correct, best_member(run.rec.quality)
    if c is None or best is None:
        return None
    quality = number(run.rec.quality.members[best])
    return f"{run.record.run_id} member {best}", quality, c, paired.verdicts(c)[1][best]


def matched(a: list[Run], b: list[Run]) -> list[tuple[int, Run, Run]]:
    """(seed index, run of a, run of b) for each seed index both have: a missing run pairs
    nothing else."""
    index_a, index_b = {r.index: r for r in a}, {r.index: r for r in b}
    return [(i, index_a[i], index_b[i]) for i in sorted(index_a.keys() & index_b.keys())]


def pairs(points: dict[str, list[Run]]) -> list[Pair]:
    """The paired tests: each full ensemble against its best member, against the ensemble of
    independent initialisations (--bootstrap=none, same M) and against one member trained on all
    the data; runs of two points paired by seed index."""
    full = largest(points)
    out = []
    for i, run, _ in matched(full, full):
        a, best = _ensemble(run), _member(run)
        if a and best:
            out.append(pair("ensemble vs its best member", i, a, best))
    nobag = [r for r in control(points, single=False) if full and r.m == full[0].m]
    for name, other in (
        ("bagging vs --bootstrap=none", nobag),
        (
            "ensemble vs one member on all the data",
            control(points, single=True),
        ),
    ):
        for i, run, ctrl in matched(full, other):
            a, b = _ensemble(run), _ensemble(ctrl)
            if a and b:
                out.append(pair(name, i, a, b))
    return out


def sub_ensemble_rows(full: list[Run]) -> list[list[str]]:
    """Per k: the ensemble of the first k members and the random k-subsets' mean, each as the
    mean over the runs (seeds) with its 95 % interval."""
    ks = sorted({s.k for r in full for s in r.rec.quality.sub_ensembles or []})
    rows = []
    for k in ks:
        at = [s for r in full for s in r.rec.quality.sub_ensembles or [] if s.k == k]
        first = summarise(s.first for s in at)
        random = summarise(s.random_mean for s in at)
        draws = sorted({f"{s.subsets}{' (all)' if s.exhaustive else ''}" for s in at})
        rows.append([str(k), *interval(first), *interval(random)[:2], ", ".join(draws)])
    return rows


def full_rows(full: list[Run]) -> list[list[str]]:
    """Each full ensemble's run: ensemble, member mean, best member, out of bag; then their
    mean and interval over the seeds."""
    figures = (
        lambda q: q.ensemble,
        lambda q: q.member_mean,
        lambda q: None if best_member(q) is None else q.members[best_member(q)],
        lambda q: q.oob.quality if q.oob else None,
    )
    rows = [
        [r.record.run_id, str(r.seed), *(cell(number(f(r.rec.quality))) for f in figures)]
        for r in full
    ]
    summaries = [summarise(f(r.rec.quality) for r in full) for f in figures]
    rows.append([f"mean over {len(full)} seeds", "", *(cell(s.mean) for s in summaries)])
    rows.append(["95 % interval", "", *(interval(s)[1] for s in summaries)])
    return rows


def subset_quality(full: list[Run], k: int) -> Summary:
    """The quality of an ensemble of k members, from the full runs: their random k-subsets'
    mean, one figure per run (seed)."""
    return summarise(
        s.random_mean for r in full for s in r.rec.quality.sub_ensembles or [] if s.k == k
    )


@dataclasses.dataclass(frozen=True)
class Fig5Point:
    """One Fig. 5 point's figures over its seeds, as the table and the plot show them. A
    FLOPS-only point (M = k) takes its quality from the full runs' random k-subsets and its
    VFLOPS from its FLOPS × (that quality / target)^n; both None where there are none."""

    label: str
    runs: list[Run]
    flops: Summary
    vflops: Summary | None
    quality: Summary | None
    from_subsets: bool = False


def _subset_figures(v: list[Run], full: list[Run]) -> tuple[Summary | None, Summary | None]:
    """A FLOPS-only point's (VFLOPS, quality), or (None, None) without full runs to take it from."""
    if not full or full[0].label.endswith(FLOPS_ONLY):
        return None, None
    q = subset_quality(full, v[0].m)
    rate = summarise(r.rec.metrics.flops_per_s for r in v).mean
    target, n = full[0].rec.quality.target, full[0].rec.quality.exponent
    if q.mean is None or rate is None or target is None or n is None:
        return None, None
    factor = penalty(q.mean, target, n)
    return (None, None) if factor is None else (summarise([rate * factor]), q)


def fig5_points(points: dict[str, list[Run]]) -> list[Fig5Point]:
    full, out = largest(points), []
    for label, v in fig5(points).items():
        flops = summarise(r.rec.metrics.flops_per_s for r in v)
        if label.endswith(FLOPS_ONLY):  # trained for Eq. 6's one epoch, not for its quality
            vflops, quality = _subset_figures(v, full)
            out.append(Fig5Point(label, v, flops, vflops, quality, quality is not None))
            continue
        vflops = summarise(r.rec.metrics.vflops_per_s for r in v)
        out.append(Fig5Point(label, v, flops, vflops, summarise(r.rec.quality.ensemble for r in v)))
    return out


def flops_rows(points: dict[str, list[Run]]) -> tuple[list[str], list[list[str]]]:
    """Per Fig. 5 point: FLOPS, VFLOPS and the ensemble's quality over its seeds (`Fig5Point`)."""
    found = fig5_points(points)
    f_scale, f_prefix = prefix([number(r.rec.metrics.flops_per_s) for p in found for r in p.runs])
    headers = ["point", "M", "P_degree", "Sys_scale", "seeds (n)"]
    headers += [f"FLOPS [{f_prefix}FLOP/s]", "95 % interval"]
    headers += [f"VFLOPS [{f_prefix}FLOP/s]", "95 % interval", "ensemble quality", "95 % interval"]
    none = [NOT_TRAINED, NOT_TRAINED]
    rows = []
    for point in found:
        vflops = none if point.vflops is None else interval(point.vflops, f_scale)[:2]
        quality = none if point.quality is None else interval(point.quality)[:2]
        if point.from_subsets:
            vflops[1] = FROM_SUBSETS
        r0 = point.runs[0]
        flops = interval(point.flops, f_scale)[:2]
        rows.append(
            [point.label, r0.m, r0.p, r0.sys_scale, len(point.runs), *flops, *vflops, *quality]
        )
    return headers, rows


def fig7_rows(points: dict[str, list[Run]]) -> list[list]:
    """Per (M, P_degree) at Fig. 7's Sys_scale: time to target, the final ensemble quality,
    steps per member, training time; mean and interval over seeds."""
    rows = []
    for (m, p), v in fig7(points).items():
        reached = [r.rec.time_to_target_s for r in v if r.rec.time_to_target_s is not None]
        evals = sorted({len(r.rec.quality.curve) for r in v})
        steps = sorted({r.rec.timing.steps for r in v})
        rows.append(
            [
                v[0].label,
                m,
                p,
                v[0].sys_scale,
                len(v),
                ", ".join(map(str, evals)),
                f"{len(reached)} of {len(v)}",
                *interval(summarise(reached))[:2],
                *interval(summarise(r.rec.quality.ensemble for r in v))[:2],
                *interval(summarise(r.rec.quality.member_mean for r in v))[:2],
                *interval(summarise(_gain(r) for r in v), 0.01)[:2],
                ", ".join(map(str, steps)),
                *interval(summarise(r.rec.timing.train_wall_s for r in v))[:2],
            ]
        )
    return rows


def _gain(run: Run) -> float | None:
    """The ensemble's quality over its members' mean: what averaging adds at this M."""
    q = run.rec.quality
    ensemble, members = number(q.ensemble), number(q.member_mean)
    return None if ensemble is None or members is None else ensemble - members


FIG7_HEADERS = [
    "point", "M", "P_degree", "Sys_scale", "seeds (n)", "evaluations per run", "reached the target",
    "time to target [s]", "95 % interval", "final ensemble quality", "95 % interval",
    "member mean", "95 % interval", "ensemble − member mean [points]", "95 % interval",
    "steps per member", "training time [s]", "95 % interval",
]  # fmt: skip
PAIR_HEADERS = [
    "comparison", "seed index", "a", "b", "quality a", "quality b", "only a right",
    "only b right", "McNemar p", "a − b", "95 % bootstrap interval", "reading",
]  # fmt: skip


def pair_rows(found: list[Pair]) -> list[list]:
    return [
        [
            t.name, t.index, t.a, t.b, cell(t.quality_a), cell(t.quality_b),
            t.only_a if t.comparable else "n/a", t.only_b if t.comparable else "n/a",
            cell(t.p), cell(t.diff), "n/a" if t.low is None else f"{cell(t.low)} to {cell(t.high)}",
            t.reading,
        ]
        for t in found
    ]  # fmt: skip


def verdict(found: list[Pair]) -> list[str]:
    """One sentence per comparison: how many seeds' intervals lie above 0, below, or hold it."""
    out = []
    for name in dict.fromkeys(t.name for t in found):
        at = [t for t in found if t.name == name and t.comparable]
        up = sum(t.reading == "a better" for t in at)
        down = sum(t.reading == "b better" for t in at)
        out.append(
            f"{name}: a better in {up} of {len(at)} seeds, b better in {down}, no difference "
            f"shown in {len(at) - up - down}."
        )
    return out


FIG5 = (
    "Mirrors HPC AI500 V3.0 §4.3 Fig. 5 (P_degree fixed, M growing). Quality against k comes "
    "from the sub-ensembles of each M = {m} run (`quality.sub_ensembles`): the ensemble of its "
    "first k members and the mean over random k-subsets of its members, each then as the mean "
    "over the n = {n} seeds with its 95 % Student-t interval. The separate M points below are "
    "separate runs with seeds of their own (no member shared). FLOPS and VFLOPS: {shared}."
)
FIG7 = (
    "Mirrors HPC AI500 V3.0 §4.4.1 Fig. 7 (one Sys_scale split into M members of P_degree "
    "devices each; the paper: Sys_scale 64, (M, P_degree) = (8, 8), (4, 16), (1, 64)). The time "
    "to target is from run_start to the end of the first evaluation that reached it: a run "
    "evaluated once, at its end (the evaluations per run column), can only reach it there. Mean "
    "and 95 % interval over the seeds that reached the target; the ensemble − member mean column "
    "is what averaging adds at each M, apart from what the batch does to each member."
)
PAIRED = (
    "Paired tests over the {examples} held-out examples (one point of accuracy = {point:g} "
    "examples): McNemar's exact test on the examples only one of the two gets right, and a "
    "paired bootstrap ({draws} resamples of the examples) of the accuracy difference a − b with "
    "its 95 % interval. A difference is read only where both agree (p < {alpha:g} and an "
    "interval that excludes 0); else none is shown at this test-set size. Runs of two points are "
    "paired by seed index (the k-th seed of each); "
    "whatever the interval shows is the result."
)


def section(records: list[Record], folder, draw) -> list[str]:
    """The paper section's parts (heading first), or none without paper records; `draw(full,
    fig5 points, path)` draws its plot into `folder`."""
    points = paper_runs(records)
    if not points:
        return []
    every = [r for v in points.values() for r in v]
    full = largest(points)
    parts = [heading("The paper's experiments at one machine's scale"), setting(every)]
    parts.append(
        "Every complete record of the paper's plan, each read by the point and seed index it is "
        "stamped with (`sweep_plan`), those the sections below skip for their configuration "
        "included (docs/paper.md). Points: "
        + ", ".join(f"{k} (n = {len(v)})" for k, v in points.items())
        + "."
    )
    parts.append(span(every))
    unread = [k for k in points if not k.startswith(KNOWN)]
    if unread:
        parts.append(
            f"Points no table below reads (their labels start with none of {', '.join(KNOWN)}): "
            + ", ".join(unread)
            + "."
        )
    parts += _fig5_parts(points, full, folder, draw)
    parts.append(heading("Fig. 7's shape: the splits of one Sys_scale", 3))
    parts += [FIG7, table(FIG7_HEADERS, fig7_rows(points)) if fig7(points) else "No Fig. 7 run."]
    parts += _paired_parts(points)
    return parts


def _interval(run: Run) -> tuple[datetime, datetime] | None:
    """(start, end) of a run from its record: `provenance.utc` (the record's write time) less
    `timing.total_wall_s`; None where either is not a time (a record from outside)."""
    try:
        end = datetime.fromisoformat(str(run.rec.provenance.utc))
        wall = float(run.rec.timing.total_wall_s or 0)
        if not math.isfinite(wall) or wall < 0:
            return None
        return end - timedelta(seconds=wall), end
    except (TypeError, ValueError, OverflowError):
        return None


def span(runs: list[Run]) -> str:
    """The plan's measured wall time as its records give it: from the first run's start to the
    last record; each process's own start before its clock, a second or two, aside."""
    found = [t for r in runs if (t := _interval(r)) is not None]
    if not found or any(s.tzinfo is None for s, _ in found):
        return "The plan's wall time: not given (no record with a time zone-aware time)."
    first, last = min(s for s, _ in found), max(e for _, e in found)
    minutes, seconds = divmod(round((last - first).total_seconds()), 60)
    missing = len(runs) - len(found)
    aside = f" ({missing} record(s) without a readable time left out)" if missing else ""
    return (
        f"The {len(found)} runs took {minutes} min {seconds:02d} s from the first one's start "
        f"({first.isoformat(timespec='seconds')}) to the last one's record, one after another "
        f"on {runs[0].rec.provenance.hostname}'s {runs[0].rec.provenance.backend} devices{aside}."
    )


def _fig5_parts(points, full, folder, draw) -> list[str]:
    parts = [heading("Fig. 5's shape: quality and FLOPS against M", 3)]
    if not full:
        return parts + ["No Fig. 5 run."]
    shared = SHARED_CORES if full[0].rec.provenance.backend == "cpu" else "measured per point"
    parts.append(FIG5.format(m=full[0].m, n=len(full), shared=shared))
    if draw is not None:
        draw(full, fig5_points(points), folder / "paper_fig5.png")
        parts.append(image("paper_fig5.png", "Quality against k and FLOPS against M"))
    headers = ["k", "first k", "95 % interval", "seeds (n)", "random k-subsets", "95 % interval"]
    parts.append(table([*headers, "subsets per run"], sub_ensemble_rows(full)))
    headers = ["run", "seed", "ensemble", "member mean", "best member", "out-of-bag"]
    parts.append(table(headers, full_rows(full)))
    parts.append(table(*flops_rows(points)))
    return parts


def subset_control_rows(points: dict[str, list[Run]]) -> list[list[str]]:
    """Bagging against independent initialisations where the --bootstrap=none control has fewer
    members (k) than the full ensembles: the full runs' random k-subsets (their mean per run)
    against the control's ensembles, each over its seeds. Unpaired (a subset mean has no
    per-example verdicts): read only where the intervals do not overlap."""
    full = largest(points)
    rows = []
    nobag = control(points, single=False)
    if not full or not nobag or nobag[0].m >= full[0].m:
        return rows
    k = nobag[0].m
    at = [s for r in full for s in r.rec.quality.sub_ensembles or [] if s.k == k]
    bagged, plain = (
        summarise(s.random_mean for s in at),
        summarise(r.rec.quality.ensemble for r in nobag),
    )
    if bagged.n == 0 or plain.n == 0:
        return rows
    apart = None not in (bagged.ci_low, plain.ci_low) and (
        bagged.ci_low > plain.ci_high or plain.ci_low > bagged.ci_high
    )
    reading = "no difference shown"
    if apart:
        reading = "bagging better" if bagged.mean > plain.mean else "independent better"
    rows.append([str(k), *interval(bagged), *interval(plain), reading])
    return rows


def _subset_control_parts(points) -> list[str]:
    rows = subset_control_rows(points)
    if not rows:
        return []
    headers = ["k", "bagged: random k-subsets of the full runs", "95 % interval", "seeds (n)"]
    headers += ["--bootstrap=none, M = k", "95 % interval", "seeds (n)", "reading"]
    return [
        "Bagging against independent initialisations at M = k: the full ensembles' random "
        "k-subsets (mean per run) against separate `--bootstrap=none` runs of k members; "
        "unpaired, read only where the two 95 % intervals do not overlap.",
        table(headers, rows),
    ]


SEED_HEADERS = [
    "comparison", "a: seeds (n)", "b: seeds (n)", "Welch: a − b [points]", "95 % interval",
    "Welch p", "paired by seed: a − b [points]", "95 % interval", "paired p",
    "detectable at 80 % power [points]", "reading",
]  # fmt: skip


def _points(value) -> str:
    return cell(None if value is None else value * 100)


def _q(run: Run) -> float | None:
    return number(run.rec.quality.ensemble)


def seed_rows(points: dict[str, list[Run]]) -> list[list]:
    """The full ensembles against each control of M = 1 or of their own M, across seeds: Welch
    (unpaired: every seed of each) and the paired t test by seed index (the bagging pairs share
    their seeds), with the smallest difference the paired design detects at 80 % power; the
    reading from the paired test where there are two pairs, else from Welch."""
    full, rows = largest(points), []
    if not full:
        return rows
    for label, runs in points.items():
        if not label.startswith("control-") or runs[0].m not in (1, full[0].m):
            continue
        a = [q for r in full if (q := _q(r)) is not None]
        b = [q for r in runs if (q := _q(r)) is not None]
        welch = seeds.welch(a, b)
        both = [(_q(x), _q(y)) for _, x, y in matched(full, runs)]
        both = [(x, y) for x, y in both if x is not None and y is not None]
        paired_ = seeds.paired_t([x for x, _ in both], [y for _, y in both])
        ci = [f"{_points(t.low)} to {_points(t.high)}" for t in (welch, paired_)]
        rows.append([
            f"{full[0].label} vs {label}", len(a), len(b),
            _points(welch.diff), ci[0], cell(welch.p),
            _points(paired_.diff), ci[1], cell(paired_.p), _points(paired_.detectable),
            seeds.reading(paired_ if paired_.t is not None else welch),
        ])  # fmt: skip
    return rows


SEEDS_TEXT = (
    "Across seeds (each seed one whole training run): Welch's t test over every seed of each "
    "point, and the paired t test by seed index, whose pairs of the bagging control share their "
    "members' initialisations and data order and differ only by the bootstrap. The detectable "
    "difference is the smallest true difference the paired design finds with 80 % power at "
    "α = 0.05, (t_0.975 + t_0.80) × sd / √n of the paired differences. Where no difference is "
    "shown, the interval's farther end is the largest difference the runs leave open. The McNemar tests below test one pair of trained "
    "models each, not training noise."
)


def _paired_parts(points) -> list[str]:
    parts = [heading("Controls and paired tests", 3)]
    rows = []
    for label, v in points.items():
        if label.startswith("control-") or v is largest(points):
            q = interval(summarise(r.rec.quality.ensemble for r in v))
            rows.append([label, v[0].m, v[0].bootstrap, len(v), q[0], q[1]])
    headers = ["point", "M", "bootstrap", "seeds (n)", "ensemble quality", "95 % interval"]
    parts.append(table(headers, rows))
    parts += _subset_control_parts(points)
    across = seed_rows(points)
    if across:
        parts += [SEEDS_TEXT, table(SEED_HEADERS, across)]
    found = pairs(points)
    if not found:
        return parts + ["No pair of records with per-example verdicts (`quality.correct`)."]
    examples = found[0].examples
    parts.append(
        PAIRED.format(examples=examples, point=examples / 100, draws=BOOTSTRAP_DRAWS, alpha=ALPHA)
    )
    parts.append(table(PAIR_HEADERS, pair_rows(found)))
    parts.append("\n".join(f"- {line}" for line in verdict(found)))
    return parts
