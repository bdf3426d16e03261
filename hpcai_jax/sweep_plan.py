"""The one sweep engine: `python -m hpcai_jax.sweep`'s experiments (scalability and trade-off,
planned in sweep.py; the paper's, tabled in sweep_paper.py) are each a list of `Run`s of `Point`s,
built into commands by one builder (`command`) and run by one loop (`run_all`), so every plan
resumes alike and a flag of the caller's is read by absl as main reads it (`caller_flags`), never
by hand. The engine also holds the plan's fingerprint each run's record carries, the resume
check that reads it back, and a run's process, stopped cleanly on Ctrl-C.

A fingerprint is `<experiment>:<smoke|full>:<digest>`: the digest is the first 16 hex digits of
the SHA-256 of the flags that decide the runs' results (the plan's own and the caller's, their
flagfiles read; the flags that only name or place outputs, report/collect.OUTPUT_ONLY, left
out). Each run gets it as --sweep_plan, followed by the run's place in the plan (`placed`: its point's
label and seed index, which the report reads instead of the run id), and its record keeps both
(`sweep_plan`, docs/record.md), so a rerun takes a record as done only when the same plan wrote
it: a smoke run's toy record is never taken for a full run's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from absl import flags as absl_flags

from hpcai_jax import flagfiles, flags, records
from hpcai_jax.errors import UsageError
from hpcai_jax.report.collect import OUTPUT_ONLY

# Main's flags that name or place a run's outputs: the same plan whatever they say.
OUTPUT_FLAGS = frozenset(k.rsplit(".", 1)[1] for k in OUTPUT_ONLY if not k.endswith("."))
STOP_NOW_S = 5.0  # after a second Ctrl-C: how long a run has to end before it is killed


def expanded(main_args: list[str]) -> list[str]:
    """The runs' flags with their flagfiles read in place as main reads them (the last one
    wins; a nested include found from any folder, flagfiles.py)."""
    return flagfiles.expand(list(main_args))


def _name(arg: str) -> str:
    """The flag an argument sets ('' for a value): --x=1, --x and --nox all set x."""
    if not arg.startswith("--"):
        return ""
    name = arg[2:].split("=", 1)[0]
    return name[2:] if name.startswith("no") and name[2:] in OUTPUT_FLAGS else name


def fingerprint(experiment: str, smoke: bool, main_args: list[str], **plan) -> str:
    """The plan's fingerprint: `main_args` (flagfiles read, output flags left out) and the
    sweep's own settings that decide results (`plan`, e.g. --members_per_device)."""
    kept = [a for a in expanded(main_args) if _name(a) not in OUTPUT_FLAGS]
    text = json.dumps({"flags": kept, "plan": plan}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{experiment}:{'smoke' if smoke else 'full'}:{digest}"


def placed(plan: str, point: str, seed_index: int) -> str:
    """--sweep_plan's value for one run: the plan's fingerprint, its point's label and its seed
    index (records/train.SweepPlan); the fingerprint alone is what `stamp` reads back."""
    return f"{plan}:{point}:{seed_index}"


def stamp(path: Path) -> str | None:
    """The fingerprint a run's record carries ('' for none); None where no record can be read
    (absent, truncated: the run goes ahead and writes its own)."""
    try:
        plan = getattr(records.read(path), "sweep_plan", None)
    except Exception:  # noqa: BLE001 - absent or unreadable: not another plan's record
        return None
    return str(plan) if plan else ""


def refuse_others(paths: list[Path], plan: str) -> None:
    """One line, exit 2, if a record this plan would take or write belongs to another plan
    (a smoke run's, other flags', one written before records carried a plan)."""
    others = [(p, s) for p in paths if (s := stamp(p)) is not None and s != plan]
    if not others:
        return
    path, theirs = others[0]
    theirs = f"plan {theirs}" if theirs else "no plan fingerprint"
    more = f" and {len(others) - 1} more" if len(others) > 1 else ""
    raise UsageError(
        f"--results_dir={path.parent}: {path.name}{more} written by another plan ({theirs}; "
        f"this one is {plan}), never taken as this plan's: give another --results_dir or move them"
    )


class Stopped(Exception):
    """SIGTERM or SIGHUP reached the sweep: passed on to the run, which has stopped."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run(cmd: list[str], env: dict | None = None) -> int:
    """One run's process, its exit code. Ctrl-C reaches the sweep alone (the run has a process
    group of its own) and is passed on once: the run stops as after its own Ctrl-C, writes its
    record and releases its lock, and the sweep then stops (KeyboardInterrupt). A second Ctrl-C
    passes on a second SIGINT and kills the run STOP_NOW_S later if it is still there. SIGTERM
    and SIGHUP are passed on too (a run outside the terminal's group would not see a hang-up),
    and the sweep stops when the run has (Stopped)."""
    proc = subprocess.Popen(cmd, env=env, process_group=0)
    got: list[int] = []

    def forward(signum, _frame):
        got.append(signum)
        proc.send_signal(signum)

    kept = {n: signal.signal(n, forward) for n in (signal.SIGTERM, signal.SIGHUP)}
    try:
        code = _wait(proc)
    finally:
        for n, handler in kept.items():
            signal.signal(n, handler)
    if got:
        raise Stopped(got[0])
    return code


def _wait(proc: subprocess.Popen) -> int:
    """The run's exit code; on Ctrl-C, the run stopped first (`run`), then KeyboardInterrupt."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_NOW_S)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
                proc.wait()
        raise


@dataclasses.dataclass(frozen=True)
class Point:
    """One point of a plan: a (M, P_degree) with its members per device and the flags of its
    own; `label` names it in its runs' records (sweep_plan.point), M<M>-P<P_degree> unless the
    plan names it (the paper's fig5-M8); `seeds` runs of it, or `seeds_of` another point's."""

    ensemble_size: int
    parallel_degree: int = 1
    members_per_device: int = 1  # members sharing a device, mapped in one program
    flags: tuple[str, ...] = ()
    seeds: int = 1
    seeds_of: str = ""  # another point's label: its k-th run takes that point's k-th seed
    label: str = ""

    def __post_init__(self):
        if not self.label:
            object.__setattr__(self, "label", f"M{self.ensemble_size}-P{self.parallel_degree}")

    @property
    def devices(self) -> int:
        return self.ensemble_size // self.members_per_device * self.parallel_degree


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a plan: its point, the seed it runs with (None: the caller's own --seed), its
    seed index (a repeat, records/train.SweepPlan.seed_index) and its run name (its record's)."""

    point: Point
    name: str
    seed: int | None = None
    index: int = 0


def check_labels(labels: Sequence[str], what: str) -> None:
    """One line, exit 2, for a label given twice (two runs, one record name)."""
    twice = sorted({x for x in labels if list(labels).count(x) > 1})
    if twice:
        raise UsageError(f"{what}: expected each label once ({twice[0]})")


def caller_flags(args: Sequence[str]) -> absl_flags.FlagValues:
    """main's flags as `args` (a run's flags, before or after its `python -m hpcai_jax.main`)
    set them: flagfiles read as main reads them (flagfiles.py), then parsed by absl on main's
    flags (flags.main_flags); a flag main does not define is left alone, one of a bad value is
    one line."""
    args = list(args)
    if "hpcai_jax.main" in args:
        args = args[args.index("hpcai_jax.main") + 1 :]
    values = flags.main_flags()
    try:
        values(["hpcai_jax.main", *flagfiles.expand(args)], known_only=True)
    except absl_flags.Error as e:
        raise UsageError(f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return values


def given(args: Sequence[str], name: str, default=None):
    """The value absl gives --`name` in a run's flags `args` (the last one wins), or `default`
    where they do not set it."""
    values = caller_flags(args)
    return values[name].value if values[name].present else default


def command(
    run: Run,
    before: Sequence[str] = (),
    after: Sequence[str] = (),
    prefix: Sequence[str] = (),
    plan: str = "",
) -> list[str]:
    """A run's command line, the one builder of every plan: `prefix` (a launcher's), main, the
    flags `before` the point's, the point's own, its mesh, seed and run name, the flags `after`
    them (absl: the last one wins), and the plan's fingerprint with the run's place in it last
    (no flag replaces it)."""
    p = run.point
    return [
        *prefix,
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *before,
        *p.flags,
        f"--ensemble_size={p.ensemble_size}",
        f"--parallel_degree={p.parallel_degree}",
        f"--members_per_device={p.members_per_device}",
        *([f"--seed={run.seed}"] if run.seed is not None else []),
        f"--run_name={run.name}",
        *after,
        *([f"--sweep_plan={placed(plan, p.label, run.index)}"] if plan else []),
    ]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one plan's runs are built, shown and run: its fingerprint, its results folder, its
    commands (`build(run, fingerprint)`), each run's environment (None: the sweep's own), how a
    command is printed, whether each is printed before it runs (else under --dry_run only,
    with a progress line after each run either way), and whether a failed run's own record is
    reported too (the scalability and trade-off reports show an invalid run)."""

    fingerprint: str
    results_dir: str
    build: Callable[[Run, str], list[str]]
    env: Callable[[Run], dict | None] = lambda run: None
    shown: Callable[[Run, list[str]], str] = lambda run, cmd: shlex.join(cmd)
    echo: bool = True
    keep_failed: bool = False  # a failed run's own (partial, invalid) record among those written

    def path(self, run: Run) -> Path:
        return Path(self.results_dir) / f"{run.name}.json"


def finished(path: Path) -> bool:
    """Whether a run's record exists and is complete: a rerun of the plan skips it."""
    try:
        return records.read(path).status == "complete"
    except Exception:  # noqa: BLE001 - absent, partial, unreadable: run it (again)
        return False


def run_all(runs: list[Run], plan: Plan, dry_run: bool = False, clock=time):
    """Every plan's run loop: under `dry_run` each command printed (`+ ...`), nothing run;
    else the plan refused in one line, before any run, if its folder holds another plan's
    record under one of its runs' names, then each run in order: skipped when its record is
    complete (and so this plan's), run again over its own partial or invalid record
    (--overwrite), and a failed run stops none of the others. Returns (records written, failed
    runs)."""
    if dry_run:
        for job in runs:
            print("+ " + plan.shown(job, plan.build(job, plan.fingerprint)), flush=True)
        return [], []
    refuse_others([plan.path(r) for r in runs], plan.fingerprint)
    written, failed = [], []
    for k, job in enumerate(runs, 1):
        path = plan.path(job)
        seed = f" seed {job.seed}" if job.seed is not None else ""
        head = f"[{k}/{len(runs)}] {job.point.label}{seed}"
        if finished(path):
            print(f"{head}: done before, skipped", flush=True)
            written.append(str(path))
            continue
        returncode, took = _run_one(job, plan, clock)
        if returncode == 0 and finished(path):
            print(f"{head} done in {took:.0f}s", flush=True)
            written.append(str(path))
        else:
            print(f"{head} FAILED (exit {returncode}) after {took:.0f}s", flush=True)
            failed.append(f"{job.name} (exit {returncode})")
            if plan.keep_failed and stamp(path) == plan.fingerprint:
                written.append(str(path))
    return written, failed


def _run_one(job: Run, plan: Plan, clock) -> tuple[int, float]:
    """One run's process (its command printed first where the plan echoes): its exit code and
    how long it took. Its own partial or invalid record is replaced (else main refuses to
    start over a record)."""
    cmd = plan.build(job, plan.fingerprint)
    if stamp(plan.path(job)) == plan.fingerprint:
        cmd.append("--overwrite")
    if plan.echo:
        print("+ " + plan.shown(job, cmd), flush=True)
    env = plan.env(job)
    start = clock.monotonic()
    returncode = run(cmd) if env is None else run(cmd, env=env)
    return returncode, clock.monotonic() - start
