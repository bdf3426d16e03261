"""--experiment=paper (hpcai_jax/sweep_paper.py): its plan, resuming it, a failed run, and one
tiny real point."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import ROOT, FakeClock

from hpcai_jax import records
from hpcai_jax import sweep_paper as sp


def _members(run: sp.PaperRun) -> set[tuple[int, int]]:
    """A run's members as the engine and the sampler identify them: (seed, m)."""
    return {(run.seed, m) for m in range(run.point.ensemble_size)}


def test_the_plan_is_every_point_with_no_member_shared_outside_the_bagging_pairs():
    runs = sp.paper_runs()
    labels = [r.point.label for r in runs[: len(sp.POINTS)]]
    assert labels == [
        "fig5-M1-flops",
        "fig5-M2-flops",
        "fig5-M4-flops",
        "fig5-M8",
        "fig7-M8-P1",
        "fig7-M4-P2",
        "fig7-M2-P4",
        "fig7-M1-P8",
        "control-M8-nobag",
        "control-M1-matched",
    ]
    flops_only = [x for x in labels if x.endswith("-flops")]
    seeds = {x: sum(r.point.label == x for r in runs) for x in labels}
    assert seeds == {x: sp.PAIRS if x.endswith("M8") or "nobag" in x else 3 for x in labels}
    # The bagging pairs: the unbagged M = 8 run of seed index k has the bagged one's seed, so
    # the same members' initialisations and data-order streams; every other member is unique.
    bagged = [r for r in runs if r.point.label == "fig5-M8"]
    nobag = [r for r in runs if r.point.label == "control-M8-nobag"]
    assert [r.seed for r in nobag] == [r.seed for r in bagged] and len(bagged) >= 5
    seen: set = set()
    for run in runs:
        if run.point.seeds_of:
            continue
        assert not seen & _members(run), run.name  # no nested seeds between runs
        seen |= _members(run)
    assert len({r.name for r in runs}) == len(runs)
    assert runs[0].name == "paper-fig5-M1-flops-s1000"
    # the seeds do not move with --only: a rerun of some points finds its records
    for only in ("fig5-M8", "control-M8-nobag"):
        assert [r.name for r in sp.paper_runs(only=(only,))] == [
            r.name for r in runs if r.point.label == only
        ]
    # Fig. 7: Sys_scale 8 under the fixed batch per device, at least 200 steps a member;
    # Fig. 5: P_degree 1; the compute-matched model: 8 × the M = 8 members' epochs.
    n, epochs = (sp._flag(list(sp.FLAGS), k, 0) for k in ("train_examples", "epochs"))
    for run in runs:
        p = run.point
        devices = p.ensemble_size * p.parallel_degree
        if p.label.startswith("fig7"):
            assert devices == 8 and "--batch_policy=per_device" in p.flags
            cmd = sp.paper_command(run, "out", [])
            member_batch = sp._flag(cmd, "batch_size", 0) * p.parallel_degree
            assert n // member_batch * epochs >= 200, run.name
        if p.label.startswith("fig5"):
            assert p.parallel_degree == 1
            assert p.flags == (sp.FLOPS_ONLY if p.label in flops_only else ())
        if p.label.startswith("control"):
            assert p.flags[0] == "--bootstrap=none"
    matched = sp.paper_command(next(r for r in runs if "matched" in r.name), "out", [])
    assert sp._flag(matched, "epochs", 0) == 8 * epochs
    assert "--epochs=1" in sp.FLOPS_ONLY  # one whole epoch: Eq. 6's figure exists


