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
from hpcai_jax.engine.mesh import MeshLayout, resolved_batch
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
    reevaluate,
    rerun,
    safe,
    streams,
)
from hpcai_jax.submission.logfile import Log
from hpcai_jax.telemetry import mllog

# Plausibility: each rule takes (Findings, Run, the packed RunConfig, record name, log name) and
# adds a line per field that breaks it; a package rule takes (folder, runs) and returns lines.
RUN_RULES = (plausible.check, bounds.check, provenance.check)
PACKAGE_RULES = (package.check,)
_RULE_NAMES = {
    plausible.check: "plausibility",
    bounds.check: "bounds",
    provenance.check: "provenance",
}


class Run(NamedTuple):
    id: str
    record: records.AnyRecord
    log: Log
    flags: Path


def load(folder: str) -> list[Run]:
    """Every training run of a package; UsageError (one line) on a missing file, unreadable
    JSON or a run id that is no plain file name. `check` scanned the package first (safe.scan):
    every file read here is a regular file of bounded size."""
    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{folder}: not a folder (a package from `pack --out`)")
    files = sorted(p for p in root.glob(f"*{RECORD}") if p.name != SYSTEM)
    if not files and not list((root / streams.FOLDER).glob("*.json")):
        raise UsageError(f"{folder}: no run records (<run_id>.json): not a submission package")
    if not (root / SYSTEM).is_file():
        raise UsageError(f"{folder}: no {SYSTEM}: not a complete submission package")
    runs = []
    for path in files:
        try:
            record = records.read(safe.load_json(path))
        except records.RecordError as e:
            raise UsageError(f"{path}: not a readable record ({e})") from None
        run = path.name.removesuffix(RECORD)
        if record.run_id != run:
            raise UsageError(f"{path}: not the record of run {run} (its run_id differs)")
        safe.run_id(run, path)
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
    dropped = len(run.record.members.dropped) if run.record.members else 0
    judged = rules.judge(config, _layout(mesh), sizes, data.skipped_examples, dropped)
    how = f"by rules.judge on {run.flags.name} (layout from the record's mesh, sizes from its data)"
    f.same(f"{rec} submission.division", record.submission.division, judged.division, how)
    f.same(
        f"{rec} submission.violations",
        record.submission.violations,
        list(judged.violations),
        how,
    )
    # The log's header states the division as the run started: members a fit resume dropped
    # later are the record's (and can only make the run open).
    started = (
        rules.judge(config, _layout(mesh), sizes, data.skipped_examples) if dropped else judged
    )
    line = run.log.one("submission_division") or {}
    f.same(f"{lg} submission_division", line.get("value"), started.division, how)
    f.same(
        f"{lg} submission_division violations",
        (line.get("metadata") or {}).get("violations"),
        list(started.violations),
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


def _verdict(f: derive.Findings, before: int) -> str:
    return "PASS" if len(f.lines) == before else "FAIL"


def check_run(
    run: Run, workdir: Path, recount_flops: bool, verdicts: list | None = None
) -> list[str]:
    """Failure lines of one run; (run id, check, PASS or FAIL) of each check it went through
    appended to `verdicts`, where given (the CLI prints them)."""
    f = derive.Findings(run.id)
    said = [] if verdicts is None else verdicts
    rec, lg, record = f"{run.id}{RECORD}", run.log.path.name, run.record
    config = flagfile.read(run.flags)
    if flagfile.comparable(config.to_dict()) != flagfile.comparable(record.config or {}):
        f.fail(f"{run.flags.name} is not the configuration of {rec} config")
    f.same(f"{rec} mode", record.mode, "train", "(a submission holds training runs)")
    if record.mode != "train":
        said.append((run.id, "configuration", "FAIL"))
        return f.lines  # its figures are not a training run's: nothing more to re-derive
    f.same(f"{rec} status", record.status, "complete", "(only a complete run scores)")
    said.append((run.id, "configuration", _verdict(f, 0)))
    if record.mesh is not None:  # the rules below read the member's batch (--batch_policy)
        config = resolved_batch(config, record.mesh.parallel_degree)
    target = config.quality_target() if config.scored else None
    stages = [
        ("MLLOG compliance", lambda: _compliance(f, run, workdir)),
        ("division", lambda: _division(f, run, config, rec, lg)),
        ("scores re-derived", lambda: derive.scores(f, record, run.log, target, rec, lg)),
        *((_RULE_NAMES[r], lambda r=r: r(f, run, config, rec, lg)) for r in RUN_RULES),
    ]
    if recount_flops:
        stages.append(("recount", lambda: recount.recount(f, run.flags, record, workdir, rec)))
    for name, stage in stages:
        before = len(f.lines)
        stage()
        said.append((run.id, name, _verdict(f, before)))
    return f.lines


class Review(NamedTuple):
    """What `check` does beyond the package alone (docs/submission.md §3): --recount,
    --reevaluate, --rerun_steps=N with --same_system, and the --data_dir both read."""

    recount: bool = False
    reevaluate: bool = False
    rerun_steps: int | None = None
    same_system: bool = False
    data_dir: str | None = None

    def validate_options(self) -> None:
        """UsageError (one line) for option values that cannot run, before the package is read."""
        if self.rerun_steps is not None and self.rerun_steps < 1:
            raise UsageError(f"--rerun_steps={self.rerun_steps}: expected a number of steps >= 1")
        if self.same_system and self.rerun_steps is None:
            raise UsageError("--same_system: only with --rerun_steps=N (it times the re-run)")
        if self.data_dir is not None:
            if not (self.reevaluate or self.rerun_steps):
                raise UsageError(
                    f"--data_dir={self.data_dir}: only with --reevaluate or --rerun_steps"
                )
            if not Path(self.data_dir).is_dir():
                raise UsageError(f"--data_dir={self.data_dir}: not a folder")

    def validate(self, runs: list[Run]) -> None:
        """UsageError (one line) for options the package's runs cannot serve, before any work."""
        for run in runs if self.reevaluate else ():
            folder = reevaluate.weights_folder(run)
            if not folder.is_dir():
                raise UsageError(
                    f"{folder}: missing: --reevaluate needs the run's weights (pack --with_weights)"
                )


def check(
    folder: str,
    recount_flops: bool = False,
    review: Review | None = None,
    notes=None,
    verdicts: list | None = None,
) -> list[str]:
    """Failure lines of every run of the package at `folder` (empty: it passes); what the
    re-evaluations and re-runs measured is appended to `notes` (a list), and each run's checks
    with their verdicts to `verdicts` ((run id or "package", check, PASS or FAIL)), where
    given."""
    review = review or Review(recount=recount_flops)
    review.validate_options()  # a bad value is named before the package is
    if importlib.util.find_spec("mlperf_logging") is None:
        raise UsageError(f"check runs the MLLOG compliance checker: {mllog.INSTALL}")
    root = Path(folder).resolve()  # the checker runs in a folder of its own
    if root.is_dir():
        unsafe = safe.scan(root)
        if unsafe:
            return unsafe  # nothing of it is read: a link or a FIFO could lead anywhere
    runs = load(str(root))
    review.validate(runs)
    notes = [] if notes is None else notes
    failures = []
    with tempfile.TemporaryDirectory(prefix="hpcai_jax_check_") as tmp:
        for run in runs:
            failures += check_run(run, Path(tmp), review.recount, verdicts)
        failures += _again(runs, review, Path(tmp), notes, verdicts)
    host_caches: dict = {}  # each host's cache, as its first STREAM run states it
    for packed in streams.load(root):
        found = streams.check(root, packed, host_caches)
        if verdicts is not None:
            verdicts.append((packed.id, "BabelStream output and rules", _said(found)))
        failures += found
    for rule in PACKAGE_RULES:
        found = rule(root, runs)
        if verdicts is not None:
            verdicts.append(("package", "README.md, system.json, duplicates", _said(found)))
        failures += found
    return failures


def _said(lines: list[str]) -> str:
    return "FAIL" if lines else "PASS"


def _again(
    runs: list[Run], review: Review, workdir: Path, notes: list, verdicts: list | None = None
) -> list[str]:
    """The re-runs, then the re-evaluations (in this process: after every re-run, so that no
    accelerator memory of this one is held while they run)."""
    trained = [run for run in runs if run.record.mode == "train"]
    out = []
    if review.rerun_steps:
        for run in trained:
            f = derive.Findings(run.id)
            notes.append(
                rerun.rerun(
                    f, run, review.rerun_steps, review.same_system, review.data_dir, workdir
                )
            )
            out += f.lines
            if verdicts is not None:
                verdicts.append((run.id, f"re-run of {review.rerun_steps} steps", _said(f.lines)))
    if review.reevaluate:
        for run in trained:
            f = derive.Findings(run.id)
            note = reevaluate.reevaluate(f, run, flagfile.read(run.flags), review.data_dir)
            notes += [note] if note else []
            out += f.lines
            if verdicts is not None:
                verdicts.append((run.id, "re-evaluation", _said(f.lines)))
    return out
