"""The paper's experiments as sweeps of runs inside one allocation (HPC AI500 V3.0 §4.3, Figs.
5-6: scalability; §4.4.1, Fig. 7: the trade-off).

Each point is one run of `python -m hpcai_jax.main` with a record of its own, so the sweep only
plans the points, launches them and reports on their records. This module plans scalability's
and the trade-off's points and holds the CLI; the runs of every experiment, the paper's too
(sweep_paper.py), go through the one engine of sweep_plan.py, so all of them resume alike. The experiments, the --launcher
template and the runs' MLLOG files: `launch/README.md`, Sweeps; --repeats and what the report
makes of them: `docs/score.md`, section 9.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from hpcai_jax import records, sweep_paper, sweep_plan, units
from hpcai_jax.errors import UsageError, tool_main
from hpcai_jax.report import write_report
from hpcai_jax.report.cli import Parser, positive_int
from hpcai_jax.sweep_plan import Point, Run

PROG = "hpcai_jax.sweep"
SEEDS = 2**32  # --seed's range (config.TrainConfig.seed): a derived seed wraps around it
PLACEHOLDERS = ("devices", "nodes", "devices_per_node")  # --launcher's
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


def plan(
    experiment: str,
    parallel_degree: int = 0,
    max_ensemble: int = 0,
    sys_scale: int = 0,
    members_per_device: int = 1,
    ensemble_sizes: tuple[int, ...] = (),
) -> list[Point]:
    """The sweep's points. `members_per_device` K > 1 puts gcd(M, K) members on each device
    (0: all M of a point's members, so the scalability experiment runs on P_degree devices):
    the vmapped-ensemble ablations of docs/members.md."""
    if members_per_device < 0:
        raise ValueError("--members_per_device must be >= 0 (0: all of a point's members)")

    def point(m: int, p: int) -> Point:
        k = m if members_per_device == 0 else math.gcd(m, members_per_device)
        return Point(m, p, k)

    text = ",".join(map(str, ensemble_sizes))
    if any(m < 1 for m in ensemble_sizes):
        raise ValueError(f"--ensemble_sizes={text}: expected every M >= 1")
    if len(set(ensemble_sizes)) < len(ensemble_sizes):  # one point twice: two runs, one record
        raise ValueError(f"--ensemble_sizes={text}: expected each M once")
    if experiment == "scalability":
        if parallel_degree < 1 or (max_ensemble < 1 and not ensemble_sizes):
            raise ValueError(
                "scalability needs --parallel_degree >= 1 and --max_ensemble >= 1 "
                "(or --ensemble_sizes)"
            )
        sizes = ensemble_sizes or tuple(range(1, max_ensemble + 1))
        return [point(m, parallel_degree) for m in sizes]
    if experiment == "tradeoff":
        return [point(m, sys_scale // m) for m in tradeoff_sizes(sys_scale, ensemble_sizes)]
    raise ValueError(f"--experiment={experiment!r}: expected scalability or tradeoff")


def tradeoff_sizes(sys_scale: int, ensemble_sizes: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The trade-off's M: --ensemble_sizes, each a divisor of Sys_scale, or every divisor,
    largest first (P_degree = Sys_scale / M)."""
    if sys_scale < 1:
        raise ValueError("tradeoff needs --sys_scale >= 1")
    wrong = [m for m in ensemble_sizes if sys_scale % m]
    if wrong:
        raise ValueError(
            f"--ensemble_sizes: M={wrong[0]} does not divide --sys_scale={sys_scale} "
            "(M × P_degree = Sys_scale)"
        )
    return ensemble_sizes or tuple(m for m in range(sys_scale, 0, -1) if sys_scale % m == 0)


def mllog_path(main_args: list[str]) -> str:
    """The --mllog the runs' flags give (absl's reading, flagfiles read), or ''."""
    return sweep_plan.given(main_args, "mllog", "")


def base_seed(main_args: list[str]) -> int:
    """The --seed the runs' flags give (the config's default, 0, if none): repeat 0's seed."""
    seed = sweep_plan.given(main_args, "seed", 0)
    if not 0 <= seed < SEEDS:
        raise UsageError(f"--seed={seed} (after --): expected an integer in [0, 2^32)")
    return seed


def jobs(points: list[Point], repeats: int, name: str, experiment: str, seed: int = 0) -> list[Run]:
    """Every run: the whole sweep once per repeat (a machine that drifts during the sweep then
    touches every point alike), repeat k with seed (seed + k) mod 2^32, `-r<k>` in its run
    name and k its seed index; one repeat is the plain sweep, its names and the runs' own
    --seed unchanged."""
    out = []
    for k in range(repeats):
        for point in points:
            run_name = f"{name}-{experiment}-M{point.ensemble_size}-P{point.parallel_degree}"
            if repeats == 1:
                out.append(Run(point, run_name))
            else:
                out.append(Run(point, f"{run_name}-r{k}", (seed + k) % SEEDS, k))
    return out


def run_mllog(path: str, run_name: str) -> str:
    """One run's MLLOG file: <stem>.<run_name><suffix> beside `path`."""
    base = Path(path)
    return str(base.with_name(f"{base.stem}.{run_name}{base.suffix}"))


def check_launcher(template: str) -> None:
    """One line, exit 2, for a --launcher template `command` could not fill."""
    try:
        template.format(**dict.fromkeys(PLACEHOLDERS, 1))
    except KeyError as e:
        why = f"unknown placeholder {{{e.args[0]}}}"
    except (IndexError, ValueError) as e:
        why = str(e) if isinstance(e, ValueError) else "a placeholder without a name"
    else:
        return
    accepted = ", ".join(f"{{{x}}}" for x in PLACEHOLDERS)
    raise UsageError(
        f"--launcher={template}: {why}; expected the placeholders {accepted} only "
        "({{ and }} for a literal brace)"
    )


def command(
    point: Point,
    launcher: str,
    devices_per_node: int,
    run_name: str,
    main_args: list[str],
    mllog: str = "",
    seed: int | None = None,
    plan: str = "",
    index: int = 0,
) -> list[str]:
    """The run's command line (the engine's builder, sweep_plan.command) behind the filled
    launcher template: the runs' flags before the point's; `mllog`, the --mllog of the runs'
    flags, becomes the run's own file (`run_mllog`); a repeat's `seed` overrides the runs'
    --seed (absl: the last one wins); `plan`, the sweep's fingerprint, comes last with the
    run's point and seed index `index`."""
    nodes = -(-point.devices // devices_per_node)
    prefix = launcher.format(
        devices=point.devices, nodes=nodes, devices_per_node=min(devices_per_node, point.devices)
    )
    return sweep_plan.command(
        Run(point, run_name, seed, index),
        before=main_args,
        after=[f"--mllog={run_mllog(mllog, run_name)}"] if mllog else [],
        prefix=shlex.split(prefix),
        plan=plan,
    )


def table(runs: list[records.TrainRecord]) -> str:
    """The sweep's summary, one row per run; the quality columns name the workload's metric
    (top-1 accuracy, R², mAP), as the records do."""
    metrics = sorted({r.quality.metric for r in runs if r.quality.metric}) or ["quality"]
    what = metrics[0] if len(metrics) == 1 else "quality"
    lines = [
        f"{'M':>4} {'P_degree':>8} {'Sys_scale':>9} {'FLOPS':>11} {'VFLOPS':>11} "
        f"{'ensemble ' + what:>20} {'member mean':>11} {'status':>9}  run"
    ]
    for r in runs:
        mesh, m, q = r.mesh, r.metrics, r.quality
        lines.append(
            f"{mesh.ensemble_size:>4} {mesh.parallel_degree:>8} {mesh.num_devices:>9} "
            f"{units.formatted(m.flops_per_s):>11} {units.formatted(m.vflops_per_s):>11} "
            f"{units.formatted(q.ensemble, '{:.4f}'):>20} "
            f"{units.formatted(q.member_mean, '{:.4f}'):>11} {r.status:>9}  {r.run_id}"
        )
    return "\n".join(lines)


EPILOG = """\
Flags after -- are the runs' (python -m hpcai_jax.main). A --mllog=PATH among them, or in their
flagfile, gives each run its own MLLOG file: <stem>.<run id><suffix> beside PATH.

--launcher is a template whose placeholders are {devices} (= Sys_scale = M × P_degree),
{nodes} (= {devices} / --devices_per_node, rounded up) and {devices_per_node}.

Every run gets --sweep_plan=<experiment>:<smoke|full>:<digest>:<point>:<seed index>, the plan's
fingerprint (the digest: of the flags that decide its results, hpcai_jax/sweep_plan.py) and the
run's place in it (its point's label, M<M>-P<P_degree> or the paper's, and its repeat or seed
index), kept in its record: the report reads a run's point from there, never from its name.
Every experiment resumes: a rerun skips each run whose record is complete and of the same
plan ("done before, skipped"), runs again over its own partial one, and refuses, in one line
before any run, a folder holding another plan's record under one of its runs' names.
Ctrl-C stops the run in progress as its own Ctrl-C would (its record written, its lock
released), then the sweep, in one line, exit 130; a second Ctrl-C stops the run now. SIGTERM
and SIGHUP are passed on to the run the same way (exit 128 + the signal).

--repeats=K runs the whole sweep K times; repeat k runs with --seed = (the runs' --seed, 0 if
none, + k) mod 2^32 and is named <name>-<experiment>-M<M>-P<P_degree>-r<k>. The report sums up
each configuration's repeats (its Repeats section: N, mean, spread, 95 % Student-t interval).

--experiment=paper runs HPC AI500 V3.0's experiments at one-machine scale, offline, on
Fashion-MNIST (resnet_mini, 15,000 training images, 2 epochs, batch 128: members reach 0.80 on
the whole 10,000-image test set, evaluated at the end, Fig. 7's points each epoch too;
hpcai_jax/sweep_paper.py), each run on exactly its Sys_scale of host CPU devices (XLA_FLAGS'
forced count set per run: devices simulated on shared cores, so FLOPS cannot grow with them).
10 points, 34 runs, seed 1000·k for the plan's k-th (point, seed) (no member shared between
runs but the bagging pairs'), each record named paper-<point>-s<seed>.json:
  fig5-M8                     §4.3 Fig. 5's shape: P_degree 1, one member per device; its
                              quality.sub_ensembles give the quality of M = 1..8 (5 seeds)
  fig5-M1-flops, -M2-, -M4-   Fig. 5's FLOPS only: one epoch of 4,096 images
  fig7-M8-P1, -M4-P2, -M2-P4, -M1-P8
                              §4.4.1 Fig. 7's shape: Sys_scale 8, --batch_policy=per_device at
                              16 images per device: at least 200 steps a member
  control-M8-nobag            M = 8, --bootstrap=none on fig5-M8's seeds: each pair differs
                              only by the bootstrap (5 pairs)
  control-M1-matched          one member on all the data for 16 epochs: the M = 8 ensemble's
                              training compute
A progress line per run; a rerun skips every run whose record is complete and of the same plan
(fingerprint above), and refuses, in one line, a folder holding another plan's record under one
of its runs' names; a failed run stops none of the others and the summary names it. --smoke:
the same plan at toy size, one seed, its runs named smoke-paper-<point>-s<seed>; --only=LABEL,...:
those points (the same plan: a rerun of some points finds their records). Flags after -- are
added to every run's (the last one wins). --dry_run prints the commands, each as a shell runs
it (its XLA_FLAGS in front), and the plan's estimated time.

examples:
  # the paper's experiments on this machine (estimated 33 min on 2 quiet cores: docs/paper.md):
  python -m hpcai_jax.sweep --experiment=paper --results_dir=results/paper
  # the same plan at toy size first (a few minutes), its commands and estimate only:
  python -m hpcai_jax.sweep --experiment=paper --smoke --results_dir=results/paper
  python -m hpcai_jax.sweep --experiment=paper --only=fig5-M8 --dry_run
  # on this machine's CPU (launch/local.py: {nodes} processes of {devices_per_node} devices):
  python -m hpcai_jax.sweep --experiment=tradeoff --sys_scale=2 --devices_per_node=2 \\
      --launcher='python launch/local.py --num_processes={nodes} --devices_per_process={devices_per_node} --' \\
      -- --workload=regression --model=mlp --dataset=friedman1 --target_quality=0.9 --steps=2
  # an ensemble ablation on one CPU device: M = 1, 2, 4, 8, 16 members mapped on it
  # (docs/members.md):
  python -m hpcai_jax.sweep --experiment=scalability --parallel_degree=1 \\
      --ensemble_sizes=1,2,4,8,16 --members_per_device=0 --results_dir=results/ablation \\
      -- --flagfile=configs/ensemble_ablation.flags
  # inside a SLURM allocation, 3 repeats of each point:
  python -m hpcai_jax.sweep --experiment=scalability --parallel_degree=8 --max_ensemble=8 \\
      --devices_per_node=8 --repeats=3 \\
      --launcher='srun -N {nodes} --ntasks-per-node={devices_per_node}' \\
      -- --flagfile=configs/resnet50_imagenet.flags
"""


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M,M,... integers, got {text!r}") from None


def parser() -> Parser:
    p = Parser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument(
        "--experiment",
        required=True,
        choices=["scalability", "tradeoff", "paper"],
        help="scalability (§4.3, Figs. 5-6): P_degree fixed, M = 1..--max_ensemble (or "
        "--ensemble_sizes); tradeoff (§4.4.1, Fig. 7): Sys_scale fixed, every (M, P_degree) "
        "with M × P_degree = --sys_scale (or the M of --ensemble_sizes, each dividing it); paper: "
        "both at one-machine scale with their controls (below)",
    )
    number = {"type": int, "default": 0, "metavar": "N"}
    p.add_argument("--parallel_degree", **number, help="scalability: P_degree of every point")
    p.add_argument("--max_ensemble", **number, help="scalability: the largest M")
    p.add_argument("--sys_scale", **number, help="tradeoff: the devices of each point")
    p.add_argument(
        "--ensemble_sizes",
        type=_sizes,
        default=(),
        metavar="M,M,...",
        help="scalability: these M instead of 1..--max_ensemble; tradeoff: these M (each "
        "dividing --sys_scale) instead of every divisor",
    )
    p.add_argument(
        "--members_per_device",
        type=int,
        default=1,
        metavar="K",
        help="members sharing a device: gcd(M, K) per device, 0 for all of a point's M (one "
        "program per point, docs/members.md)",
    )
    p.add_argument(
        "--devices_per_node",
        type=positive_int,
        default=1,
        metavar="N",
        help="devices of one node: gives the launcher's {nodes} and {devices_per_node}",
    )
    p.add_argument(
        "--launcher",
        default="",
        metavar="TEMPLATE",
        help="command prefix of each run, placeholders filled (below) (default: none, each run "
        "started plainly on this machine)",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=1,
        metavar="K",
        help="runs of each point, each with its own --seed (below)",
    )
    _output_arguments(p)
    _paper_arguments(p)
    return p


def _output_arguments(p: Parser) -> None:
    """Where the runs write, their names, and the dry run."""
    p.add_argument(
        "--results_dir", default="results", metavar="DIR", help="where the runs write records"
    )
    p.add_argument("--name", default="sweep", metavar="PREFIX", help="prefix of the runs' ids")
    p.add_argument(
        "--dry_run",
        action="store_true",
        help="print the commands only (paper: as a shell runs them, and the estimated time)",
    )


def _paper_arguments(p: Parser) -> None:
    """--experiment=paper's own flags."""
    p.add_argument(
        "--smoke",
        action="store_true",
        help="paper: the same plan at toy size, one seed, its runs named smoke-paper-…",
    )
    p.add_argument(
        "--only",
        type=lambda text: tuple(x for x in text.split(",") if x),
        default=(),
        metavar="LABEL,...",
        help="paper: only the points of these labels (fig5-M8, fig7-M2-P4, control-M8-nobag, ...)",
    )


def main(argv: list[str] | None = None) -> int:
    return tool_main(PROG, _interruptible, sys.argv[1:] if argv is None else argv)


def _interruptible(argv: list[str]) -> int:
    """The sweep; Ctrl-C (or SIGTERM, SIGHUP) ends it in one line and exit 128 + the signal,
    after the run in progress stopped and released its record (sweep_plan.run)."""
    try:
        return _sweep(argv)
    except KeyboardInterrupt:
        why, code = "Ctrl-C", INTERRUPTED
    except sweep_plan.Stopped as e:
        why, code = str(e), 128 + e.signum
    print(
        f"{PROG}: interrupted ({why}), a run in progress stopped first; every record written "
        "stays (--experiment=paper: the same command resumes the plan)",
        file=sys.stderr,
        flush=True,
    )
    return code


def _sweep(argv: list[str]) -> int:
    own, main_args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    args = parser().parse_args(own)
    runs, plan_ = EXPERIMENTS[args.experiment](args, main_args)
    written, failed = sweep_plan.run_all(runs, plan_, args.dry_run)
    if args.dry_run:
        if args.experiment == "paper":
            minutes = sweep_paper.estimate_s(runs, main_args) / 60
            print(f"{len(runs)} run(s), about {minutes:.0f} min on 2 quiet cores (estimated)")
        return 0
    if written and args.experiment != "paper":
        print(table([records.read(Path(path)) for path in written]))
    reported = not written or _report(written, Path(args.results_dir) / "report")
    print(summary(len(runs), failed), flush=True)
    return 1 if failed or not reported else 0


def _points_plan(args, main_args: list[str]) -> tuple[list[Run], sweep_plan.Plan]:
    """--experiment=scalability or tradeoff: the points of `plan`, each repeat's runs
    (`jobs`), and their commands behind the --launcher template."""
    for flag, given in (("--smoke", args.smoke), ("--only", args.only)):
        if given:
            raise UsageError(f"{flag}: only for --experiment=paper, not {args.experiment}")
    check_launcher(args.launcher)
    try:
        points = plan(
            args.experiment,
            args.parallel_degree,
            args.max_ensemble,
            args.sys_scale,
            args.members_per_device,
            args.ensemble_sizes,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    seed = base_seed(main_args) if args.repeats > 1 else 0
    runs = jobs(points, args.repeats, args.name, args.experiment, seed)
    return runs, _launched(args, main_args)


def _launched(args, main_args: list[str]) -> sweep_plan.Plan:
    """Scalability's and the trade-off's runs in the engine: each command printed before it
    runs, behind the --launcher template, with the runs' --mllog made its own."""
    mllog = mllog_path(main_args)
    fingerprint = sweep_plan.fingerprint(
        args.experiment,
        False,
        main_args,
        members_per_device=args.members_per_device,
        devices_per_node=args.devices_per_node,
        launcher=args.launcher,
    )
    runs_args = [*main_args, f"--results_dir={args.results_dir}"]

    def build(run: Run, plan_: str) -> list[str]:
        return command(
            run.point,
            args.launcher,
            args.devices_per_node,
            run.name,
            runs_args,
            mllog,
            run.seed,
            plan_,
            run.index,
        )

    return sweep_plan.Plan(fingerprint, args.results_dir, build, keep_failed=True)


def _paper(args, main_args: list[str]) -> tuple[list[Run], sweep_plan.Plan]:
    """--experiment=paper: the runs of hpcai_jax/sweep_paper.py's table (or of --only's
    points), each on exactly its Sys_scale of host devices."""
    labels = {p.label for p in sweep_paper.POINTS}
    unknown = [x for x in args.only if x not in labels]
    if unknown:
        raise UsageError(f"--only={unknown[0]}: expected one of {', '.join(sorted(labels))}")
    sweep_plan.check_labels(args.only, f"--only={','.join(args.only)}")
    runs = sweep_paper.paper_runs(args.smoke, args.only)
    fingerprint = sweep_paper.plan_of(args.smoke, main_args)
    return runs, sweep_paper.paper_plan(args.results_dir, main_args, fingerprint)


# Each experiment: its runs and its plan (how they are built and run) from the sweep's flags.
EXPERIMENTS = {"scalability": _points_plan, "tradeoff": _points_plan, "paper": _paper}


def summary(total: int, failed: list[str]) -> str:
    """The sweep's last line: how many of its runs completed, and which failed (a failed
    point ends neither the sweep nor its summary)."""
    line = f"sweep: {total - len(failed)} of {total} run(s) completed"
    return line + (f"; failed: {', '.join(failed)}" if failed else "")


def _report(paths: list[str], out: Path) -> bool:
    """Writes this sweep's report; a failure to write it is one line, not a lost sweep."""
    try:
        print(f"report: {write_report(paths, out)}", flush=True)
    except UsageError as e:
        print(f"{PROG}: error: report not written: {e}", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
