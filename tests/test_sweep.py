"""The paper's scalability and trade-off sweeps: their plans, and a real local sweep."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.sweep import EPILOG, Point, base_seed, command, jobs, main, mllog_path, plan
from hpcai_jax.sweep_plan import Stopped, fingerprint

# The CPU launcher the sweep's --help gives as its example: the one the local sweep below runs.
LOCAL_LAUNCHER = re.search(r"--launcher='(python launch/local\.py [^']*)'", EPILOG).group(1)


def test_plans():
    assert plan("scalability", parallel_degree=8, max_ensemble=3) == [
        Point(1, 8),
        Point(2, 8),
        Point(3, 8),
    ]
    assert [p.devices for p in plan("scalability", parallel_degree=8, max_ensemble=3)] == [
        8,
        16,
        24,
    ]
    # The paper's trade-off: (M, P) = (8, 8), (4, 16), (1, 64) among the divisors of 64.
    points = plan("tradeoff", sys_scale=64)
    assert {Point(8, 8), Point(4, 16), Point(1, 64)} <= set(points)
    assert all(p.devices == 64 for p in points)
    with pytest.raises(ValueError, match="tradeoff needs --sys_scale"):
        plan("tradeoff")


def test_ablation_plans_put_a_points_members_on_its_devices():
    """--members_per_device: gcd(M, K) members per device, 0 for all of a point's; the command
    says so, and a scalability sweep on one device is one mapped program per point."""
    points = plan("scalability", 1, members_per_device=0, ensemble_sizes=(1, 2, 4, 8, 16))
    assert [(p.ensemble_size, p.members_per_device, p.devices) for p in points] == [
        (1, 1, 1),
        (2, 2, 1),
        (4, 4, 1),
        (8, 8, 1),
        (16, 16, 1),
    ]
    assert [p.members_per_device for p in plan("scalability", 2, 6, members_per_device=4)] == [
        1,
        2,
        1,
        4,
        1,
        2,
    ]
    assert command(points[-1], "", 1, "a-M16", [])[-2] == "--members_per_device=16"
    with pytest.raises(ValueError, match="members_per_device must be >= 0"):
        plan("scalability", 1, 4, members_per_device=-1)
    with pytest.raises(ValueError, match="expected every M >= 1"):
        plan("scalability", 1, ensemble_sizes=(0, 2))


def test_the_tradeoff_runs_the_ensemble_sizes_it_is_given():
    """Fig. 7's points are chosen with --ensemble_sizes: only those M, each P_degree = Sys_scale
    / M; before, every divisor ran and the sizes were silently ignored."""
    points = plan("tradeoff", sys_scale=8, ensemble_sizes=(8, 4, 2, 1))
    assert [(p.ensemble_size, p.parallel_degree) for p in points] == [
        (8, 1),
        (4, 2),
        (2, 4),
        (1, 8),
    ]
    assert [p.ensemble_size for p in plan("tradeoff", sys_scale=64, ensemble_sizes=(8, 1))] == [
        8,
        1,
    ]
    assert len(plan("tradeoff", sys_scale=8)) == 4  # no sizes: every divisor, as before
    with pytest.raises(ValueError, match="M=3 does not divide --sys_scale=8"):
        plan("tradeoff", sys_scale=8, ensemble_sizes=(4, 3))
    with pytest.raises(ValueError, match="expected every M >= 1"):
        plan("tradeoff", sys_scale=8, ensemble_sizes=(0, 8))


def test_command_fills_the_launcher_template():
    cmd = command(
        Point(2, 8),
        "srun --nodes={nodes} --ntasks-per-node={devices_per_node}",
        8,
        "s-M2",
        ["--flagfile=x.flags"],
    )
    assert cmd[:3] == ["srun", "--nodes=2", "--ntasks-per-node=8"]
    assert cmd[-4:] == [
        "--ensemble_size=2",
        "--parallel_degree=8",
        "--members_per_device=1",
        "--run_name=s-M2",
    ]


def test_each_run_gets_its_own_mllog(tmp_path):
    flagfile = tmp_path / "runs.flags"
    flagfile.write_text("--mllog=logs/sweep.mllog\n--steps=2\n")
    assert mllog_path([f"--flagfile={flagfile}"]) == "logs/sweep.mllog"
    assert mllog_path([f"--flagfile={flagfile}", "--mllog", "other.log"]) == "other.log"
    assert mllog_path(["--steps=2"]) == ""
    cmd = command(Point(2, 8), "", 8, "s-M2", [f"--flagfile={flagfile}"], "logs/sweep.mllog")
    assert cmd[-2:] == ["--run_name=s-M2", "--mllog=logs/sweep.s-M2.mllog"]  # the last one wins
    with pytest.raises(UsageError, match="none.flags: cannot read it"):
        mllog_path([f"--flagfile={tmp_path}/none.flags"])


def test_a_flagfiles_include_is_found_from_another_folder(tmp_path, monkeypatch):
    """configs/ensemble_ablation.flags includes configs/quickstart.flags by a path relative to
    the repository: the sweep reads it as main does, from any working directory."""
    monkeypatch.chdir(tmp_path)
    ablation = [f"--flagfile={ROOT / 'configs' / 'ensemble_ablation.flags'}"]
    assert base_seed(ablation) == 0
    assert mllog_path([*ablation, "--mllog=a.mllog"]) == "a.mllog"
    assert fingerprint("tradeoff", False, ablation).startswith("tradeoff:full:")


def test_repeats_run_the_sweep_k_times_with_derived_seeds(tmp_path):
    points = plan("tradeoff", sys_scale=2)
    runs = jobs(points, 3, "s", "tradeoff", seed=2**32 - 1)
    assert [(j.point, j.name, j.index, j.seed) for j in runs] == [
        (Point(2, 1), "s-tradeoff-M2-P1-r0", 0, 2**32 - 1),
        (Point(1, 2), "s-tradeoff-M1-P2-r0", 0, 2**32 - 1),
        (Point(2, 1), "s-tradeoff-M2-P1-r1", 1, 0),  # (seed + k) mod 2^32
        (Point(1, 2), "s-tradeoff-M1-P2-r1", 1, 0),
        (Point(2, 1), "s-tradeoff-M2-P1-r2", 2, 1),
        (Point(1, 2), "s-tradeoff-M1-P2-r2", 2, 1),
    ]
    # One repeat is the plain sweep: its run names, the runs' own --seed.
    assert [(j.name, j.seed) for j in jobs(points, 1, "s", "tradeoff", seed=7)] == [
        ("s-tradeoff-M2-P1", None),
        ("s-tradeoff-M1-P2", None),
    ]
    cmd = command(Point(2, 1), "", 1, "s-r1", ["--seed=3"], "logs/s.mllog", seed=4)
    assert cmd[-3:] == ["--seed=4", "--run_name=s-r1", "--mllog=logs/s.s-r1.mllog"]
    flagfile = tmp_path / "runs.flags"
    flagfile.write_text("--seed=41\n")
    assert base_seed([f"--flagfile={flagfile}"]) == 41
    assert base_seed([f"--flagfile={flagfile}", "--seed=5"]) == 5
    assert base_seed(["--steps=2"]) == 0  # the config's default


def sweep(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_every_repeat_with_its_seed(capsys):
    code, out, err = sweep(
        capsys,
        "--experiment=tradeoff",
        "--sys_scale=2",
        "--repeats=2",
        "--dry_run",
        "--",
        "--seed=10",
    )
    assert (code, err) == (0, "")
    commands = [line for line in out.splitlines() if line.startswith("+ ")]
    found = [re.findall(r"--(seed=\d+|run_name=\S+)", c)[-2:] for c in commands]
    assert found == [
        ["seed=10", "run_name=sweep-tradeoff-M2-P1-r0"],
        ["seed=10", "run_name=sweep-tradeoff-M1-P2-r0"],
        ["seed=11", "run_name=sweep-tradeoff-M2-P1-r1"],
        ["seed=11", "run_name=sweep-tradeoff-M1-P2-r1"],
    ]
    # Every run carries the sweep's fingerprint, last; the runs' flags and the sweep's own
    # result-deciding flags change it, the seed of a repeat (chosen by the plan) does not.
    # Each run's place in it (point label, repeat as seed index) follows the fingerprint.
    stamps = [c.rsplit(" ", 1)[1] for c in commands]
    assert len({s.rsplit(":", 2)[0] for s in stamps}) == 1
    assert stamps[0].startswith("--sweep_plan=tradeoff:full:")
    assert [s.split(":", 3)[3] for s in stamps] == ["M2-P1:0", "M1-P2:0", "M2-P1:1", "M1-P2:1"]
    assert fingerprint("tradeoff", False, ["--seed=10"], members_per_device=1) != fingerprint(
        "tradeoff", False, ["--seed=10"], members_per_device=0
    )


def test_ctrl_c_ends_the_sweep_in_one_line_and_exit_130(capsys, monkeypatch):
    """A KeyboardInterrupt out of a run (sweep_plan.run stops the run first) or between runs:
    one line naming what happened, no traceback, exit 130."""

    def interrupted(cmd):
        raise KeyboardInterrupt

    monkeypatch.setattr("hpcai_jax.sweep.sweep_plan.run", interrupted)
    code, out, err = sweep(capsys, "--experiment=tradeoff", "--sys_scale=2", "--results_dir=x")
    assert code == 130 and out.count("+ ") == 1
    assert err.count("\n") == 1 and err.startswith("hpcai_jax.sweep: interrupted (Ctrl-C)"), err

    def terminated(cmd):
        raise Stopped(15)

    monkeypatch.setattr("hpcai_jax.sweep.sweep_plan.run", terminated)
    code, out, err = sweep(capsys, "--experiment=tradeoff", "--sys_scale=2", "--results_dir=x")
    assert code == 143 and err.startswith("hpcai_jax.sweep: interrupted (SIGTERM)"), err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--repeats=0"], "argument --repeats: expected an integer >= 1, got '0'"),
        (["--repeats=x"], "argument --repeats: expected an integer >= 1, got 'x'"),
        (["--devices_per_node=0"], "argument --devices_per_node: expected an integer >= 1"),
        (["--repeats=2", "--", "--seed=-1"], "--seed=-1 (after --): expected an integer in"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--ensemble_sizes=2,3"], "--ensemble_sizes: M=3 does not divide --sys_scale=2"),
        (["--ensemble_sizes=0,2"], "--ensemble_sizes=0,2: expected every M >= 1"),
        (["--ensemble_sizes=2,1,2"], "--ensemble_sizes=2,1,2: expected each M once"),
        (["--experiment=fig9"], "argument --experiment: invalid choice: 'fig9'"),
        (["--smoke"], "--smoke: only for --experiment=paper, not tradeoff"),
        (["--only=fig5-M8"], "--only: only for --experiment=paper, not tradeoff"),
        (
            ["--launcher=srun -N {nodez}"],
            "--launcher=srun -N {nodez}: unknown placeholder {nodez}; expected the placeholders "
            "{devices}, {nodes}, {devices_per_node} only ({{ and }} for a literal brace)",
        ),
        (["--launcher=srun -N {nodes"], "--launcher=srun -N {nodes: expected '}' before end"),
        (["--launcher=srun -N {}"], "--launcher=srun -N {}: a placeholder without a name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = sweep(capsys, "--experiment=tradeoff", "--sys_scale=2", "--dry_run", *argv)
    assert (code, out) == (2, "")
    assert err.startswith("hpcai_jax.sweep: error: ") and err.count("\n") == 1, err
    assert fragment in err, err


@pytest.mark.multiprocess
def test_local_tradeoff_sweep(tmp_path):
    """Sys_scale = 2 CPU devices: (M, P) = (2, 1) and (1, 2), each a record, then a table."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcai_jax.sweep",
            "--experiment=tradeoff",
            "--sys_scale=2",
            "--devices_per_node=2",
            f"--results_dir={tmp_path}",
            f"--launcher={LOCAL_LAUNCHER}",
            "--",
            "--workload=regression",  # the smallest model: the sweep, not the training, is tested
            "--model=mlp",
            "--dataset=friedman1",
            "--batch_size=16",
            "--steps=2",
            "--train_examples=32",  # one epoch: Eq. 6's FLOPS is per epoch
            "--eval_examples=64",
            "--target_quality=0.9",
            f"--mllog={tmp_path}/logs/sweep.mllog",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert names == ["sweep-tradeoff-M1-P2.json", "sweep-tradeoff-M2-P1.json"]
    record = records.read(tmp_path / "sweep-tradeoff-M2-P1.json")
    assert record.mesh.ensemble_size == 2 and record.mesh.num_devices == 2
    # One MLLOG per run, each named in its record.
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["sweep.sweep-tradeoff-M1-P2.mllog", "sweep.sweep-tradeoff-M2-P1.mllog"]
    assert record.mllog == str(tmp_path / "logs" / "sweep.sweep-tradeoff-M2-P1.mllog")
    assert '"key": "run_stop"' in (tmp_path / "logs" / logs[1]).read_text()
    assert "Sys_scale" in proc.stdout and proc.stdout.count("complete") >= 2
    _check_report(tmp_path)


