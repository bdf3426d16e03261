"""Repeats: the statistics against figures computed by hand, and a 5-repeat summary in the report
built from copies of the tiny run's record (seeds 0..4, figures edited), not from 5 trainings.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from matplotlib.container import ErrorbarContainer

from hpcai_jax.report import plots, series, write_report
from hpcai_jax.report.collect import collect
from hpcai_jax.report.repeats import T_975, summarise, t_975

# Five repeats of one configuration, each figure chosen so that its interval is easy by hand.
FLOPS = [10e9, 11e9, 12e9, 13e9, 19e9]
QUALITY = [0.80, 0.82, 0.84, 0.86, 0.88]
TIME_TO_TARGET = [30.0, 32.0, 34.0, 36.0, None]  # the fifth run never reached the target


def test_t_quantile_table_and_beyond():
    assert len(T_975) == 30
    assert (t_975(1), t_975(4), t_975(30)) == (12.7062, 2.7764, 2.0423)
    # Beyond the table: Cornish-Fisher, within 1e-4 of t (2.039513 at 31, 1.983972 at 100).
    assert t_975(31) == pytest.approx(2.039513, abs=1e-4)
    assert t_975(100) == pytest.approx(1.983972, abs=1e-4)
    assert t_975(10**9) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="df >= 1"):
        t_975(0)


def test_t_table_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (*range(1, 31), 31, 45, 80, 200):
        assert t_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-4), df


def test_summary_arithmetic_by_hand():
    # 1, 2, 3: mean 2, s = 1, half width t(2) × 1 / √3 = 4.3027 / 1.7321 = 2.4841.
    s = summarise([1.0, 2.0, 3.0])
    assert (s.n, s.mean, s.std, s.low, s.high) == (3, 2.0, 1.0, 1.0, 3.0)
    assert (s.ci_low, s.ci_high) == pytest.approx((2 - 2.48417, 2 + 2.48417), abs=1e-5)
    assert s.olympic is None  # under 5 runs
    # Two runs: s = √2, half width t(1) × √2 / √2 = 12.7062.
    assert summarise([1.0, 3.0]).half_width == pytest.approx(12.7062)
    # 10, 11, 12, 13, 19: mean 13; squares 9 + 4 + 1 + 0 + 36 = 50, s = √(50 / 4) = 3.5355;
    # half width 2.7764 × 3.5355 / √5 = 4.3899; olympic: (11 + 12 + 13) / 3 = 12.
    s = summarise([10, 11, 12, 13, 19])
    assert s.std == pytest.approx(math.sqrt(12.5))
    assert s.half_width == pytest.approx(4.38987, abs=1e-5)
    assert s.olympic == 12.0
    # Missing or non-finite figures are left out of N; one figure has no spread.
    one = summarise([None, float("nan"), 4, "n/a"])
    assert (one.n, one.mean, one.std, one.ci_low, one.half_width) == (1, 4.0, None, None, None)
    assert summarise([]).n == 0 and summarise([]).mean is None


def repeat(record: dict, run_id: str, m: int, p: int, seed: int, **fields) -> dict:
    """A copy of the tiny run's record as if run with (M, P_degree) and --seed=`seed`; `fields`
    sets figures by dotted path ("metrics.flops_per_s": 1e9)."""
    r = copy.deepcopy(record)
    r["run_id"] = r["config"]["results"]["run_name"] = run_id
    r["mesh"].update(ensemble_size=m, parallel_degree=p, num_devices=m * p, members_per_device=1)
    r["config"]["mesh"].update(ensemble_size=m, parallel_degree=p, members_per_device=1)
    r["config"]["train"]["seed"] = seed
    for path, value in fields.items():
        *parents, leaf = path.split(".")
        node = r
        for key in parents:
            node = node[key]
        node[leaf] = value
    return r


@pytest.fixture(scope="module")
def five(tiny_run, tmp_path_factory) -> Path:
    """Five repeats of (M, P) = (2, 1) with seeds 0..4; one run of (1, 2); one run with another
    batch size (another configuration: skipped, not a sixth repeat)."""
    t, folder = tiny_run.record, tmp_path_factory.mktemp("repeats")
    runs = {}
    for k, (f, q, ttt) in enumerate(zip(FLOPS, QUALITY, TIME_TO_TARGET, strict=True)):
        runs[f"rep-r{k}"] = repeat(
            t,
            f"rep-r{k}",
            2,
            1,
            seed=k,
            **{"metrics.flops_per_s": f, "metrics.vflops_per_s": f / 2},
            **{"quality.ensemble": q, "time_to_target_s": ttt, "timing.train_wall_s": 4.0 + k},
        )
    runs["single"] = repeat(t, "single", 1, 2, seed=0, **{"timing.train_wall_s": 3.0})
    runs["b64"] = repeat(t, "b64", 2, 1, seed=5)
    runs["b64"]["config"]["train"]["batch_size"] = 64
    for name, record in runs.items():
        (folder / f"{name}.json").write_text(json.dumps(record))
    return folder


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every markdown table in `text`, each as rows of dicts by header."""
    out = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if lines:
            cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
            out.append([dict(zip(cells[0], row, strict=True)) for row in cells[2:]])
    return out