def test_a_runs_command_and_devices():
    run = next(r for r in sp.paper_runs() if r.point.label == "fig7-M2-P4")
    cmd = sp.paper_command(run, "out", ["--epochs=1"], "paper:full:0123456789abcdef")
    assert cmd[1:3] == ["-m", "hpcai_jax.main"]
    assert "--dataset=fashion_mnist" in cmd and "--batch_policy=per_device" in cmd
    assert cmd[-10:] == [
        "--batch_policy=per_device",
        "--batch_size=16",
        "--ensemble_size=2",
        "--parallel_degree=4",
        "--members_per_device=1",
        f"--seed={run.seed}",
        f"--run_name={run.name}",
        "--results_dir=out",
        "--epochs=1",  # the caller's flags after the plan's: they win
        # ... except the plan's fingerprint, with the run's point and seed index
        f"--sweep_plan=paper:full:0123456789abcdef:fig7-M2-P4:{run.index}",
    ]
    assert [r.index for r in sp.paper_runs() if r.point.label == "fig7-M2-P4"] == [0, 1, 2]
    smoke_run = next(r for r in sp.paper_runs(smoke=True) if r.point.label == "fig7-M2-P4")
    smoke = sp.paper_command(smoke_run, "out", [])
    assert "--steps=2" in smoke and len(sp.paper_runs(smoke=True)) == len(sp.POINTS)
    flops = sp.paper_command(sp.paper_runs(smoke=True)[0], "out", [])
    assert flops.index("--train_examples=128") > flops.index("--train_examples=4096")
    env = sp.child_env(8, {"XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=2"})
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=8"
    assert sp.child_env(1, {})["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1"


FULL = sp.plan_of(False, [])  # the full plan's fingerprint, no flags of the caller's


def _record(path, status: str, plan: str = FULL) -> None:
    path.write_text(json.dumps({"status": status, "sweep_plan": plan}))


def _flag(cmd: list[str], name: str) -> str:
    return next(a for a in cmd if a.startswith(f"--{name}=")).split("=", 1)[1]


def test_a_rerun_skips_finished_runs_and_a_failure_stops_nothing(tmp_path, monkeypatch, capsys):
    """Three runs: the first has a complete record (skipped), the second fails, the third
    writes its record; every one gets its progress line, the failure is named."""
    runs = sp.paper_runs(only=("control-M1-matched",))
    _record(tmp_path / f"{runs[0].name}.json", "complete")
    _record(tmp_path / f"{runs[1].name}.json", "partial")  # an interrupted run: run again
    clock, started = FakeClock(), []

    def fake_run(cmd, env):
        started.append(cmd)
        clock.advance(12)
        name = _flag(cmd, "run_name")
        if name == runs[1].name:
            return 1
        _record(tmp_path / f"{name}.json", "complete", _flag(cmd, "sweep_plan"))
        return 0

    monkeypatch.setattr(sp.sweep_plan, "run", fake_run)
    monkeypatch.setattr(sp.records, "read", lambda p: SimpleNamespace(**json.loads(p.read_text())))
    written, failed = sp.run_plan(runs, str(tmp_path), [], clock=clock)
    out = capsys.readouterr().out.splitlines()
    assert len(started) == 2
    # the interrupted run's partial record is this plan's: replaced (else the run refuses to
    # start over a record); the third had none
    assert [c[-1] == "--overwrite" for c in started] == [True, False]
    assert out == [
        f"[1/3] control-M1-matched seed {runs[0].seed}: done before, skipped",
        f"[2/3] control-M1-matched seed {runs[1].seed} FAILED (exit 1) after 12s",
        f"[3/3] control-M1-matched seed {runs[2].seed} done in 12s",
    ]
    assert failed == [f"{runs[1].name} (exit 1)"]
    assert written == [str(tmp_path / f"{r.name}.json") for r in (runs[0], runs[2])]


def test_the_estimate_counts_member_images_evaluations_steps_and_start_ups():
    """One run of each kind by hand: members × (trained images + evaluated images, each at its
    rate), the steps at theirs, plus the start-up."""
    runs = {r.point.label: r for r in sp.paper_runs()}
    train, test, step = sp.TRAIN_S_PER_MEMBER_IMAGE, sp.EVAL_S_PER_MEMBER_IMAGE, sp.STEP_S
    flops = 1 * (4096 * train + 1000 * test) + 4096 / 128 * step  # a small subset, 1,000 tested
    assert sp.estimate_s([runs["fig5-M1-flops"]]) == pytest.approx(sp.START_S + flops)
    n, epochs = (float(sp._flag(list(sp.FLAGS), k, 0)) for k in ("train_examples", "epochs"))
    once = 8 * (n * epochs * train + 10_000 * test) + n * epochs / 128 * step
    assert sp.estimate_s([runs["fig5-M8"]]) == pytest.approx(sp.START_S + once)
    # Fig. 7 at 16 per device: a member of (2, 4) takes batches of 64
    split = 2 * (n * epochs * train + 10_000 * test) + n * epochs / 64 * step
    assert sp.estimate_s([runs["fig7-M2-P4"]]) == pytest.approx(sp.START_S + split)


def test_the_runs_share_caches_the_caller_did_not_name(tmp_path):
    env = sp.shared_caches(str(tmp_path), {"HPCAI_JAX_STARTUP_CACHE": "/mine"})
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "xla")
    assert env["HPCAI_JAX_STARTUP_CACHE"] == "/mine"  # the caller's own kept


