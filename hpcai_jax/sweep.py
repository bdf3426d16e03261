"""The paper's two experiments as sweeps of runs inside one allocation (HPC AI500 V3.0 §5).

Each point is one run of `python -m hpcai_jax.main` with a record of its own, so the sweep only
plans the points, launches them and reports on their records. The experiments, the --launcher
template and the runs' MLLOG files: `launch/README.md`, Sweeps.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

from absl import flags

from hpcai_jax import records, results
from hpcai_jax.errors import UsageError
from hpcai_jax.report import write_report


@dataclasses.dataclass(frozen=True)
class Point:
    ensemble_size: int
    parallel_degree: int

    @property
    def devices(self) -> int:
        return self.ensemble_size * self.parallel_degree


def plan(
    experiment: str, parallel_degree: int = 0, max_ensemble: int = 0, sys_scale: int = 0
) -> list[Point]:
    if experiment == "scalability":
        if parallel_degree < 1 or max_ensemble < 1:
            raise ValueError("scalability needs --parallel_degree >= 1 and --max_ensemble >= 1")
        return [Point(m, parallel_degree) for m in range(1, max_ensemble + 1)]
    if experiment == "tradeoff":
        if sys_scale < 1:
            raise ValueError("tradeoff needs --sys_scale >= 1")
        return [Point(m, sys_scale // m) for m in range(sys_scale, 0, -1) if sys_scale % m == 0]
    raise ValueError(f"--experiment={experiment!r}: expected scalability or tradeoff")


def mllog_path(main_args: list[str]) -> str:
    """The --mllog the runs' flags give (flagfiles read, the last one wins), or ''."""
    try:
        args = flags.FlagValues().read_flags_from_files(main_args, force_gnu=False)
    except flags.Error as e:
        raise UsageError(str(e).splitlines()[0].removeprefix("ERROR:: ")) from None
    path = ""
    for i, arg in enumerate(args):
        if arg.startswith("--mllog="):
            path = arg.removeprefix("--mllog=")
        elif arg == "--mllog" and i + 1 < len(args):
            path = args[i + 1]
    return path


def run_mllog(path: str, run_name: str) -> str:
    """One run's MLLOG file: <stem>.<run_name><suffix> beside `path`."""
    base = Path(path)
    return str(base.with_name(f"{base.stem}.{run_name}{base.suffix}"))


def command(
    point: Point,
    launcher: str,
    devices_per_node: int,
    run_name: str,
    main_args: list[str],
    mllog: str = "",
) -> list[str]:
    """The run's command line; `mllog`, the --mllog of the runs' flags, becomes the run's own
    file (`run_mllog`)."""
    nodes = -(-point.devices // devices_per_node)
    prefix = launcher.format(
        devices=point.devices, nodes=nodes, devices_per_node=min(devices_per_node, point.devices)
    )
    return [
        *shlex.split(prefix),
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *main_args,
        f"--ensemble_size={point.ensemble_size}",
        f"--parallel_degree={point.parallel_degree}",
        "--members_per_device=1",
        f"--run_name={run_name}",
        *([f"--mllog={run_mllog(mllog, run_name)}"] if mllog else []),
    ]


def table(runs: list[records.TrainRecord]) -> str:
    num = results.cell

    lines = [
        f"{'M':>4} {'P_degree':>8} {'Sys_scale':>9} {'FLOPS':>11} {'VFLOPS':>11} "
        f"{'ensemble acc':>12} {'member mean':>11} {'status':>9}"
    ]
    for r in runs:
        mesh, m, q = r.mesh, r.metrics, r.quality
        lines.append(
            f"{mesh.ensemble_size:>4} {mesh.parallel_degree:>8} {mesh.num_devices:>9} "
            f"{num(m.flops_per_s):>11} {num(m.vflops_per_s):>11} "
            f"{num(q.ensemble, '{:.4f}'):>12} {num(q.member_mean, '{:.4f}'):>11} "
            f"{r.status:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, main_args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(
        prog="python -m hpcai_jax.sweep",
        description=__doc__.split("\n")[0],
        epilog="Flags after -- are the runs' (python -m hpcai_jax.main). A --mllog=PATH among "
        "them, or in their flagfile, gives each run its own MLLOG file: <stem>.<run id><suffix> "
        "beside PATH.",
    )
    parser.add_argument("--experiment", required=True, choices=["scalability", "tradeoff"])
    parser.add_argument("--parallel_degree", type=int, default=0)
    parser.add_argument("--max_ensemble", type=int, default=0)
    parser.add_argument("--sys_scale", type=int, default=0)
    parser.add_argument("--devices_per_node", type=int, default=1)
    parser.add_argument("--launcher", default="", help="command prefix template, e.g. srun ...")
    parser.add_argument("--results_dir", default="results")
    parser.add_argument("--name", default="sweep", help="prefix of the runs' ids")
    parser.add_argument("--dry_run", action="store_true", help="print the commands only")
    args = parser.parse_args(own)
    try:
        points = plan(args.experiment, args.parallel_degree, args.max_ensemble, args.sys_scale)
        mllog = mllog_path(main_args)
    except (ValueError, UsageError) as e:
        parser.exit(2, f"hpcai_jax.sweep: error: {e}\n")
    runs, written, failed = [], [], 0
    for point in points:
        run_name = f"{args.name}-{args.experiment}-M{point.ensemble_size}-P{point.parallel_degree}"
        cmd = command(
            point,
            args.launcher,
            args.devices_per_node,
            run_name,
            [*main_args, f"--results_dir={args.results_dir}"],
            mllog,
        )
        print("+ " + shlex.join(cmd), flush=True)
        if args.dry_run:
            continue
        path = Path(args.results_dir) / f"{run_name}.json"
        older = path.exists()  # another sweep's record: reported only if this run replaced it
        returncode = subprocess.run(cmd).returncode
        if path.exists() and (returncode == 0 or not older):
            written.append(str(path))  # a failed run's invalid or partial record included
        if returncode != 0:
            failed += 1
            continue
        runs.append(records.read(path))
    if runs:
        print(table(runs))
    if written and not _report(written, Path(args.results_dir) / "report"):
        failed += 1
    return 1 if failed else 0


def _report(paths: list[str], out: Path) -> bool:
    """Writes this sweep's report; a failure to write it is one line, not a lost sweep."""
    try:
        print(f"report: {write_report(paths, out)}", flush=True)
    except UsageError as e:
        print(f"hpcai_jax.sweep: error: report not written: {e}", file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
