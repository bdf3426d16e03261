"""Reports: the markdown report and its plots, --compare, and bad input as one line, exit 2.

Records come from two real runs made once per module (a tiny training run, a small STREAM run);
the scalability points, the trade-off pair, the invalid and foreign files are copies of them
with fields edited, so the report is tested on the records' real shape without more training.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import ROOT, run_in_process

from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.report import compare, plots, write_report
from hpcai_jax.report.__main__ import main as report_main
from hpcai_jax.report.build import render
from hpcai_jax.report.collect import Record, collect
from hpcai_jax.report.markdown import SECTIONS
from hpcai_jax.report.series import scalability, sys_scale_label

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


@pytest.fixture(scope="module")
def real(tmp_path_factory, tiny_run) -> dict[str, dict]:
    """One real training record (the session's tiny CLI run) and one real STREAM record."""
    folder = tmp_path_factory.mktemp("real")
    (folder / "real-train.json").write_text(json.dumps(tiny_run.record))
    stream = run_in_process(
        "--mode=stream",
        "--array_size=65536",
        "--allow_small_arrays",
        "--num_times=3",
        "--stream_devices=all",
        f"--results_dir={folder}",
        "--run_name=real-stream",
    )
    assert stream.returncode == 0, stream.stderr[-3000:]
    return {m: json.loads((folder / f"real-{m}.json").read_text()) for m in ("train", "stream")}


def variant(record: dict, run_id: str, m: int, p: int, flops: float, **fields) -> dict:
    """A copy of the real training record as if run with (M, P_degree) and measured `flops`;
    `fields` sets other figures by dotted path ("timing.train_wall_s": 1.5)."""
    r = copy.deepcopy(record)
    r["run_id"] = r["config"]["results"]["run_name"] = run_id
    r["mesh"].update(ensemble_size=m, parallel_degree=p, num_devices=m * p, members_per_device=1)
    r["config"]["mesh"].update(ensemble_size=m, parallel_degree=p, members_per_device=1)
    r["metrics"]["flops_per_s"] = flops
    r["metrics"]["flops_per_s_per_device"] = flops / (m * p)
    # One member per device: its bytes accessed are known (the real run's 2 members per device
    # in a loop leave them unknown), so the copy gets an arithmetic intensity and its roofline.
    roof = r["roofline"]
    roof["arithmetic_intensity_flops_per_byte"] = 5.0
    roof["attainable_flops_per_s"] = min(
        roof["peak_flops_per_s"], 5.0 * roof["bandwidth_bytes_per_s"]
    )
    roof["bound"] = (
        "memory" if roof["attainable_flops_per_s"] < roof["peak_flops_per_s"] else "compute"
    )
    roof["achieved_flops_per_s"] = flops / (m * p)
    roof["fraction_of_attainable"] = flops / (m * p) / roof["attainable_flops_per_s"]
    if r["metrics"]["penalty"] is not None:
        r["metrics"]["vflops_per_s"] = flops * r["metrics"]["penalty"]
    for path, value in fields.items():
        *parents, leaf = path.split(".")
        node = r
        for key in parents:
            node = node[key]
        node[leaf] = value
    return r


# Three evaluations during training, the third above a target of 0.75.
CURVE = [
    {"epoch": e, "step": 8 * e, "wall_s": 5.0 * e, "ensemble": q, "member_mean": q - 0.1}
    for e, q in ((1, 0.5), (2, 0.7), (3, 0.8))
]


def write(folder: Path, records: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, record in records.items():
        text = record if isinstance(record, str) else json.dumps(record)
        (folder / name).write_text(text)
    return folder


@pytest.fixture(scope="module")
def results(real, tmp_path_factory) -> Path:
    """A results directory: scalability M = 1, 2, 4 at P_degree = 2; a trade-off pair at
    Sys_scale 8; a STREAM record; and files the report must skip, each for its own reason."""
    t = real["train"]
    diverged = variant(t, "diverged", 2, 2, 1e9, status="invalid", reason="member 1 diverged")
    diverged["metrics"]["flops_per_s"] = None
    other = variant(t, "bigger-batch", 1, 2, 9e9)
    other["config"]["train"]["batch_size"] = 64
    return write(
        tmp_path_factory.mktemp("results"),
        {
            "s-M1.json": variant(t, "s-M1", 1, 2, 10e9, **{"timing.train_wall_s": 4.0}),
            "s-M2.json": variant(t, "s-M2", 2, 2, 18e9, **{"timing.train_wall_s": 4.4}),
            "s-M4.json": variant(
                t,
                "s-M4",
                4,
                2,
                30e9,
                **{"timing.train_wall_s": 5.0, "quality.ensemble": 0.8},
                **{"quality.target": 0.75, "quality.curve": CURVE, "time_to_target_s": 15.0},
            ),
            "t-M2.json": variant(
                t, "t-M2", 2, 4, 33e9, **{"timing.train_wall_s": 3.0, "quality.ensemble": 0.7}
            ),
            "real-stream.json": real["stream"],
            "diverged.json": diverged,
            "preempted.json": variant(t, "preempted", 1, 4, 1e9, status="partial", reason=""),
            "bigger-batch.json": other,
            "foreign.json": {"hello": "world"},
            "no-mesh.json": {k: v for k, v in t.items() if k != "mesh"},
            "flops-mode.json": {**t, "mode": "flops", "run_id": "flops-mode"},
            "broken.json": "{not json",
        },
    )


@pytest.fixture(scope="module")
def report(results) -> tuple[Path, str]:
    path = write_report([str(results)])
    return path, path.read_text()


def section(md: str, title: str) -> str:
    start = md.index(f"## {title}\n")
    end = md.find("\n## ", start + 1)
    return md[start : None if end < 0 else end]


def rows(text: str) -> list[dict[str, str]]:
    """The first markdown table in `text`, as dicts by header."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def unit(header: str) -> float:
    """The scale a header names: FLOPS [GFLOP/s] -> 1e9."""
    inside = header[header.index("[") + 1 : header.index("]")]
    return PREFIX[inside[: -len("FLOP/s")]] if inside.endswith("FLOP/s") else 1.0


def figure(value: float | None, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{value / scale:.4g}"


def column(table: list[dict], name: str) -> tuple[str, float]:
    header = next(h for h in table[0] if h.startswith(name + " ["))
    return header, unit(header)


@pytest.mark.slow
def test_report_has_every_section_and_valid_pngs(report):
    path, md = report
    for title in SECTIONS:
        assert f"\n## {title}\n" in md
    images = [line[line.index("](") + 2 : -1] for line in md.splitlines() if line.startswith("![")]
    assert {"scalability.png", "tradeoff_sys8.png", "mfu.png", "stream.png"} <= set(images)
    assert {"roofline.png", "quality_against_m.png", "quality_curve.png"} <= set(images)
    for name in images:
        data = (path.parent / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, name
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([*images, "report.md"])


def test_flops_table_holds_the_records_figures_and_the_linear_ideal(report, results):
    _, md = report
    table = rows(section(md, "FLOPS and VFLOPS against Sys_scale"))
    assert [(r["M"], r["P_degree"], r["Sys_scale"]) for r in table] == [
        ("1", "2", "2"),
        ("2", "2", "4"),
        ("4", "2", "8"),
        ("2", "4", "8"),
    ]
    flops_h, f_scale = column(table, "FLOPS")
    ideal_h, _ = column(table, "ideal FLOPS")
    vflops_h, v_scale = column(table, "VFLOPS")
    assert f_scale == 1e9
    by_run = {r["run"]: r for r in table}
    for run in ("s-M1", "s-M2", "s-M4", "t-M2"):
        record = records.read(results / f"{run}.json")
        assert by_run[run][flops_h] == figure(record.metrics.flops_per_s, f_scale)
        assert by_run[run][vflops_h] == figure(record.metrics.vflops_per_s, v_scale)
    # P_degree = 2: the ideal is the Sys_scale-2 run's FLOPS scaled linearly; P_degree = 4 has
    # one run: no ideal, no ratio (not 1, as if it scaled perfectly).
    assert [by_run[r][ideal_h] for r in ("s-M1", "s-M2", "s-M4")] == ["10", "20", "40"]
    assert (by_run["t-M2"][ideal_h], by_run["t-M2"]["FLOPS / ideal"]) == ("n/a", "n/a")
    assert by_run["s-M4"]["FLOPS / ideal"] == "0.75"


def test_ideal_is_the_smallest_point_scaled_linearly(real):
    t = real["train"]
    records = [
        Record(Path(f"{m}.json"), variant(t, f"M{m}", m, 2, f)) for m, f in ((4, 30e9), (2, 18e9))
    ]
    series = scalability(records)[2]
    assert [p.sys_scale for p in series] == [4, 8]
    assert [p.ideal_flops for p in series] == [18e9, 36e9]
    penalty = t["metrics"]["penalty"]
    assert series[1].ideal_vflops == pytest.approx(18e9 * penalty * 2)


def test_an_ablations_points_on_one_device_come_in_order_of_m(real):
    """All of a point's members on one device (sweep --members_per_device=0): every point has
    Sys_scale 1, and the rows follow M, not the run ids' text (M16 before M2)."""
    records = []
    for m in (16, 2, 1):
        r = variant(real["train"], f"a-M{m}", m, 1, 1e9)
        r["mesh"].update(members_per_device=m, num_devices=1)
        records.append(Record(Path(f"{m}.json"), r))
    assert [p.m for p in scalability(records)[1]] == [1, 2, 16]


def test_tradeoff_mfu_and_stream_tables(report, results, real):
    _, md = report
    trade = section(md, "Ensemble quality against training time")
    assert "### Sys_scale = 8" in trade and "tradeoff_sys8.png" in trade
    assert "Sys_scale = 2\n" not in trade  # one point only: no plot
    table = rows(trade)
    assert [(r["M"], r["P_degree"], r["training time [s]"]) for r in table] == [
        ("2", "4", "3"),
        ("4", "2", "5"),
    ]
    assert [r["ensemble top1_accuracy"] for r in table] == ["0.7", "0.8"]
    oob = real["train"]["quality"]["oob"]["quality"]
    assert table[0]["out-of-bag top1_accuracy"] == figure(oob)

    mfu = {r["run"]: r for r in rows(section(md, "MFU per run"))}
    assert set(mfu) == {"s-M1", "s-M2", "s-M4", "t-M2"}
    measured = real["train"]["metrics"]["mfu_measured"]
    assert mfu["s-M1"]["MFU measured [%]"] == figure(measured * 100)
    assert mfu["s-M1"]["MFU datasheet [%]"] == "n/a"  # a CPU has no datasheet peak

    stream = rows(section(md, "STREAM bandwidth"))
    kernels = real["stream"]["kernels"]
    assert [r["kernel"] for r in stream] == [k["label"] for k in kernels.values()]
    for row, k in zip(stream, kernels.values(), strict=True):
        assert row["GB/s"] == figure(k["gb_per_s"])
        assert row["GB/s per device"] == figure(k["gb_per_s_per_device"])


def test_quality_against_m_table_and_the_sys_scale_label(report, real):
    _, md = report
    text = section(md, "Ensemble quality against M")
    assert "quality_against_m.png" in text
    table = {r["run"]: r for r in rows(text)}
    assert set(table) == {"s-M1", "s-M2", "s-M4", "t-M2"}
    members = real["train"]["quality"]["members"]
    assert table["s-M1"]["best member"] == figure(max(members))
    assert table["s-M1"]["worst member"] == figure(min(members))
    assert (table["s-M4"]["ensemble top1_accuracy"], table["s-M4"]["target"]) == ("0.8", "0.75")

    def label(mpd, pm):
        return sys_scale_label([SimpleNamespace(members_per_device=mpd, model_parallel=pm)])

    assert label(1, 1) == "Sys_scale (devices = M × P_degree)"
    assert label(2, 1) == "Sys_scale (devices = M / members_per_device × P_degree)"
    assert label(1, 2) == "Sys_scale (devices = M × P_degree × P_model)"


def test_quality_curve_tables_hold_the_records_points(report, real):
    _, md = report
    text = section(md, "Quality during training and time to target")
    # The third table links the runs' TensorBoard events (their records are the tiny run's).
    summary, points, _ = (rows(p) for p in text.split("\n\n") if p.startswith("|"))
    by_run = {r["run"]: r for r in summary}
    assert set(by_run) == {"s-M1", "s-M2", "s-M4", "t-M2"}
    assert (by_run["s-M4"]["evaluations"], by_run["s-M4"]["target"]) == ("3", "0.75")
    assert by_run["s-M4"]["time to target [s]"] == "15"
    why = real["train"]["time_to_target_why"]
    assert by_run["s-M1"]["time to target [s]"] == "n/a" and by_run["s-M1"]["why none"] == why
    mine = [(r["epoch"], r["wall time [s]"], r["ensemble top1_accuracy"]) for r in points]
    assert [row for row, r in zip(mine, points, strict=True) if r["run"] == "s-M4"] == [
        ("1", "5", "0.5"),
        ("2", "10", "0.7"),
        ("3", "15", "0.8"),
    ]


def test_roofline_table_holds_the_records_figures(report, real):
    _, md = report
    roof = {r["run"]: r for r in rows(section(md, "Roofline"))}
    assert set(roof) == {"s-M1", "s-M2", "s-M4", "t-M2"}
    figures = real["train"]["roofline"]
    row = roof["s-M1"]
    peak = next(h for h in row if h.startswith("peak"))
    assert float(row[peak]) * unit(peak) == pytest.approx(figures["peak_flops_per_s"], rel=1e-3)
    assert figures["arithmetic_intensity_flops_per_byte"] is None  # 2 members per device
    assert row["intensity [FLOP/B]"] == figure(5.0)  # variant's: one member per device
    ridge = figures["peak_flops_per_s"] / figures["bandwidth_bytes_per_s"]
    assert row["ridge [FLOP/B]"] == figure(ridge)


def test_communication_and_division_tables_hold_the_records_figures(report, real):
    _, md = report
    comm = {r["run"]: r for r in rows(section(md, "Communication per step and device"))}
    assert set(comm) == {"s-M1", "s-M2", "s-M4", "t-M2"}
    figures, row = real["train"]["comm"], comm["s-M1"]
    wire = next(h for h in row if h.startswith("wire data ["))
    scale = {"B": 1.0, "kB": 1e3, "MB": 1e6}[wire[wire.index("[") + 1 : -1]]
    assert row[wire] == figure(figures["wire_bytes"]["data"], scale)
    assert row[wire.replace("wire data", "payload data")] == figure(
        figures["payload_bytes"]["data"], scale
    )
    assert row[wire.replace("wire data", "wire ensemble")] == "0"
    assert row[wire.replace("wire data", "inter-node")] == "0"  # one process, one node
    assert (row["nodes"], row["gradient reduction"]) == ("1", "flat float32")
    machine = {r["run"]: r for r in rows(section(md, "Division, memory and energy"))}
    broken = len(real["train"]["submission"]["violations"])
    assert machine["s-M1"]["division"] == f"open ({broken} rules broken)"
    assert machine["s-M1"]["energy [J]"] == "n/a"
    assert machine["s-M1"]["energy not measured: why"] == real["train"]["energy"]["why"]


def test_output_only_flags_never_split_a_group(real, tmp_path):
    """An MLLOG, a STREAM record for the roofline, another checkpoint folder: the same
    experiment, plotted together; --compare lists no configuration difference for them."""
    plain = variant(real["train"], "plain", 1, 2, 1e9)
    logged = variant(real["train"], "logged", 2, 2, 2e9)
    logged["config"]["results"].update(mllog="logs/x.mllog", stream_record="results/s.json")
    logged["config"]["reliability"]["checkpoint_dir"] = "/elsewhere"
    folder = write(tmp_path, {"plain.json": plain, "logged.json": logged})
    collection = collect([str(folder)])
    assert [r.run_id for r in collection.train] == ["logged", "plain"] and not collection.skipped
    text = compare(str(folder / "plain.json"), str(folder / "logged.json"))
    config = rows(section(text, "Configuration differences"))
    assert [r["config field"] for r in config] == ["mesh.ensemble_size"]


@pytest.mark.parametrize("folder", ["example_report", "paper"])
def test_the_shipped_example_report_is_what_its_records_give(folder, tmp_path, monkeypatch):
    """docs/example_report/ and docs/paper/ (docs/paper.md): each report.md is the
    report of its records, byte for byte, and every plot it shows is shipped beside it (not
    redrawn here: the text is the claim, and drawing eight PNGs would cost seconds of suite
    time)."""
    monkeypatch.chdir(ROOT)
    for name in dir(plots):
        if callable(getattr(plots, name)) and getattr(plots, name).__module__ == plots.__name__:
            monkeypatch.setattr(plots, name, lambda *args, **kwargs: None)
    example = ROOT / "docs" / folder
    # Rendered for a sibling of the shipped folder, as `write_report` stages it (nothing is
    # written: no plot is drawn), so that links to files beside the records are the shipped
    # report's.
    md = render(collect([f"docs/{folder}/records"]), Path("docs") / f"{folder}.check")
    assert md == (example / "report.md").read_text()
    images = {line[line.index("](") + 2 : -1] for line in md.splitlines() if line.startswith("![")}
    assert images and all((example / name).read_bytes().startswith(PNG_MAGIC) for name in images)
    assert sorted(p.name for p in example.glob("*.png")) == sorted(images)


def test_skipped_records_say_why(report):
    _, md = report
    skipped = {r["file"]: r["why it was not used"] for r in rows(section(md, "Skipped records"))}
    assert set(skipped) == {
        "diverged.json",
        "preempted.json",
        "bigger-batch.json",
        "foreign.json",
        "broken.json",
        "no-mesh.json",
        "flops-mode.json",
    }
    assert skipped["diverged.json"] == "status invalid: member 1 diverged"
    assert skipped["preempted.json"].startswith("status partial")
    assert skipped["foreign.json"] == 'not a hpcai_jax record: no "mode" field'
    assert skipped["no-mesh.json"] == "incomplete record: no mesh.ensemble_size"
    assert skipped["flops-mode.json"].startswith("mode flops: the report plots train and stream")
    assert skipped["broken.json"].startswith("not a hpcai_jax record: unreadable or not JSON")
    assert skipped["bigger-batch.json"].endswith(": train.batch_size = 64 (majority: 16)")
    assert "bigger-batch" not in section(md, "FLOPS and VFLOPS against Sys_scale")


def test_a_field_only_newer_records_have_does_not_split_them(real, tmp_path):
    """A configuration field added by a newer hpcai_jax is no difference between two setups;
    --compare still shows it, as absent from the older record."""
    old = variant(real["train"], "old", 1, 2, 1e9)
    new = variant(real["train"], "new", 2, 2, 2e9)
    new["config"]["results"]["added_later"] = ""
    folder = write(tmp_path, {"old.json": old, "new.json": new})
    collection = collect([str(folder)])
    assert [r.run_id for r in collection.train] == ["new", "old"] and not collection.skipped
    text = compare(str(folder / "old.json"), str(folder / "new.json"))
    assert '| results.added_later | (absent) | "" |' in text


def test_records_without_quality_plot_what_exists(real, tmp_path):
    """Synthetic data: no quality, no VFLOPS; the report says n/a and plots FLOPS only."""
    t = copy.deepcopy(real["train"])
    t["metrics"].update(vflops_per_s=None, penalty=None)
    t["quality"].update(ensemble=None, member_mean=None, members=None, oob=None, target=None)
    t["quality"]["curve"] = []
    folder = write(
        tmp_path / "synthetic",
        {f"M{m}.json": variant(t, f"M{m}", m, 1, m * 1e9) for m in (1, 2)},
    )
    md = write_report([str(folder)], tmp_path / "out").read_text()
    table = rows(section(md, "FLOPS and VFLOPS against Sys_scale"))
    vflops_h, _ = column(table, "VFLOPS")
    assert [r[vflops_h] for r in table] == ["n/a", "n/a"]
    assert "No run has a VFLOPS figure" in md
    assert "nothing to plot" in section(md, "Ensemble quality against training time")
    assert "No training record has a held-out evaluation" in section(
        md, "Quality during training and time to target"
    )
    assert "No complete STREAM record" in section(md, "STREAM bandwidth")
    assert (tmp_path / "out" / "scalability.png").read_bytes().startswith(PNG_MAGIC)


def test_compare_shows_ratios_and_what_differs(results, tmp_path):
    proc = cli("--compare", str(results / "s-M1.json"), str(results / "s-M2.json"))
    assert proc.returncode == 0, proc.stderr
    figures = {r["figure"]: r for r in rows(section(proc.stdout, "Headline figures"))}
    assert figures["FLOPS"]["A: s-M1"] == "10 GFLOP/s"
    assert figures["FLOPS"]["B: s-M2"] == "18 GFLOP/s"
    assert figures["FLOPS"]["B/A"] == "1.8"
    assert figures["Sys_scale (devices)"]["B/A"] == "2"
    assert figures["MFU datasheet"]["B/A"] == "n/a"
    for label in ("VFLOPS", "ensemble quality", "out-of-bag quality", "step time median"):
        assert label in figures
    assert figures["time to target"]["A: s-M1"] == "n/a"  # the real run never reached 0.9
    assert figures["wire bytes over data"]["B/A"] == "1"  # the variants keep the real comm
    assert figures["wire bytes inter-node"]["A: s-M1"] == "0 B"
    assert figures["division"]["A: s-M1"] == "open"
    config = {r["config field"]: r for r in rows(section(proc.stdout, "Configuration differences"))}
    assert set(config) == {"mesh.ensemble_size"}
    assert (config["mesh.ensemble_size"]["A"], config["mesh.ensemble_size"]["B"]) == ("1", "2")

    other = json.loads((results / "s-M1.json").read_text())
    other["provenance"].update(device_kind="NVIDIA H200", git_commit="abc")
    write(tmp_path, {"h200.json": other})
    proc = cli("--compare", str(results / "s-M1.json"), str(tmp_path / "h200.json"))
    provenance = {
        r["provenance"]: r["B"] for r in rows(section(proc.stdout, "Provenance differences"))
    }
    assert provenance == {"device_kind": "NVIDIA H200", "git_commit": "abc"}


def test_compare_stream_records_and_writes_with_out(real, tmp_path):
    fast = copy.deepcopy(real["stream"])
    fast["run_id"] = "fast"
    fast["kernels"]["triad"]["gb_per_s"] *= 2
    folder = write(tmp_path, {"a.json": real["stream"], "b.json": fast})
    args = ("--compare", str(folder / "a.json"), str(folder / "b.json"), "--out", "cmp")
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    figures = {r["figure"]: r for r in rows(section(proc.stdout, "Headline figures"))}
    assert figures["Triad bandwidth"]["B/A"] == "2"
    assert figures["Copy bandwidth"]["B/A"] == "1"
    assert (tmp_path / "cmp" / "compare_real-stream_vs_fast.md").read_text() == proc.stdout


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`python -m hpcai_jax.report ARGS` in this process: its main, exit code and output (the
    interpreter's own path is `test_cli_writes_the_report_under_the_first_results_directory`'s)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report_main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def python_m(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcai_jax.report", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hpcai_jax.report: error: ") and "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.slow
def test_cli_writes_the_report_under_the_first_results_directory(results, tmp_path):
    folder = write(tmp_path / "r", {"s.json": json.loads((results / "s-M1.json").read_text())})
    proc = python_m(str(folder))
    assert proc.returncode == 0, proc.stderr
    assert (folder / "report" / "report.md").exists()
    assert proc.stdout.strip() == f"report: {folder / 'report' / 'report.md'}"


def test_no_records_names_each_files_reason_as_pack_does(tmp_path):
    """A truncated record and one of an unknown schema_version: the line says why each is not
    a record (it said only 'none with a known "mode"')."""
    text = (ROOT / "tests" / "data" / "tiny_run_record.json").read_text()
    future = {**json.loads(text), "schema_version": 999}
    folder = write(tmp_path / "bad", {"a.json": text[: len(text) // 2], "b.json": future})
    assert_one_line_error(
        cli(str(folder), "--out", str(tmp_path / "out")),
        f"no hpcai_jax records in {folder}: 2 JSON file(s), none a record: ",
        "a.json: not a hpcai_jax record: unreadable or not JSON (JSONDecodeError)",
        "b.json: not a hpcai_jax record: schema_version 999: this hpcai_jax reads versions",
    )
    for extra in ("c.json", "d.json"):
        write(folder, {extra: future})
    assert_one_line_error(cli(str(folder), "--out", str(tmp_path / "out")), "; and 2 more")
    assert not (tmp_path / "out").exists()


def test_bad_input_is_one_line_and_exit_2(results, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    foreign = write(tmp_path / "foreign", {"x.json": {"a": 1}})
    a_file = tmp_path / "file"
    a_file.write_text("x")
    out = tmp_path / "out"
    assert_one_line_error(cli(str(tmp_path / "nope"), "--out", str(out)), "nope", "no such")
    assert_one_line_error(cli(str(empty), "--out", str(out)), "no records found", str(empty))
    assert_one_line_error(cli(str(foreign), "--out", str(out)), "no hpcai_jax records")
    assert not out.exists()
    assert_one_line_error(cli(str(results), "--out", str(a_file)), f"--out={a_file}")
    assert_one_line_error(cli(str(results), "--out", str(a_file / "r")), f"--out={a_file}/r")
    assert_one_line_error(cli(), "RESULTS")
    assert_one_line_error(cli("--bogus"), "--bogus")
    record = str(results / "s-M1.json")
    assert_one_line_error(cli("--compare", record), "--compare")
    assert_one_line_error(cli("--compare", record, str(tmp_path / "nope.json")), "nope.json")
    assert_one_line_error(cli("--compare", record, str(results)), "is a directory")
    stream = str(results / "real-stream.json")
    assert_one_line_error(cli("--compare", record, stream), "same mode")
    assert_one_line_error(cli("--compare", record, str(results / "foreign.json")), "foreign")


@pytest.mark.slow
def test_api_raises_usage_error_and_rewrites_in_place(results, tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        write_report([str(tmp_path / "missing")])
    out = tmp_path / "out"
    write_report([str(results)], out)
    first = (out / "report.md").read_text()
    assert write_report([str(results)], out).read_text() == first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    (out / "notes.txt").write_text("mine")
    write_report([str(results / "s-M1.json")], out)  # no trade-off, no STREAM: plots go
    assert sorted(p.name for p in out.iterdir()) == [
        "mfu.png",
        "notes.txt",
        "quality_curve.png",
        "quality_per_member.png",
        "report.md",
        "roofline.png",
        "scalability.png",
    ]
    write_report([str(results)], out)
    assert "| s-M1 | train |" in first
    assert collect([str(results)]).majority["train"]["train.batch_size"] == 16
    assert "mesh.ensemble_size" in compare(str(results / "s-M1.json"), str(results / "s-M4.json"))


def help_entries(text: str) -> dict[str, str]:
    """argparse's --help, option by option: the first option string -> its line and help, with
    white space collapsed."""
    section = text[text.index("\noptions:\n") :].split("\n\n")[0]
    entries: dict[str, str] = {}
    for line in section.splitlines()[2:]:
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            entries[current] = line
        else:
            entries[current] += " " + line
    return {k: " ".join(v.split()) for k, v in entries.items()}


@pytest.mark.slow
@pytest.mark.parametrize("module", ["hpcai_jax.report", "hpcai_jax.sweep"])
def test_help_shows_every_option_with_its_help_and_default(module):
    """Every option the parser defines is in `python -m MODULE --help` with its help and its
    default (or "(required)"); the description is whole sentences; the sweep's epilog holds the
    launcher's placeholders and a CPU launcher."""
    import importlib

    parser = importlib.import_module(module if module.endswith("sweep") else module + ".__main__")
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    entries = help_entries(proc.stdout)
    actions = [a for a in parser.parser()._actions if a.option_strings and a.dest != "help"]
    assert len(actions) >= 2
    for action in actions:
        entry = entries[action.option_strings[0]]
        assert " ".join(action.help.split()[:4]) in entry, entry
        if action.required:
            assert entry.endswith("(required)"), entry
        elif "(default" not in action.help:
            assert entry.endswith(f"(default: {action.default})"), entry
        else:
            assert "(default: " in entry, entry
    description = proc.stdout.split("\n\n")[1]
    assert description.rstrip().endswith("."), description  # not cut mid-sentence
    if module.endswith("sweep"):
        for placeholder in ("{devices}", "{nodes}", "{devices_per_node}", "launch/local.py"):
            assert placeholder in proc.stdout, placeholder


def test_a_tie_for_the_majority_is_stated(real, tmp_path):
    """Two configurations of one record each: the first is plotted, and the other's reason
    says it was a tie, not a majority."""
    a = variant(real["train"], "a", 1, 2, 1e9)
    b = variant(real["train"], "b", 1, 2, 1e9)
    b["config"]["train"]["batch_size"] = 64
    collection = collect([str(write(tmp_path, {"a.json": a, "b.json": b}))])
    (skipped,) = collection.skipped
    assert "a tie: 2 configurations have 1 record(s) each" in skipped.why


def test_plots_tell_overlapping_runs_apart_and_caveat_shared_cores(real, monkeypatch, tmp_path):
    """The roofline names each run at its achieved point; the MFU plot warns that CPU devices
    share cores; the scalability plot draws VFLOPS's ideal line where it has two Sys_scales."""
    from hpcai_jax.report import series

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    records = [
        Record(Path(f"{name}.json"), variant(real["train"], name, m, 1, f))
        for name, m, f in (("one", 1, 1e9), ("two", 2, 2e9))
    ]
    plots.roofline(series.roofline(records), tmp_path / "r.png")
    texts = [t.get_text() for t in figures[-1].axes[0].texts]
    assert {"one", "two"} <= set(texts), texts
    plots.mfu(series.mfu(records), tmp_path / "m.png")
    assert "CPU devices share the host's cores" in figures[-1].axes[0].get_title()
    plots.scalability(scalability(records), tmp_path / "s.png", "t")
    labels = [line.get_label() for line in figures[-1].axes[0].lines]
    assert any(label.startswith("ideal VFLOPS") for label in labels), labels


def test_a_tie_plots_the_newest_configuration_and_says_so_first(tmp_path):
    """Two shipped records of different configurations, one each: the newer (by provenance.utc)
    is plotted, whichever file is listed first, and the report's first lines say so; --run
    picks the other, by run id or file name."""
    import shutil

    src = ROOT / "docs" / "example_report" / "records"
    for name in ("cpu-M1-P1.json", "cpu-M2-P1-b64.json"):  # utc 16:11 and 16:24 the same day
        shutil.copy(src / name, tmp_path / name)
    collection = collect([str(tmp_path)])
    assert [r.run_id for r in collection.train] == ["cpu-M2-P1-b64"]
    assert collection.notes == [
        "train: a tie: 2 configurations have 1 record(s) each, the newest record's is plotted "
        "(cpu-M2-P1-b64); the others are listed as skipped (--run picks one)"
    ]
    assert [r.run_id for r in collect([str(tmp_path)], ("cpu-M1-P1",)).train] == ["cpu-M1-P1"]
    out = tmp_path / "report"
    assert report_main([str(tmp_path), f"--out={out}"]) == 0
    assert (out / "report.md").read_text().splitlines()[2].startswith("Note: train: a tie")
    with pytest.raises(UsageError, match="--run=nope: no record with that run id"):
        collect([str(tmp_path)], ("nope",))