def test_the_dry_run_prints_the_plan_and_its_estimate(capsys):
    from hpcai_jax.sweep import main

    assert main(["--experiment=paper", "--dry_run", "--results_dir=out"]) == 0
    out = capsys.readouterr().out.splitlines()
    minutes = sp.estimate_s(sp.paper_runs()) / 60
    assert (
        len(out) == 35
        and out[-1] == f"34 run(s), about {minutes:.0f} min on 2 quiet cores (estimated)"
    )
    assert main(["--experiment=paper", "--dry_run", "--results_dir=out", "--", "--epochs=1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] != out[-1]  # the caller's flags counted
    # --smoke: its own estimate, its 10 runs' start-ups and toy work (before: none printed)
    assert main(["--experiment=paper", "--smoke", "--dry_run", "--results_dir=out"]) == 0
    smoke = capsys.readouterr().out.splitlines()
    minutes = sp.estimate_s(sp.paper_runs(smoke=True)) / 60
    assert smoke[-1] == f"10 run(s), about {minutes:.0f} min on 2 quiet cores (estimated)"
    assert smoke[-1] != out[-1] and all(" --steps=2 " in line for line in smoke[:-1])


def test_the_dry_run_prints_commands_that_run_as_printed(capsys, monkeypatch):
    """Each line is a shell command: the run's XLA_FLAGS (its device count, the caller's other
    XLA flags kept) assigned in front of it, as the real run's environment has them."""
    from hpcai_jax.sweep import main

    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    assert main(["--experiment=paper", "--only=fig7-M2-P4", "--dry_run"]) == 0
    lines = capsys.readouterr().out.splitlines()[:-1]
    assert len(lines) == 3
    words = shlex.split(lines[0].removeprefix("+ "))
    run = sp.paper_runs(only=("fig7-M2-P4",))[0]
    assert words[0] == (
        "XLA_FLAGS=--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=8"
    )
    assert words[1:] == sp.paper_command(run, "results", [], FULL)


def test_the_plans_fingerprint_is_its_size_and_its_result_flags():
    """Smoke and full differ, the caller's flags and a flagfile's content count; the flags that
    only place outputs, --only and --results_dir do not."""
    smoke = sp.plan_of(True, [])
    assert smoke.startswith("paper:smoke:") and FULL.startswith("paper:full:")
    assert smoke.split(":")[2] != FULL.split(":")[2]
    assert sp.plan_of(False, ["--epochs=1"]) != FULL
    assert sp.plan_of(False, ["--mllog=a.log", "--run_name=x", "--nooverwrite"]) == FULL
    assert records.train.SweepPlan.parse(FULL) is not None  # the flag's form, as main checks it


def _sweep_to_fake_runs(monkeypatch, tmp_path, record: dict) -> list[list[str]]:
    """Every run the sweep starts writes a copy of `record`, its run id and plan the command's."""
    from hpcai_jax import sweep

    started = []

    def fake_run(cmd, env):
        started.append(cmd)
        out = {**record, "run_id": _flag(cmd, "run_name"), "sweep_plan": None}
        plan = sp.records.train.SweepPlan.parse(_flag(cmd, "sweep_plan"))
        out["sweep_plan"] = records.to_dict(plan)
        (tmp_path / f"{out['run_id']}.json").write_text(json.dumps(out))
        return 0

    monkeypatch.setattr(sp.sweep_plan, "run", fake_run)
    monkeypatch.setattr(sweep, "_report", lambda paths, out: True)
    return started


@pytest.mark.slow  # reads the shared CLI run's record
def test_a_smoke_plans_records_are_never_taken_by_the_full_plan(
    tmp_path, monkeypatch, capsys, tiny_run
):
    """The issue's sequence, each run a copy of a real record: `--smoke`, then the full plan's
    fig5-M8 runs all five (before: `done before, skipped`, a 2-step toy taken as the paper's
    run); a record of another plan under a full run's name (an older results folder) refuses
    the plan in one line, exit 2, nothing run; the full plan's own record is skipped."""
    from hpcai_jax.sweep import main

    started = _sweep_to_fake_runs(monkeypatch, tmp_path, tiny_run.record)
    assert main(["--experiment=paper", "--smoke", f"--results_dir={tmp_path}"]) == 0
    assert len(started) == len(sp.POINTS)
    assert all(_flag(c, "run_name").startswith("smoke-") for c in started)
    smoke = records.read(tmp_path / "smoke-paper-fig5-M8-s4000.json")
    assert str(smoke.sweep_plan) == sp.plan_of(True, [])
    started.clear()
    capsys.readouterr()
    assert main(["--experiment=paper", "--only=fig5-M8", f"--results_dir={tmp_path}"]) == 0
    assert [_flag(c, "run_name") for c in started] == [
        f"paper-fig5-M8-s{s}" for s in (4000, 14000, 24000, 34000, 44000)
    ]
    assert "done before" not in capsys.readouterr().out
    # again: the full plan's records are its own, skipped
    started.clear()
    assert main(["--experiment=paper", "--only=fig5-M8", f"--results_dir={tmp_path}"]) == 0
    assert not started and capsys.readouterr().out.count("done before, skipped") == sp.PAIRS
    # a smoke record (and an unstamped one) under the full plan's names: refused
    (tmp_path / "smoke-paper-fig5-M8-s4000.json").replace(tmp_path / "paper-fig5-M8-s4000.json")
    unstamped = {**tiny_run.record, "run_id": "paper-fig5-M8-s14000"}
    (tmp_path / "paper-fig5-M8-s14000.json").write_text(json.dumps(unstamped))
    assert main(["--experiment=paper", "--only=fig5-M8", f"--results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert not started and err.count("\n") == 1, err
    assert (
        f"paper-fig5-M8-s4000.json and 1 more written by another plan "
        f"(plan {sp.plan_of(True, [])}; this one is {FULL})" in err
    )


def test_an_unknown_point_is_one_line_and_exit_2(capsys):
    from hpcai_jax.sweep import main

    assert main(["--experiment=paper", "--only=fig9", "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--only=fig9: expected one of control-M1-matched" in err
    assert main(["--experiment=paper", "--only=fig5-M8,fig7-M1-P8,fig5-M8", "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--only=fig5-M8,fig7-M1-P8,fig5-M8: expected each label once (fig5-M8)" in err
    assert len({p.label for p in sp.POINTS}) == len(sp.POINTS)  # the plan names each point once


@pytest.mark.slow
def test_one_tiny_real_point(tmp_path, monkeypatch, capsys):
    """The smoke plan's one-member point, end to end: its record (named smoke-…, stamped with
    the smoke plan), the progress line, the summary; then a rerun skips it, and the full plan
    neither skips its own run for it nor takes it under a full run's name."""
    argv = [sys.executable, "-m", "hpcai_jax.sweep", "--experiment=paper", "--smoke"]
    argv += ["--only=fig5-M1-flops", f"--results_dir={tmp_path}"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[1/1] fig5-M1-flops seed 1000 done in " in proc.stdout
    path = tmp_path / "smoke-paper-fig5-M1-flops-s1000.json"
    record = records.read(path)
    assert record.status == "complete" and record.config["train"]["seed"] == 1000
    assert str(record.sweep_plan) == sp.plan_of(True, [])
    assert (record.sweep_plan.point, record.sweep_plan.seed_index) == ("fig5-M1-flops", 0)
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "[1/1] fig5-M1-flops seed 1000: done before, skipped" in again.stdout
    assert again.stdout.rstrip().endswith("sweep: 1 of 1 run(s) completed")
    full = ["--experiment=paper", "--only=fig5-M1-flops", f"--results_dir={tmp_path}"]
    from hpcai_jax.sweep import main

    started = _sweep_to_fake_runs(monkeypatch, tmp_path, json.loads(path.read_text()))
    assert main(full) == 0 and len(started) == 3  # the smoke run's record taken for none
    path.replace(tmp_path / "paper-fig5-M1-flops-s1000.json")  # as before smoke- names
    capsys.readouterr()
    assert main(full) == 2
    assert "paper-fig5-M1-flops-s1000.json written by another plan" in capsys.readouterr().err


def _old_runs(smoke: bool, only: tuple[str, ...] = ()) -> list[tuple]:
    """The paper plan's runs as sweep_paper.py built them before the one engine (its own
    PaperRun): (row, seed, seed index, name), from the table as it stands."""
    runs, seeds, k = [], {}, 0
    for s in range(1 if smoke else max(p.seeds for p in sp.POINTS)):
        for point in sp.POINTS:
            k += 1
            seeds[point.label, s] = seeds.get((point.seeds_of, s), sp.SEED_SPACING * k)
            if s < point.seeds and (not only or point.label in only):
                seed = seeds[point.label, s]
                name = f"{'smoke-' if smoke else ''}paper-{point.label}-s{seed}"
                runs.append((point, seed, s, name))
    return runs


def _old_command(run: tuple, smoke: bool, results_dir: str, main_args: list, plan: str) -> list:
    """paper_command before the one engine, verbatim but for the run's form."""
    p, seed, index, name = run
    return [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *sp.FLAGS,
        *p.flags,
        *(sp.SMOKE if smoke else ()),
        f"--ensemble_size={p.ensemble_size}",
        f"--parallel_degree={p.parallel_degree}",
        "--members_per_device=1",
        f"--seed={seed}",
        f"--run_name={name}",
        f"--results_dir={results_dir}",
        *main_args,
        *([f"--sweep_plan={plan}:{p.label}:{index}"] if plan else []),
    ]


@pytest.mark.slow  # the tier check reads the frozen builder's sys.executable as a process start
@pytest.mark.parametrize(
    "argv, main_args",
    [
        (["--results_dir=out"], []),
        (["--smoke"], []),
        (["--only=fig7-M2-P4,control-M8-nobag"], ["--epochs=1", "--mllog=logs/x.mllog"]),
        (["--smoke", "--results_dir=r"], ["--steps=5", "--batch_policy=per_device"]),
    ],
)
def test_the_engine_keeps_the_paper_plans_commands_and_fingerprint(capsys, argv, main_args):
    """Under the one engine (sweep_plan.py) the paper plan's dry run prints, byte for byte, the
    commands the plan printed before it, and its fingerprint is the same: the records of a plan
    begun before resume under it. The fingerprint's digest itself is pinned too, on flags that
    do not depend on the table."""
    from hpcai_jax.sweep import main
    from hpcai_jax.sweep_plan import fingerprint

    assert main(["--experiment=paper", "--dry_run", *argv, "--", *main_args]) == 0
    printed = [x.removeprefix("+ ") for x in capsys.readouterr().out.splitlines()[:-1]]
    smoke = "--smoke" in argv
    only = next((tuple(a[7:].split(",")) for a in argv if a.startswith("--only=")), ())
    results = next((a.split("=", 1)[1] for a in argv if a.startswith("--results_dir=")), "results")
    plan = sp.plan_of(smoke, main_args)
    expected = []
    for run in _old_runs(smoke, only):
        cmd = _old_command(run, smoke, results, main_args, plan)
        forced = sp.child_env(run[0].ensemble_size * run[0].parallel_degree)["XLA_FLAGS"]
        expected.append(f"XLA_FLAGS={shlex.quote(forced)} {shlex.join(cmd)}")
    assert printed == expected
    assert plan == fingerprint(
        "paper", smoke, [*sp.FLAGS, *(sp.SMOKE if smoke else ()), *main_args]
    )
    assert fingerprint("paper", False, ["--epochs=1"]) == "paper:full:6834e25ba1786c72"


def test_a_label_twice_in_the_table_is_one_line_and_exit_2(capsys, monkeypatch):
    """Two points of one label would write one record name twice: the plan is refused before
    anything is printed or run."""
    from hpcai_jax.sweep import main

    monkeypatch.setattr(sp, "POINTS", (*sp.POINTS, sp.POINTS[0]))
    assert main(["--experiment=paper", "--dry_run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert "sweep_paper.POINTS: expected each label once (fig5-M1-flops)" in err
