"""`check DIR [--recount]`: re-derives a package's figures (derive.py), runs the MLLOG
compliance checker with the shipped ruleset, re-applies the division rules to each packed
flagfile, checks what the figures claim against what the configuration and the devices make
possible (RUN_RULES, PACKAGE_RULES: docs/submission.md §3), and with --recount recounts the
FLOPs per step (recount.py). Returns the failure lines; a malformed package is a UsageError."""

from __future__ import annotations

import importlib.util
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from hpcai_jax import records, rules
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.errors import UsageError
from hpcai_jax.records.train import Mesh
from hpcai_jax.submission import (
    FLAGS,
    MLLOG,
    RECORD,
    SYSTEM,
    bounds,
    derive,
    flagfile,
    package,
    plausible,
    provenance,
    recount,
)
from hpcai_jax.submission.logfile import Log
from hpcai_jax.telemetry import mllog

# Plausibility: each rule takes (Findings, Run, the packed RunConfig, record name, log name) and
# adds a line per field that breaks it; a package rule takes (folder, runs) and returns lines.
RUN_RULES = (plausible.check, bounds.check, provenance.check)
PACKAGE_RULES = (package.check,)


class Run(NamedTuple):
    id: str
    record: records.AnyRecord
    log: Log
    flags: Path


def load(folder: str) -> list[Run]:
    """Every run of a package; UsageError (one line) on a missing file or unreadable JSON."""
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{folder}: not a folder (a package from `pack --out`)")
    files = sorted(p for p in root.glob(f"*{RECORD}") if p.name != SYSTEM)
    if not files:
        raise UsageError(f"{folder}: no run records (<run_id>.json): not a submission package")
    if not (root / SYSTEM).is_file():
        raise UsageError(f"{folder}: no {SYSTEM}: not a complete submission package")
    runs = []
    for path in files:
        try:
            record = records.read(path)
        except records.RecordError as e:
            raise UsageError(f"{path}: not a readable record ({e})") from None
        run = path.name.removesuffix(RECORD)
        if record.run_id != run:
            raise UsageError(f"{path}: not the record of run {run} (its run_id differs)")
        for suffix in (MLLOG, FLAGS):
            if not (root / f"{run}{suffix}").is_file():
                raise UsageError(f"{root / (run + suffix)}: missing (run {run} is in the package)")
        runs.append(Run(run, record, Log(root / f"{run}{MLLOG}"), root / f"{run}{FLAGS}"))
    return runs


def _layout(mesh: Mesh) -> MeshLayout:
    return MeshLayout(
        mesh.ensemble_size,
        mesh.members_per_device,
        mesh.parallel_degree,
        mesh.num_devices,
        mesh.model_parallel,
    )


def _compliance(f: derive.Findings, run: Run, workdir: Path) -> None:
    proc = subprocess.run(
        mllog.checker_command(run.log.path, workdir / f"{run.id}.checker.log"),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        text = (proc.stderr + proc.stdout).splitlines()
        marks = ("CHECK for", "Required", "failed test", "Failed executing")
        why = next((ln for ln in text if any(m in ln for m in marks)), None)
        why = why or next((ln for ln in text if "FAILED" in ln or "Error" in ln), "failed")
        f.fail(
            f"{run.log.path.name} fails the MLLOG compliance checker ({mllog.RULESET.name}): {why.strip()}"
        )


def _division(f: derive.Findings, run: Run, config, rec: str, lg: str) -> None:
    record, data, mesh = run.record, run.record.data, run.record.mesh
    sizes = rules.SplitSizes(data.train_examples, data.eval_examples or None)
    judged = rules.judge(config, _layout(mesh), sizes, data.skipped_examples)
    how = f"by rules.judge on {run.flags.name} (layout from the record's mesh, sizes from its data)"
    f.same(f"{rec} submission.division", record.submission.division, judged.division, how)
    f.same(
        f"{rec} submission.violations",
        record.submission.violations,
        list(judged.violations),
        how,
    )
    line = run.log.one("submission_division") or {}
    f.same(f"{lg} submission_division", line.get("value"), judged.division, how)
    f.same(
        f"{lg} submission_division violations",
        (line.get("metadata") or {}).get("violations"),
        list(judged.violations),
        how,
    )
    # The sizes and layout judged are the ones the log states the run had.
    for key, want in (
        ("train_samples", data.train_examples),
        ("eval_samples", data.eval_examples),
        ("number_of_devices", mesh.num_devices),
        ("parallel_degree", mesh.parallel_degree),
        ("members_per_device", mesh.members_per_device),
        ("model_parallel", mesh.model_parallel),
    ):
        f.same(f"{lg} {key}", run.log.value(key), want, f"({rec} data/mesh)")


def check_run(run: Run, workdir: Path, recount_flops: bool) -> list[str]:
    f = derive.Findings(run.id)
    rec, lg, record = f"{run.id}{RECORD}", run.log.path.name, run.record
    config = flagfile.read(run.flags)
    if flagfile.comparable(config.to_dict()) != flagfile.comparable(record.config or {}):
        f.fail(f"{run.flags.name} is not the configuration of {rec} config")
    f.same(f"{rec} mode", record.mode, "train", "(a submission holds training runs)")
    if record.mode != "train":
        return f.lines  # its figures are not a training run's: nothing more to re-derive
    f.same(f"{rec} status", record.status, "complete", "(only a complete run scores)")
    _compliance(f, run, workdir)
    _division(f, run, config, rec, lg)
    target = config.quality_target() if config.scored else None
    derive.scores(f, record, run.log, target, rec, lg)
    for rule in RUN_RULES:
        rule(f, run, config, rec, lg)
    if recount_flops:
        recount.recount(f, run.flags, record, workdir, rec)
    return f.lines


def check(folder: str, recount_flops: bool = False) -> list[str]:
    """Failure lines of every run of the package at `folder` (empty: it passes)."""
    if importlib.util.find_spec("mlperf_logging") is None:
        raise UsageError(f"check runs the MLLOG compliance checker: {mllog.INSTALL}")
    root = Path(folder).resolve()  # the checker runs in a folder of its own
    runs = load(str(root))
    failures = []
    with tempfile.TemporaryDirectory(prefix="hpcai_jax_check_") as tmp:
        for run in runs:
            failures += check_run(run, Path(tmp), recount_flops)
    for rule in PACKAGE_RULES:
        failures += rule(root, runs)
    return failures
