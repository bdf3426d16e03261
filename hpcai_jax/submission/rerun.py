"""`check --rerun_steps=N [--same_system] [--data_dir=DIR]`: each packed flagfile trained again
for N steps on this machine (`python -m hpcai_jax.main`, a fresh results folder in the check's
temporary one, no checkpoint, no weights, no MLLOG), and its record held against the submitted
one (docs/submission.md, "What --rerun_steps proves").

FLOPs per step: exactly the record's on the run's own mesh and device kind (the same program,
counted the same way), else within recount.TOLERANCE (another backend or a refitted mesh).
With --same_system (the reviewer says this is the run's system: its device count and kind must
be the record's), the re-run's median timed step at most STEP_TOLERANCE longer than the
record's: a clock scaled down, which the package's arithmetic cannot see while it stays within
the peak, is not the time the step takes. The re-run skips what only costs time: held-out evaluation of more than one
example, the out-of-bag estimate, evaluations during training.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.submission import recount
from hpcai_jax.submission.layout import fit, probe

STEP_TOLERANCE = 0.25
# What the re-run sets beside the packed flagfile (later flags win): its own outputs, nothing
# kept, and no evaluation worth its time.
_OVERRIDES = (
    "--mllog=",
    "--checkpoint_dir=",
    "--stream_record=",
    "--keep_weights=false",
    "--stop_at_target=false",
    "--eval_every_epochs=0",
    "--eval_examples=1",
    "--oob_examples=0",
    "--overwrite=false",
)
_RERUNS: dict[tuple, records.TrainRecord | str] = {}


def rerun(f, run, steps: int, same_system: bool, data_dir: str | None, workdir: Path) -> str:
    """Adds a failure line per figure the re-run contradicts; returns what it measured (a note
    line). UsageError where --same_system is not this machine."""
    record, rec = run.record, f"{run.id}.json"
    devices = probe()
    fitted = fit(record.mesh, devices.count)
    same = fitted.same and devices.kind == record.provenance.device_kind
    if same_system and not same:
        raise UsageError(
            f"--same_system: this machine has {devices.count} × {devices.kind}, run {run.id} "
            f"ran on {record.mesh.num_devices} × {record.provenance.device_kind}"
        )
    key = (recount.step_lines(run.flags), steps, fitted, data_dir)
    if key not in _RERUNS:
        out = workdir / f"rerun-{len(_RERUNS)}"
        _RERUNS[key] = _run(run.flags, out, steps, [] if fitted.same else fitted.flags(), data_dir)
    again = _RERUNS[key]
    where = f"re-run for {steps} steps on {fitted.describe(devices.kind)}"
    if isinstance(again, str):
        f.fail(f"{run.flags.name} {where} failed: {again}")
        return f"run {run.id}: {where}: failed"
    claimed, got = record.flops.per_step, again.flops.per_step
    if same and claimed != got:
        f.fail(f"{rec} flops.per_step {claimed!r} != {got!r} {where} (the same program: exactly)")
    elif not same and not _within(claimed, got, recount.TOLERANCE):
        f.fail(f"{rec} flops.per_step {claimed:.6g} != {got:.6g} {where} (± 1 %)")
    mine, theirs = again.timing.step_s, record.timing.step_s
    note = (
        f"run {run.id}: {where}: flops.per_step {got:.6g} (the record's {claimed:.6g}), median "
        f"step {mine.median_s:.4g} s over {mine.count} timed step(s) (the record's {theirs.median_s:.4g} s)"
    )
    if same_system and not _not_faster(theirs.median_s, mine.median_s):
        f.fail(
            f"{rec} timing.step_s.median_s {theirs.median_s:.4g} s < {mine.median_s:.4g} s, the "
            f"median of {mine.count} timed step(s) {where}, by more than --same_system allows "
            f"(the re-run at most {STEP_TOLERANCE:.0%} slower than the record)"
        )
    return note


def _not_faster(claimed, measured) -> bool:
    """Whether the re-run's step took at most STEP_TOLERANCE longer than the one claimed. One
    side only: a step claimed slower than it runs costs its submitter, and a loaded host at the
    run's time makes it so."""
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (claimed, measured))
    return ok and measured <= (1 + STEP_TOLERANCE) * claimed


def _within(claimed, measured, share: float) -> bool:
    """Whether `claimed` lies within `share` of the re-measured figure."""
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (claimed, measured))
    return ok and abs(claimed - measured) <= share * abs(measured)


def _run(
    flags: Path, out: Path, steps: int, layout: list[str], data_dir: str | None
) -> records.TrainRecord | str:
    """The re-run's record, or why there is none (its last line of stderr)."""
    command = [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        f"--flagfile={flags.resolve()}",
        f"--steps={steps}",
        f"--results_dir={out}",
        "--run_name=rerun",
        *_OVERRIDES,
        *layout,
        *([f"--data_dir={data_dir}"] if data_dir else []),
    ]
    proc = subprocess.run(command, capture_output=True, text=True)
    (out / "stderr").parent.mkdir(parents=True, exist_ok=True)
    (out / "stderr").write_text(proc.stderr)
    try:
        again = records.read(out / "rerun.json")
    except records.RecordError:
        again = None
    if isinstance(again, records.TrainRecord) and again.status == "complete":
        return again
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return f"exit {proc.returncode}: {last}"