def _check_report(results_dir):
    """The sweep's report: the FLOPS table holds the records' own figures; the plots are PNGs."""
    report = results_dir / "report" / "report.md"
    md = report.read_text()
    flops = md[md.index("## FLOPS and VFLOPS against Sys_scale") :]
    lines = [line for line in flops[: flops.index("\n## ", 1)].splitlines() if line[:1] == "|"]
    header, *rows = ([c.strip() for c in line.strip("|").split(" | ")] for line in lines)
    rows = [dict(zip(header, row, strict=True)) for row in rows[1:]]
    column = next(h for h in header if h.startswith("FLOPS ["))
    prefix = column[len("FLOPS [") : column.index("FLOP/s")]
    scale = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}[prefix]
    assert {r["run"] for r in rows} == {"sweep-tradeoff-M1-P2", "sweep-tradeoff-M2-P1"}
    for row in rows:
        record = records.read(results_dir / f"{row['run']}.json")
        assert (row["M"], row["Sys_scale"]) == (
            str(record.mesh.ensemble_size),
            str(record.mesh.num_devices),
        )
        assert row[column] == f"{record.metrics.flops_per_s / scale:.4g}"
    pngs = [line[line.index("](") + 2 : -1] for line in md.splitlines() if line[:2] == "!["]
    assert {"scalability.png", "tradeoff_sys2.png", "mfu.png"} <= set(pngs)
    for name in pngs:
        data = (report.parent / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000, name


def test_a_failed_point_still_ends_in_the_summary_naming_it(capsys, monkeypatch, tmp_path):
    """A point whose run exits non-zero: the sweep goes on to the next, then prints its summary
    line naming the failed point, and exits 1."""
    codes = iter([2, 2])
    monkeypatch.setattr("hpcai_jax.sweep.sweep_plan.run", lambda cmd: next(codes))
    code, out, _ = sweep(
        capsys, "--experiment=tradeoff", "--sys_scale=2", f"--results_dir={tmp_path}"
    )
    assert code == 1
    assert out.count("+ ") == 2, out
    assert out.splitlines()[-1] == (
        "sweep: 0 of 2 run(s) completed; failed: sweep-tradeoff-M2-P1 (exit 2), "
        "sweep-tradeoff-M1-P2 (exit 2)"
    )


# A run as sweep_plan.run sees one: it holds a lock file (as a run holds its record's), and on
# SIGINT or SIGTERM releases it and exits 130 or 75 (main's), unless told to ignore SIGINT.
CHILD = """
import os, signal, sys, time
lock, ignore = sys.argv[1], sys.argv[2] == "ignore"
def stop(signum, _):
    os.unlink(lock)
    sys.exit(130 if signum == signal.SIGINT else 75)
signal.signal(signal.SIGINT, signal.SIG_IGN if ignore else stop)
signal.signal(signal.SIGTERM, stop)
open(lock, "w").close()
time.sleep(60)
"""


@pytest.mark.slow  # starts a (JAX-free) process
@pytest.mark.parametrize("how", ["ctrl-c", "ctrl-c ignored", "sigterm"])
def test_a_signal_stops_the_run_and_its_lock_goes_with_it(tmp_path, monkeypatch, how):
    """Ctrl-C reaches the sweep alone (the run has its own process group) and is passed on:
    the run stops as after its own Ctrl-C, its lock released, and only then the sweep raises
    KeyboardInterrupt. One that ignores it is killed STOP_NOW_S after a second Ctrl-C. SIGTERM
    is passed on too, then Stopped. Before, subprocess.run killed the run 0.25 s after the
    Ctrl-C: its lock stayed."""
    import os
    import signal
    import threading
    import time

    from hpcai_jax import sweep_plan

    monkeypatch.setattr(sweep_plan, "STOP_NOW_S", 0.5)
    lock = tmp_path / ".run.lock"
    ignore = how == "ctrl-c ignored"
    signum = signal.SIGTERM if how == "sigterm" else signal.SIGINT

    def press_ctrl_c():
        while not lock.exists():
            time.sleep(0.02)
        for _ in range(2 if ignore else 1):
            os.kill(os.getpid(), signum)  # the sweep's signal, as a terminal or SLURM sends it
            time.sleep(0.3)

    # A process started in the background by a non-interactive shell (nohup ... &) inherits
    # SIGINT ignored, and Python then keeps it ignored: the test gives itself Python's default,
    # as a terminal's foreground process has it.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=press_ctrl_c, daemon=True).start()
    start = time.monotonic()
    expected = sweep_plan.Stopped if how == "sigterm" else KeyboardInterrupt
    with pytest.raises(expected):
        sweep_plan.run([sys.executable, "-c", CHILD, str(lock), "ignore" if ignore else "stop"])
    assert time.monotonic() - start < 30
    assert lock.exists() == ignore  # released by the run itself; a killed run's stays
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the sweep's own handler back
    signal.signal(signal.SIGINT, before)


def test_the_summary_names_the_quality_metric_the_runs_report():
    """The trade-off example sweeps the regression workload: its column is R², not accuracy."""
    from hpcai_jax.sweep import table

    packages = ROOT / "docs" / "example_ranking" / "packages"
    regression = records.read(packages / "centre-b" / "cpu-b.json")
    classification = records.read(packages / "centre-c" / "cpu-c.json")
    assert "ensemble r2" in table([regression]).splitlines()[0]
    assert "ensemble top1_accuracy" in table([classification]).splitlines()[0]
    assert "ensemble quality" in table([regression, classification]).splitlines()[0]


def _fake_runs(monkeypatch) -> list[list[str]]:
    """Every run the sweep starts writes a complete record stamped with its command's plan (a
    record as records.read gives it back: status and fingerprint)."""
    import json
    from types import SimpleNamespace

    from hpcai_jax import sweep as sweep_module
    from hpcai_jax import sweep_plan

    started = []

    def fake_run(cmd):
        started.append(cmd)
        flags = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--") and "=" in a)
        plan = flags["sweep_plan"].rsplit(":", 2)[0]  # the fingerprint, as str(SweepPlan)
        out = {"status": "complete", "sweep_plan": plan}
        (Path(flags["results_dir"]) / f"{flags['run_name']}.json").write_text(json.dumps(out))
        return 0

    monkeypatch.setattr(sweep_plan, "run", fake_run)
    monkeypatch.setattr(records, "read", lambda p: SimpleNamespace(**json.loads(p.read_text())))
    monkeypatch.setattr(sweep_module, "table", lambda runs: "")
    monkeypatch.setattr(sweep_module, "_report", lambda paths, out: True)
    return started


@pytest.mark.parametrize(
    "experiment",
    [
        ["--experiment=tradeoff", "--sys_scale=2", "--repeats=2"],
        ["--experiment=scalability", "--parallel_degree=1", "--max_ensemble=2"],
    ],
)
def test_a_second_identical_sweep_skips_every_run(capsys, monkeypatch, tmp_path, experiment):
    """Scalability and the trade-off resume as the paper plan does (one engine,
    sweep_plan.run_all): the same command again finds every record complete and of its plan,
    and runs nothing."""
    started = _fake_runs(monkeypatch)
    argv = [*experiment, f"--results_dir={tmp_path}", "--", "--steps=2"]
    code, out, err = sweep(capsys, *argv)
    assert (code, err) == (0, "") and len(started) == out.count("+ ") >= 2
    total = len(started)
    started.clear()
    code, out, err = sweep(capsys, *argv)
    assert (code, err, started) == (0, "", [])
    assert out.count("done before, skipped") == total and "+ " not in out
    assert out.splitlines()[-1] == f"sweep: {total} of {total} run(s) completed"


def test_a_record_of_another_plan_refuses_the_sweep(capsys, monkeypatch, tmp_path):
    """A record under a name this sweep would write, from other runs' flags: one line, exit 2,
    before any run (never overwritten, never taken as this sweep's)."""
    started = _fake_runs(monkeypatch)
    base = ["--experiment=tradeoff", "--sys_scale=2", f"--results_dir={tmp_path}", "--"]
    assert sweep(capsys, *base, "--steps=2")[0] == 0
    started.clear()
    code, out, err = sweep(capsys, *base, "--steps=3")
    assert (code, out, started) == (2, "", [])
    assert err.startswith("hpcai_jax.sweep: error: ") and err.count("\n") == 1, err
    assert "sweep-tradeoff-M2-P1.json and 1 more written by another plan (plan tradeoff:" in err


def test_the_runs_flags_are_read_by_absl_as_main_reads_them(tmp_path):
    """--seed and --mllog, in any spelling absl takes (a separate value, a flagfile, the last
    one winning), from main's own flag definitions; a bad value is one line."""
    from hpcai_jax import flags, sweep_plan

    flagfile = tmp_path / "runs.flags"
    flagfile.write_text("# a comment\n--seed=41\n--mllog=a.log\n")
    assert base_seed(["--seed", "9"]) == 9
    assert base_seed([f"--flagfile={flagfile}", "--steps=2"]) == 41
    assert mllog_path(["--mllog=x.log", f"--flagfile={flagfile}"]) == "a.log"
    assert sweep_plan.given(["--verbosity=1", "--nooverwrite"], "overwrite", None) is False
    with pytest.raises(UsageError, match="seed"):
        base_seed(["--seed=x"])
    with pytest.raises(UsageError, match="model"):
        sweep_plan.given(["--model=none_such"], "model")
    # main's flags on a FlagValues of their own, the global FLAGS untouched
    assert set(flags.main_flags()) >= set(flags.FLAG_FIELDS)
    assert flags.main_flags() is not flags.FLAGS


def test_a_failed_runs_own_record_is_reported_and_its_rerun_replaces_it(
    capsys, monkeypatch, tmp_path
):
    """A run that fails after writing its record (partial, invalid): the sweep's report shows
    it, as before the one engine; the same sweep again runs it over that record (--overwrite)
    and skips the complete one."""
    from hpcai_jax import sweep as sweep_module
    from hpcai_jax import sweep_plan

    started = _fake_runs(monkeypatch)
    complete = sweep_plan.run

    def partial_first(cmd):
        code = complete(cmd)
        if "--run_name=sweep-tradeoff-M2-P1" in cmd and "--overwrite" not in cmd:
            path = tmp_path / "sweep-tradeoff-M2-P1.json"
            path.write_text(path.read_text().replace('"complete"', '"partial"'))
            return 1
        return code

    reported = []
    monkeypatch.setattr(sweep_plan, "run", partial_first)
    monkeypatch.setattr(sweep_module, "_report", lambda paths, out: reported.append(paths) or True)
    argv = ["--experiment=tradeoff", "--sys_scale=2", f"--results_dir={tmp_path}"]
    assert sweep(capsys, *argv)[0] == 1
    assert [Path(p).name for p in reported[0]] == [
        "sweep-tradeoff-M2-P1.json",
        "sweep-tradeoff-M1-P2.json",
    ]
    started.clear()
    code, out, _ = sweep(capsys, *argv)
    assert code == 0 and len(started) == 1 and started[0][-1] == "--overwrite"
    assert "[2/2] M1-P2: done before, skipped" in out