def test_a_five_repeat_summary_with_its_interval(five, tmp_path):
    md = write_report([str(five)], tmp_path / "out").read_text()
    start = md.index("## Repeats\n")
    text = md[start : md.index("\n## ", start + 1)]
    runs, stats = tables(text)
    assert runs == [
        {
            "M": "2",
            "P_degree": "1",
            "Sys_scale": "2",
            "runs": "5",
            "run ids": "rep-r0, rep-r1, rep-r2, rep-r3, rep-r4",
            "seeds": "0, 1, 2, 3, 4",
        }
    ]
    assert "1 other configuration(s) ran once" in text  # (1, 2): no spread to report
    by_figure = {r["figure"]: r for r in stats}
    values = ("N", "mean", "std", "min", "max", "95 % interval low", "95 % interval high")
    values += ("olympic mean",)
    # FLOPS by hand: mean 13, s = 3.536, 13 ± 4.390, olympic 12 (GFLOP/s).
    flops = [by_figure["FLOPS [GFLOP/s]"][k] for k in values]
    assert flops == ["5", "13", "3.536", "10", "19", "8.61", "17.39", "12"]
    vflops = [by_figure["VFLOPS [GFLOP/s]"][k] for k in values]  # half of FLOPS, run by run
    assert vflops == ["5", "6.5", "1.768", "5", "9.5", "4.305", "8.695", "6"]
    # Quality: mean 0.84, s = √0.001 = 0.03162, half width 2.7764 × 0.03162 / √5 = 0.03926.
    quality = [by_figure["ensemble top1_accuracy"][k] for k in values]
    assert quality == ["5", "0.84", "0.03162", "0.8", "0.88", "0.8007", "0.8793", "0.84"]
    # Time to target: 4 runs reached it; s = √(20 / 3) = 2.582, half 3.1824 × 2.582 / 2 = 4.108.
    ttt = [by_figure["time to target [s]"][k] for k in values]
    assert ttt == ["4", "33", "2.582", "30", "36", "28.89", "37.11", "n/a"]
    skipped = md[md.index("## Skipped records\n") :]
    assert "b64.json" in skipped and "train.batch_size = 64" in skipped
    assert (tmp_path / "out" / "tradeoff_sys2.png").exists()


def test_plots_draw_repeats_as_their_mean_with_the_interval(five, monkeypatch):
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    train = collect([str(five)]).train
    plots.scalability(series.scalability(train), Path("unused.png"), "repeats")
    trade = series.tradeoff(train)[2]
    plots.tradeoff(series.plottable(trade), 2, "top1_accuracy", Path("unused.png"))
    scale, trade_fig = figures
    bars = {c.get_label(): c for c in scale.axes[0].containers if isinstance(c, ErrorbarContainer)}
    assert set(bars) == {"FLOPS, P_degree = 1", "VFLOPS, P_degree = 1"}  # (1, 2) ran once
    line, _, (segments,) = bars["FLOPS, P_degree = 1"].lines
    assert line.get_xydata().tolist() == [[2.0, 13.0]]  # GFLOP/s: the five runs' mean
    ((low, high),) = [(a[1], b[1]) for a, b in segments.get_segments()]
    assert (low, high) == pytest.approx((13 - 4.38987, 13 + 4.38987), abs=1e-4)
    # Quality against training time: (2, 1)'s five runs one point, bars both ways.
    (ensemble,) = [c for c in trade_fig.axes[0].containers if c.get_label() == "bagged ensemble"]
    assert ensemble.has_xerr and ensemble.has_yerr
    points = ensemble.lines[0].get_xydata().ravel().tolist()
    assert points == pytest.approx([3.0, 0.1, 6.0, 0.84])  # (1, 2) once; (2, 1)'s means
