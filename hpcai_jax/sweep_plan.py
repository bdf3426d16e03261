"""What both sweep engines share (sweep.py's scalability and trade-off sweeps, sweep_paper.py's
paper plan): the plan's fingerprint each run's record carries, the resume check that reads it
back, and a run's process, stopped cleanly on Ctrl-C.

A fingerprint is `<experiment>:<smoke|full>:<digest>`: the digest is the first 16 hex digits of
the SHA-256 of the flags that decide the runs' results (the plan's own and the caller's, their
flagfiles read; the flags that only name or place outputs, report/collect.OUTPUT_ONLY, left
out). Each run gets it as --sweep_plan, followed by the run's place in the plan (`placed`: its point's
label and seed index, which the report reads instead of the run id), and its record keeps both
(`sweep_plan`, docs/record.md), so a rerun takes a record as done only when the same plan wrote
it: a smoke run's toy record is never taken for a full run's.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
from pathlib import Path

from hpcai_jax import flagfiles, records
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
