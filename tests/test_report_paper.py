"""The report's paper section (hpcai_jax/report/paper.py) on fake paper records: copies of the
shipped tiny run's record (tests/data/tiny_run_record.json, no process started) with known
sub-ensembles, per-example verdicts, seeds and figures; the tables' numbers against hand
arithmetic."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from hpcai_jax.bits import pack_bits
from hpcai_jax.report import markdown, paired, paper, plots
from hpcai_jax.report.build import render
from hpcai_jax.report.collect import Record, collect
from hpcai_jax.report.collect import is_paper as collect_is_paper
from hpcai_jax.units import cell

ROOT = Path(__file__).resolve().parents[1]
BASE = json.loads((ROOT / "tests" / "data" / "tiny_run_record.json").read_text())
EXAMPLES = 100
# Per seed index: the M = 8 ensemble's first-k qualities (k = 1…8) are FIRST[i] + k / 100.
FIRST = (0.70, 0.72, 0.74)
SEEDS = {"fig5-M8": (4000, 13000, 22000), "control-M8-nobag": (8000, 17000, 26000)}
SEEDS |= {"control-M1-alldata": (9000, 18000, 27000), "fig5-M1": (1000, 10000, 19000)}
SEEDS |= {"fig7-M1-P8": (7000, 16000, 25000)}


def verdicts(right: int, shift: int = 0) -> list[bool]:
    """EXAMPLES verdicts: `right` of them right, starting at example `shift` (wrapping)."""
    return [(i - shift) % EXAMPLES < right for i in range(EXAMPLES)]


def fake(label: str, index: int, m: int, p: int, bootstrap: str = "with_replacement") -> dict:
    """A paper record of point `label`, seed index `index`: the ensemble gets 80 + index
    examples right (0…79+index); member j gets 70 + j right, from example 5 on (the best member,
    7 at M = 8, gets 77: 5…81); the control ensembles get 78 right (0…77), the single member 75."""
    r = copy.deepcopy(BASE)
    seed = SEEDS[label][index]
    name = f"paper-{label}-s{seed}"
    r["run_id"] = r["config"]["results"]["run_name"] = name
    r["sweep_plan"] = {"experiment": "paper", "size": "full", "digest": "0" * 16}
    r["sweep_plan"] |= {"point": label, "seed_index": index}
    r["mesh"].update(ensemble_size=m, parallel_degree=p, num_devices=m * p, members_per_device=1)
    r["config"]["mesh"].update(ensemble_size=m, parallel_degree=p, members_per_device=1)
    r["config"]["train"].update(seed=seed, bootstrap=bootstrap)
    r["data"]["bootstrap"] = bootstrap
    right = 78 if label.startswith("control-") else 80 + index
    right = 75 if m == 1 and label.startswith("control-") else right
    members = [verdicts(70 + j, 5) for j in range(m)]
    q = r["quality"]
    q.update(ensemble=right / EXAMPLES, members=[(70 + j) / EXAMPLES for j in range(m)])
    q.update(kept_members=list(range(m)), member_mean=(70 + (m - 1) / 2) / EXAMPLES)
    q["oob"]["quality"] = 0.6 + index / 100
    q["sub_ensembles"] = [
        {
            "k": k,
            "first": FIRST[index] + k / 100,
            "random_mean": FIRST[index] + k / 200,
            "random_sd": 0.01,
            "subsets": math.comb(m, k),
            "exhaustive": True,
        }
        for k in range(1, m + 1)
    ]
    q["correct"] = {
        "examples": EXAMPLES,
        "order_sha256": "0" * 64,
        "ensemble": pack_bits(verdicts(right)),
        "members": [pack_bits(v) for v in members],
    }
    r["metrics"].update(flops_per_s=1e9 * (1 + index), vflops_per_s=0.5e9 * (1 + index))
    r["time_to_target_s"] = 10.0 * (1 + index)
    r["timing"]["steps"] = 112
    return r


@pytest.fixture(scope="module")
def raw() -> list[dict]:
    made = [fake("fig5-M8", i, 8, 1) for i in range(3)]
    made += [fake("fig5-M1", i, 1, 1) for i in range(3)]
    made += [fake("fig7-M1-P8", i, 1, 8) for i in range(3)]
    made += [fake("control-M8-nobag", i, 8, 1, "none") for i in range(3)]
    made += [fake("control-M1-alldata", i, 1, 1, "none") for i in range(3)]
    return made


@pytest.fixture(scope="module")
def records(raw) -> list[Record]:
    return [Record(Path(f"{r['run_id']}.json"), r) for r in raw]


def test_points_come_from_the_records_plan_stamp(raw, records):
    points = paper.paper_runs(records)
    assert sorted(points) == sorted(SEEDS)
    assert [r.seed for r in points["fig5-M8"]] == [4000, 13000, 22000]
    assert [r.m for r in paper.largest(points)] == [8, 8, 8]
    assert list(paper.fig7(points)) == [(8, 1), (1, 8)]  # Fig. 5's M = 8 is (8, 1)
    assert [r.seed for r in paper.control(points, single=True)] == [9000, 18000, 27000]
    assert paper.paper_runs([Record(Path("x.json"), BASE)]) == {}
    # A run id of the plan's form is no stamp: the record is not the paper's.
    unstamped = {k: v for k, v in raw[0].items() if k != "sweep_plan"}
    assert paper.paper_runs([Record(Path(f"{unstamped['run_id']}.json"), unstamped)]) == {}


def test_a_smoke_plans_runs_count_only_without_the_full_plans(raw, records):
    """smoke-paper-… records (sweep --smoke's toy runs) make the section alone, and are left
    out beside full runs: a toy run of seed 4000 is no fourth seed of fig5-M8."""
    toy = copy.deepcopy(raw[0])
    toy["run_id"] = "smoke-paper-fig5-M8-s4000"
    toy["sweep_plan"] = {**toy["sweep_plan"], "size": "smoke"}
    smoke = Record(Path("smoke-paper-fig5-M8-s4000.json"), toy)
    assert [r.record for r in paper.paper_runs([smoke])["fig5-M8"]] == [smoke]
    assert paper.paper_runs([*records, smoke]) == paper.paper_runs(records)


def test_sub_ensemble_rows_are_intervals_over_the_seeds(records):
    rows = paper.sub_ensemble_rows(paper.largest(paper.paper_runs(records)))
    assert [r[0] for r in rows] == [str(k) for k in range(1, 9)]
    # k = 1: first = 0.71, 0.73, 0.75: mean 0.73, sd 0.02, half width 4.3027 × 0.02 / √3.
    half = 4.3027 * 0.02 / math.sqrt(3)
    k1 = rows[0]
    assert k1[1] == "0.73" and k1[3] == "3"
    low, high = (float(x) for x in k1[2].split(" to "))
    assert (low, high) == pytest.approx((0.73 - half, 0.73 + half), abs=5e-4)
    assert rows[7][1] == "0.8" and rows[7][4] == "0.76"  # k = 8: 0.72 + 0.08; 0.72 + 0.04
    assert rows[7][6] == "1 (all)" and rows[3][6] == "70 (all)"


def test_full_ensemble_rows_and_flops(records):
    points = paper.paper_runs(records)
    rows = paper.full_rows(paper.largest(points))
    assert rows[0][:6] == ["paper-fig5-M8-s4000", "4000", "0.8", "0.735", "0.77", "0.6"]
    assert rows[3][2] == "0.81" and rows[3][5] == "0.61"  # means over the seeds
    assert rows[4][4] == "n/a (one run)" or " to " in rows[4][4]
    headers, flops = paper.flops_rows(points)
    assert headers[5] == "FLOPS [GFLOP/s]"
    assert [r[0] for r in flops] == ["fig5-M1", "fig5-M8"]
    # 1, 2, 3 GFLOP/s: mean 2, sd 1, half width 4.3027 / √3 = 2.4842.
    assert flops[1][5:7] == ["2", "-0.4842 to 4.484"]


def test_fig7_rows(records):
    rows = [r[1:] for r in paper.fig7_rows(paper.paper_runs(records))]
    assert [r[0] for r in paper.fig7_rows(paper.paper_runs(records))] == ["fig5-M8", "fig7-M1-P8"]
    assert [r[:2] for r in rows] == [[8, 1], [1, 8]]
    assert rows[0][5] == "3 of 3" and rows[0][6] == "20" and rows[0][14] == "112"
    # Member mean (70 + 3.5) / 100 at M = 8; the ensemble (0.80, 0.81, 0.82) gains 6.5, 7.5,
    # 8.5 points over it: mean 7.5; the fakes give M = 1 the same ensemble over a 0.70 member.
    assert rows[0][10] == "0.735" and rows[0][12] == "7.5" and rows[1][12] == "11"
    # A Fig. 7 point of its own at (8, 1) takes the place of Fig. 5's M = 8 runs.
    SEEDS["fig7-M8-P1"] = (31000, 32000)
    own = [fake("fig7-M8-P1", i, 8, 1) for i in range(2)]
    with_own = records + [Record(Path(f"{r['run_id']}.json"), r) for r in own]
    assert [len(v) for v in paper.fig7(paper.paper_runs(with_own)).values()] == [2, 3]


def test_paired_tests_count_the_discordant_examples(records):
    found = paper.pairs(paper.paper_runs(records))
    names = [t.name for t in found]
    assert names.count("ensemble vs its best member") == 3
    assert names.count("bagging vs --bootstrap=none") == 3
    assert names.count("ensemble vs one member on all the data") == 3
    best = found[0]
    # Ensemble right on 0…79, member 7 on 5…81: only the ensemble on 0…4, only the member on
    # 80, 81.
    assert (best.only_a, best.only_b) == (5, 2) and best.b.endswith("member 7")
    assert best.p == pytest.approx(2 * sum(math.comb(7, i) for i in range(3)) / 2**7)
    assert best.diff == pytest.approx(0.03) and best.low <= 0.03 <= best.high
    assert best.reading == "no difference shown"
    nobag = [t for t in found if t.name.startswith("bagging")]
    assert [(t.only_a, t.only_b) for t in nobag] == [(2, 0), (3, 0), (4, 0)]
    single = [t for t in found if t.name.startswith("ensemble vs one")][2]
    assert (single.only_a, single.only_b, single.diff) == (7, 0, pytest.approx(0.07))
    assert single.low > 0 and single.reading == "a better"
    a, b = (np.array(v, bool) for v in (verdicts(82), verdicts(75)))
    assert paired.mcnemar(a, b)[2] == pytest.approx(single.p)


def test_records_of_other_examples_are_not_paired(records):
    points = paper.paper_runs(records)
    ctrl = paper.control(points, single=True)[0]
    a = paper._ensemble(points["fig5-M8"][0])
    other = ctrl.rec.quality.correct
    b = (ctrl.record.run_id, 0.75, dataclasses.replace(other, order_sha256="1" * 64), a[3])
    t = paper.pair("x", 0, a, b)
    assert not t.comparable and t.reading.startswith("not comparable") and t.p is None


def test_section_in_the_report(records, tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "paper_fig5", lambda *args: None)
    text = "\n\n".join(paper.section(records, tmp_path, plots.paper_fig5))
    assert text.startswith("## The paper's experiments at one machine's scale")
    assert "n = 3 seeds" in text and paper.SHARED_CORES in text
    assert "Paired tests over the 100 held-out examples" in text
    assert "ensemble vs one member on all the data: a better in 2 of 3 seeds" in text
    assert paper.section(records[:0], tmp_path, None) == []
    assert "Points no table below reads" not in text


def test_a_point_no_table_reads_is_named(raw, tmp_path):
    """A paper record whose point label no table knows (a typo in a plan) is named in one line,
    not dropped silently."""
    odd = copy.deepcopy(raw[0])
    odd["sweep_plan"] = {"experiment": "paper", "size": "full", "digest": "0" * 16}
    odd["sweep_plan"] |= {"point": "Fig5-M8", "seed_index": 0}
    made = [Record(Path(f"{r['run_id']}.json"), r) for r in raw[1:]]
    made.append(Record(Path("odd.json"), odd))
    text = "\n\n".join(paper.section(made, tmp_path, None))
    assert "Points no table below reads (their labels start with none of fig5-, fig7-, " in text
    assert text.count("Fig5-M8") == 2  # in the list of points, and in that line


def no_plots(monkeypatch) -> None:
    """Every plot stubbed out: the text is what these tests read, and drawing costs seconds."""
    for name in dir(plots):
        if callable(getattr(plots, name)) and getattr(plots, name).__module__ == plots.__name__:
            monkeypatch.setattr(plots, name, lambda *args, **kwargs: None)


def test_the_report_shows_every_paper_record_and_draws_the_plot(raw, tmp_path):
    folder = tmp_path / "records"
    folder.mkdir()
    for r in raw:
        (folder / f"{r['run_id']}.json").write_text(json.dumps(r))
    md = render(collect([str(folder)]), tmp_path)
    assert md.index("## The paper's") < md.index("## FLOPS and VFLOPS against Sys_scale")
    assert "control-M1-alldata (n = 3)" in md
    assert "15 used (15 train in the paper's section), 0 skipped" in md
    assert (tmp_path / "paper_fig5.png").read_bytes().startswith(b"\x89PNG")
    # The general sections leave the paper's records to its section, each in one line.
    scaling = md[md.index("## FLOPS and VFLOPS against Sys_scale") :]
    assert scaling.split("\n\n")[1].startswith("The 15 record(s) of the paper's plan are left")
    assert not (tmp_path / "scalability.png").exists()


def test_the_general_plot_of_one_sys_scale_says_it_is_not_fig5(raw, tmp_path, monkeypatch):
    """Fig. 7's splits alone (M = 8 at P_degree 1, M = 1 at P_degree 8, both Sys_scale 8), run
    outside the paper's plan: no P_degree grows, so the general FLOPS plot must not claim Fig.
    5's shape; with runs at Sys_scale 1 and 8 of P_degree 1, it mirrors it."""
    no_plots(monkeypatch)
    for kept, opening in (
        (("fig5-M8", "fig7-M1-P8"), "Not HPC AI500 V3.0 §4.3 Fig. 5's shape"),
        (("fig5-M8", "fig5-M1"), "Mirrors HPC AI500 V3.0 §4.3 Fig. 5"),
    ):
        folder = tmp_path / opening[:3] / "records"
        folder.mkdir(parents=True)
        for r in raw:
            if any(f"{k}-s" in r["run_id"] for k in kept):
                plain = copy.deepcopy(r)
                plain["run_id"] = plain["config"]["results"]["run_name"] = r["run_id"][6:]
                del plain["sweep_plan"]  # run outside the paper's plan
                (folder / f"{plain['run_id']}.json").write_text(json.dumps(plain))
        md = render(collect([str(folder)]), folder.parent)
        scaling = md[md.index("## FLOPS and VFLOPS against Sys_scale") :]
        assert scaling.split("\n\n")[1].startswith(opening)


def test_a_smaller_control_is_read_against_the_full_runs_subsets(raw):
    """control-M4-nobag against fig5-M8's random 4-subsets: 0.72, 0.74, 0.76 (mean 0.74, half
    width 4.3027 × 0.02 / √3 = 0.0497) against 0.78 thrice: the intervals overlap, so no
    difference is read; the FLOPS-only point's quality and VFLOPS come from the subsets."""
    SEEDS.update({"control-M4-nobag": (5000, 6000, 7000), "fig5-M2-flops": (3000,)})
    made = [r for r in raw if "control-M8-nobag" not in r["run_id"]]
    made += [fake("control-M4-nobag", i, 4, 1, "none") for i in range(3)]
    made.append(fake("fig5-M2-flops", 0, 2, 1))
    points = paper.paper_runs([Record(Path(f"{r['run_id']}.json"), r) for r in made])
    (row,) = paper.subset_control_rows(points)
    assert row[0] == "4" and row[1] == "0.74" and row[3] == "3"
    low, high = (float(x) for x in row[2].split(" to "))
    assert (low, high) == pytest.approx((0.74 - 0.0497, 0.74 + 0.0497), abs=5e-4)
    assert row[4] == "0.78" and row[-1] == "no difference shown"
    # The FLOPS-only point (M = 2, 1 GFLOP/s) takes the full runs' random 2-subsets: 0.71, 0.73,
    # 0.75 (mean 0.73, half width 0.0497), and VFLOPS = 1 GFLOP/s × (0.73 / target)^n.
    _, flops = paper.flops_rows(points)
    only = next(r for r in flops if r[0] == "fig5-M2-flops")
    q = BASE["quality"]
    assert only[7:9] == [cell((0.73 / q["target"]) ** q["exponent"]), paper.FROM_SUBSETS]
    assert only[9] == "0.73"
    low, high = (float(x) for x in only[10].split(" to "))
    assert (low, high) == pytest.approx((0.73 - 0.0497, 0.73 + 0.0497), abs=5e-4)
    # Without full runs there is no quality to take: n/a.
    alone = paper.paper_runs([Record(Path("a.json"), made[-1])])
    assert paper.flops_rows(alone)[1][0][7:] == [paper.NOT_TRAINED] * 4


PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
FIGURE = re.compile(r"^(?:final )?(?P<figure>VFLOPS|FLOPS|ensemble \S+)(?: \[(?P<p>\w?)FLOP/s\])?$")


def _figure(header: str) -> tuple[str, float] | None:
    """('FLOPS' | 'VFLOPS' | 'quality', the column's scale) for a column of a point's figure."""
    match = FIGURE.match(header)
    if not match:
        return None
    name = match.group("figure")
    return ("quality" if name.startswith("ensemble") else name), PREFIXES[match.group("p") or ""]


def point_figures(md: str) -> dict[tuple, dict[str, set]]:
    """Every figure a report prints for a point outside per-run rows: (mesh, label, figure) ->
    {section: values}, mesh = (M, P_degree, Sys_scale), label the plan's point where the table
    names it (two points may share a mesh: Fig. 5's and Fig. 7's (8, 1) differ in their batch),
    else None. A table's row is a point's where the table has the M, P_degree and Sys_scale
    columns and no run column; the Repeats table names its figure in a column and gives its
    mean."""
    found: dict[tuple, dict[str, set]] = {}
    heading = ""
    for block in md.split("\n\n"):
        if block.startswith("#"):
            heading = block
            continue
        lines = block.splitlines()
        if not lines or not lines[0].startswith("| "):
            continue
        headers = [h.strip() for h in lines[0].strip("|").split(" | ")]
        if not {"M", "P_degree", "Sys_scale"} <= set(headers) or "run" in headers:
            continue
        for line in lines[2:]:
            row = dict(zip(headers, (c.strip() for c in line.strip("|").split(" | ")), strict=True))
            mesh = (row["M"], row["P_degree"], row["Sys_scale"])
            cells = [(row["figure"], row["mean"])] if "figure" in row else list(row.items())
            for header, value in cells:
                figure = _figure(header)
                if figure and value not in ("", "n/a", paper.NOT_TRAINED):
                    at = found.setdefault((mesh, row.get("point"), figure[0]), {})
                    at.setdefault(heading, set()).add(float(value) * figure[1])
    return found


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= abs(b) * 1e-3  # the tables' 4 digits


def conflicts(md: str) -> list[str]:
    """The points whose figure differs between sections: a labelled point's values must agree;
    a row that names no point must give the figure of a labelled point of its mesh, if any."""
    found, out = point_figures(md), []
    for (mesh, label, figure), sections in found.items():
        values = [v for vs in sections.values() for v in vs]
        labelled = [
            v
            for (m, lab, f), secs in found.items()
            if m == mesh and f == figure and lab is not None
            for vs in secs.values()
            for v in vs
        ]
        pool = values[:1] if label is not None or not labelled else labelled
        if not all(any(_close(v, w) for w in pool) for v in values):
            out.append(f"{mesh} {label} {figure}: {sections}")
    return out


def test_the_shipped_records_give_each_point_one_figure(monkeypatch):
    """docs/paper/records rendered: each point's FLOPS, VFLOPS and quality is printed with one
    value in every section (the paper plan's records are reported by its section alone, and
    every other section says in one line why it leaves them out). The report before this rule
    gave the FLOPS-only points' VFLOPS twice: 47.65 and 2.603 GFLOP/s at (1, 1, 1)."""
    monkeypatch.chdir(ROOT)
    no_plots(monkeypatch)
    md = render(collect(["docs/paper/records"]), Path("docs") / "paper.check")
    found = point_figures(md)
    assert {f for _, _, f in found} == {"FLOPS", "VFLOPS", "quality"}
    assert len({k for k, _, f in found if f == "VFLOPS"}) == 4  # Fig. 5's M = 1, 2, 4, 8
    assert ("8", "1", "8") in {k for k, label, f in found if label == "fig7-M8-P1"}
    assert conflicts(md) == []
    assert md.count(markdown.aside(collect(["docs/paper/records"]))) == 9


def test_a_second_figure_for_a_point_is_a_conflict():
    """The check fails on the report as shipped at 08ab115: its Repeats section, which names no
    point, gave the FLOPS-only point at (1, 1, 1) a VFLOPS of 2.603 GFLOP/s beside the paper
    section's 47.65."""
    paper_table = (
        "| point | M | P_degree | Sys_scale | VFLOPS [GFLOP/s] |\n| --- | --- | --- | --- | --- |\n"
        "| fig5-M1-flops | 1 | 1 | 1 | 47.65 |"
    )
    repeats = (
        "| M | P_degree | Sys_scale | figure | mean |\n| --- | --- | --- | --- | --- |\n"
        "| 1 | 1 | 1 | VFLOPS [GFLOP/s] | {} |"
    )
    one = "\n\n".join(["## Paper", paper_table, "## Repeats", repeats.format("47.65")])
    assert conflicts(one) == []
    two = "\n\n".join(["## Paper", paper_table, "## Repeats", repeats.format("2.603")])
    assert conflicts(two) == ["('1', '1', '1') None VFLOPS: {'## Repeats': {2603000000.0}}"]


def test_the_plans_span_leaves_out_a_record_without_a_readable_time(raw):
    """A record from outside with a time that is no time (or a wall of 1e400, NaN) is left out
    of the plan's span, named by count, instead of ending the report in a traceback."""
    made = []
    for i, (utc, wall) in enumerate(
        [("2026-12-07T05:00:10+00:00", 10.0), ("2026-12-07T05:01:00+00:00", 20.0)]
        + [("yesterday", 1.0), ("2026-12-07T05:02:00+00:00", float("nan"))]
        + [("2026-12-07T05:02:00+00:00", 1e400)]
    ):
        r = copy.deepcopy(raw[0])
        r["provenance"]["utc"], r["timing"]["total_wall_s"] = utc, wall
        made.append(Record(Path(f"{i}.json"), r))
    runs = [paper.Run("fig5-M8", i, 0, r) for i, r in enumerate(made)]
    assert paper.span(runs).startswith("The 2 runs took 1 min 00 s from the first one's start")
    assert paper.span(runs).endswith("(3 record(s) without a readable time left out).")
    assert paper.span(runs[2:]).startswith("The plan's wall time: not given")


def test_a_stamped_point_is_read_from_the_record_not_the_run_id(raw):
    """A record whose sweep_plan names its point and seed index is that point's, whatever its
    run id (a misnamed run does not drop out); the seed index orders and pairs the runs."""
    made = []
    for i, r in enumerate(reversed([r for r in raw if "fig5-M8" in r["run_id"]])):
        r = copy.deepcopy(r)
        r["run_id"] = f"renamed-{i}"
        r["sweep_plan"] = {"experiment": "paper", "size": "full", "digest": "0" * 16}
        r["sweep_plan"] |= {"point": "fig5-M8", "seed_index": 2 - i}
        made.append(Record(Path(f"renamed-{i}.json"), r))
    points = paper.paper_runs(made)
    assert list(points) == ["fig5-M8"]
    assert [r.index for r in points["fig5-M8"]] == [0, 1, 2]
    assert [r.seed for r in points["fig5-M8"]] == [4000, 13000, 22000]
    # Another plan's stamped record is no paper record, whatever its run id says.
    other = copy.deepcopy(raw[0])
    other["sweep_plan"] = {"experiment": "tradeoff", "size": "full", "digest": "0" * 16}
    assert paper.paper_runs([Record(Path("x.json"), other)]) == {}
    assert not collect_is_paper(Record(Path("x.json"), other))


def test_across_seeds_the_controls_get_welch_and_the_paired_test(records):
    """fig5-M8's ensembles 0.80, 0.81, 0.82 against 0.78 thrice (each control, M = 8 and M = 1):
    differences 2, 3, 4 points, mean 3, sd 1: t = 3√3 on 2 degrees of freedom both ways (the
    control's spread is 0, so Welch's df is 2 too); the detectable difference (t_.975,2 +
    t_.8,2) / √3 = (4.3027 + 1.0607) / √3 = 3.097 points; 0.75 thrice for the M = 1 control."""
    rows = {r[0]: r for r in paper.seed_rows(paper.paper_runs(records))}
    assert set(rows) == {"fig5-M8 vs control-M8-nobag", "fig5-M8 vs control-M1-alldata"}
    row = rows["fig5-M8 vs control-M8-nobag"]
    assert row[1:4] == [3, 3, "3"] and row[6] == "3"
    p = 2 * (1 - 0.5 - 0.5 * (3 * math.sqrt(3)) / math.sqrt(2 + 27))  # t on 2 df, closed form
    assert float(row[5]) == pytest.approx(p, rel=1e-3) and float(row[8]) == pytest.approx(
        p, rel=1e-3
    )
    assert float(row[9]) == pytest.approx((4.3027 + 1.0607) / math.sqrt(3), abs=1e-3)
    assert row[10] == "a difference of +3.00 points (+0.52 to +5.48)"  # 3 ± 4.3027 / √3
    assert rows["fig5-M8 vs control-M1-alldata"][3] == "6"
    # Paired by seed index, not by place: without the control's index 0, pairs 1 and 2 remain
    # (differences 3 and 4 points), Welch keeps all 3 against 2.
    points = paper.paper_runs(records)
    points["control-M8-nobag"] = [
        dataclasses.replace(r, index=i) for i, r in enumerate(points["control-M8-nobag"])
    ][1:]
    row = {r[0]: r for r in paper.seed_rows(points)}["fig5-M8 vs control-M8-nobag"]
    assert row[1:3] == [3, 2] and row[6] == "3.5"
    assert [i for i, _, _ in paper.matched(points["fig5-M8"], points["control-M8-nobag"])] == [1, 2]
