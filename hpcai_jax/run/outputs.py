"""A training run's outputs as one unit (docs/reliability.md, "A run's outputs"): its record,
MLLOG, TensorBoard events and kept weights are written under partial names (`PATH.partial`:
`record_write.staged`) while it runs, and renamed to their final names together once all of them
are written, so that the final names never hold one run's file beside another's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import threading
from pathlib import Path

import jax
from absl import logging

from hpcai_jax import results
from hpcai_jax.errors import UsageError
from hpcai_jax.records import Status, owned
from hpcai_jax.records import write as record_write
from hpcai_jax.run import clock as run_clock
from hpcai_jax.run import kept_weights
from hpcai_jax.telemetry import mllog

FINISHED = (Status.COMPLETE, Status.INVALID)  # a record no preempted run's may replace
Claim = record_write.Claim  # a run's hold on its record's name (`claim`)


def refuse_at_once(config) -> None:
    """Before any work: a results directory no process can write to, or (process 0) a
    directory or a user's file where this run's outputs go. A resumed run's id is checked
    again where it is claimed (`claim`)."""
    record_write.check_writable(config.results.results_dir)
    if jax.process_index() == 0:
        run_id = record_write.run_id(config, "train")
        Outputs.of(config, run_id).refuse_foreign(config.results.results_dir)


def claim(config, run_id: str, resuming: bool) -> Claim:
    """The record's name claimed for `run_id` (results.claim) before the state is initialised,
    so that a clash fails fast; then, on process 0, the names the commit replaces checked to
    hold the project's files (`Outputs.refuse_foreign`)."""
    rc = config.results
    claimed = results.claim(rc.results_dir, run_id, rc.overwrite, resuming)
    if jax.process_index() == 0:
        Outputs.of(config, run_id).refuse_foreign(rc.results_dir)
    return claimed


def open_mllog(setup, wall_start: float, progress, resuming: bool) -> mllog.MLLog:
    """--mllog's MLPerf-style lines (a no-op without it), its init_start at `wall_start` (the
    run clock's reading at the run's start); a resumed run appends to its own log, cut back to
    its checkpoint's lines (telemetry/mllog.py)."""
    resumed_at = progress.step if resuming else None
    return mllog.MLLog.start(
        setup, wall_start, run_clock.read, progress.run_id, resumed_at, progress.mllog_lines
    )


def stage_record(config, run_id: str, record) -> Path | None:
    """Writes the record under its partial name (process 0: its path; None elsewhere), for
    `Outputs.commit` to rename with the others."""
    return results.write_record(config.results.results_dir, run_id, record, stage=True)


@dataclasses.dataclass(frozen=True)
class Outputs:
    """The final names of one run's outputs, the record's last (its presence says the others
    are there): the events folder and the weights beside the record are named even where this
    run writes none, so that an earlier run's are not left beside this run's record."""

    events: Path
    weights: Path
    mllog: Path | None
    record: Path

    @classmethod
    def of(cls, config, run_id: str) -> Outputs:
        rc = config.results
        return cls(
            events=Path(tensorboard_dir(config, run_id)),
            weights=kept_weights.beside(rc.results_dir, run_id),
            mllog=Path(rc.mllog) if rc.mllog else None,
            record=Path(rc.results_dir) / f"{run_id}.json",
        )

    def commit(self, status: str, resumable: bool = True) -> Path:
        """Renames every staged output over its final name, SIGINT and SIGTERM held off
        meanwhile, and removes an earlier run's folder this run wrote none of; returns where
        the record is. A preempted run whose final names hold an earlier finished run's record
        (`--overwrite`) keeps its files under their partial names, where its resume takes them
        up, and leaves the earlier run's whole."""
        if status not in FINISHED and _finished(self.record):
            kept = [str(record_write.stage_of(p)) for p in self._files()]
            kept = [p for p in kept if Path(p).exists()]
            logging.warning(
                "%s holds a finished run: this one stopped before it finished, so its files are "
                "kept under partial names (%s) and the earlier run's are untouched%s",
                self.record,
                ", ".join(kept),
                "; the same command resumes it" if resumable else "",
            )
            return record_write.staged(self.record)
        replaced = []
        with _signals_held():
            for final in self._files():
                replaced += _replace(record_write.stage_of(final), final)
        for old in replaced:
            shutil.rmtree(old, ignore_errors=True)
        return self.record

    def refuse_foreign(self, results_dir: str) -> None:
        """Before any compute: each name the commit replaces holds nothing, or what this
        project wrote, else one line, whatever --overwrite says (records/owned.py). Checked
        again where the record is claimed and the MLLOG opened (records/write.py,
        telemetry/mllog.py)."""
        record_write.refuse_foreign(results_dir, self.record)
        if self.mllog is not None:
            mllog.refuse_foreign(self.mllog)
        checks = (
            (self.events, owned.foreign_events, "TensorBoard events"),
            (self.weights, owned.foreign_weights, "kept weights"),
        )
        for final, foreign, kind in checks:
            for name in (final, record_write.staged(final)):
                if what := foreign(name):
                    raise UsageError(
                        f"{name} is {what}, not {kind} this run may replace: move it away or "
                        "choose another --run_name"
                    )

    def _files(self) -> list[Path]:
        return [p for p in (self.events, self.weights, self.mllog, self.record) if p is not None]


def tensorboard_dir(config, run_id: str) -> str:
    """Where a run's events go: <--tensorboard_dir or <results_dir>/tensorboard>/<run_id>."""
    rc = config.results
    return os.path.join(rc.tensorboard_dir or os.path.join(rc.results_dir, "tensorboard"), run_id)


def stage_folder(final: str | Path, resuming: bool) -> Path:
    """The partial name a folder output is written under: a new run's starts empty; a resumed
    one's holds what the run wrote before (its own partial folder, else a copy of the final
    one), so that the commit replaces the final folder with the whole run's."""
    if not resuming:  # never an earlier run's partial folder (record_write.fresh_stage)
        return record_write.fresh_stage(final)
    final, staged = Path(final), record_write.staged(final)
    if not staged.exists() and final.is_dir():
        shutil.copytree(final, staged)
    return staged


def _finished(record: Path) -> bool:
    try:
        return json.loads(record.read_text()).get("status") in FINISHED
    except (OSError, ValueError, AttributeError):
        return False


def _replace(staged: Path, final: Path) -> list[Path]:
    """`staged` renamed to `final`; returns the earlier folder moved aside (for removal)."""
    aside = []
    if final.is_dir() and not final.is_symlink():
        old = final.with_name(f".{final.name}.replaced-{os.getpid()}")
        final.rename(old)
        aside.append(old)
    if staged.exists():
        os.replace(staged, final)
    return aside


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM noted, not acted on, until the renames are done, then raised again
    for the handlers that were there: an interrupt lands before the first rename or after the
    last, never between two (Python's handlers run in the main thread; elsewhere none is
    held)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in held}
    for s in held:
        signal.signal(s, lambda signum, _: caught.append(signum))
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)
