"""`--mllog=PATH`: a training run's MLPerf-style `:::MLLOG` lines, for the MLPerf tools.

The log times the run on the record's own clock and appends across resumed segments, so that a
submission check can re-derive the record's figures from it. Which lines are written when, the
segments and the compliance checker's command: `docs/mllog.md`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from pathlib import Path

import jax
from absl import logging as absl_logging

from hpcai_jax import nodes, records, results, rules
from hpcai_jax.data import digest as data_digest
from hpcai_jax.errors import DiskFull, UsageError, disk_full, is_full
from hpcai_jax.records import Status, owned
from hpcai_jax.records import write as record_write

RULESET = Path(__file__).resolve().parents[1] / "mllog_rules" / "hpcai500.yaml"
INSTALL = "pip install 'mlperf-logging>=4.1,<5'"
_ROOT = str(Path(__file__).resolve().parents[2])  # trimmed from the lines' "file"
# Frames between MLLogger's caller lookup and the engine's call site: _log_helper, event (or start,
# end), _line, the public method; so each line's metadata names its caller's line (run/).
_CALLER_OFFSET = 3


def checker_command(log: str | Path, output: str | Path) -> list[str]:
    """The compliance checker's command line for `log` under the project's ruleset; `output` is
    where the checker writes its own log (by default compliance_checker.log in the cwd)."""
    return [
        sys.executable,
        "-m",
        "mlperf_logging.compliance_checker",
        "--usage=hpc",
        "--ruleset=3.0.0",
        f"--config={RULESET}",
        f"--log_output={output}",
        str(log),
    ]


class _KeptLines(logging.StreamHandler):
    """Writes each line to the log file and keeps it: a log file lost or cut during the run
    (its directory removed, a full disk, a file system gone read-only) is rewritten whole at the
    run's end (`MLLog._keep_complete`). A failed write is noted, not raised (logging's own
    handlers print "--- Logging error ---" and lose the line)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.lines: list[str] = []
        self.failed: str = ""

    def emit(self, record) -> None:
        line = self.format(record) + self.terminator
        self.lines.append(line)
        try:
            self.stream.write(line)
            self.stream.flush()
        except OSError as e:
            self.failed = self.failed or (e.strerror or str(e))


class MLLog:
    """The run's MLLOG writer; every method is a no-op without --mllog and on processes other
    than 0. The trainer (run/trainer.py) makes one call per phase (`start`, `init_stop`, `run_start`,
    `evaluated`, `run_stop`); run/clock.py's EpochTimer calls `epoch` as each epoch closes.
    Instants come as readings of the run clock (run/clock.py), so that the log and the record time the run
    alike."""

    def __init__(
        self,
        mllogger=None,
        stream=None,
        metric: str = "",
        clock=time.perf_counter,
    ):
        self._mllogger, self._stream, self._clock = mllogger, stream, clock
        self._anchor = (time.time(), clock())  # one wall-clock instant, as a clock reading
        self._metric = metric
        self._last_epoch = 0  # the last completed epoch (1-based)
        self._target = None
        self._segment: dict | None = None  # a resumed segment's segment_start metadata
        self._path: Path | None = None  # --mllog's partial name, until the run commits it
        self._final: Path | None = None  # --mllog
        self._earlier = ""  # what the file held when a resumed segment started appending
        self._kept: _KeptLines | None = None
        self._spare: Path | None = None  # where the log goes if --mllog cannot be written
        self.lost: DiskFull | None = None  # no space for the log anywhere (`_keep_complete`)
        self._unstarted = False  # a new run's log, its training not begun (`discard_unstarted`)

    @classmethod
    def start(
        cls,
        setup,
        wall_start: float,
        clock=time.perf_counter,
        run_id: str = "",
        resumed_at: int | None = None,
        lines_at_save: int = 0,
    ) -> MLLog:
        """Opens --mllog and logs the header; `wall_start` (a `clock` reading) is when the run
        started, its init_start. The lines go to the log's partial name (PATH.partial), which
        the run renames to PATH with its other outputs at its end (run/outputs.py). A run
        resumed at step `resumed_at` appends to its log where that log ends with its
        `segment_stop` at that step. Raises UsageError (one line, naming the flag) when the
        file cannot be written or mlperf-logging is not installed."""
        config = setup.config
        path = config.results.mllog
        if not path:
            return cls()
        # A collective, so every process gathers the host names before process 0 goes on alone.
        hosts = nodes.process_nodes()
        if jax.process_index() != 0:
            return cls()
        try:
            from mlperf_logging.mllog import mllog
        except ImportError:
            raise UsageError(
                f"--mllog={path}: needs the mlperf-logging package ({INSTALL})"
            ) from None
        spare = Path(config.reliability.checkpoint_dir or ".") / f"{run_id or 'run'}.mllog"
        # Where the lines go until the run commits its outputs (`staged`): never over, or in,
        # another run's partial log (record_write.fresh_stage, _resumed_stage).
        staged, append, lost = _continued(
            config, Path(path), spare, run_id, resumed_at, lines_at_save
        )
        stream = _opened(path, staged, append)
        handler = _KeptLines(stream)  # flushes every line, keeps it
        logger = logging.Logger(
            "hpcai_jax.telemetry.mllog"
        )  # unregistered: never reaches absl's root
        logger.addHandler(handler)
        writer = mllog.MLLogger(logger, default_stack_offset=_CALLER_OFFSET, root_dir=_ROOT)
        log = cls(writer, stream, setup.workload.metric, clock)
        log._path, log._final, log._kept = staged, Path(path), handler
        log._spare = spare
        if append:
            log._earlier = staged.read_text(encoding="utf-8")
            if lost:  # the lines after the checkpoint are lost work: the log ends at the save
                why = "the segment ended without its segment_stop; cut back to its last checkpoint"
                stop = {"run_id": run_id, "step": resumed_at, "reason": why}
                log._line("event", "segment_stop", resumed_at, stop)
            log._segment = _mesh(setup, hosts)
            log._last_epoch = resumed_at // setup.sampler.steps_per_epoch
            log._target = config.quality_target() if config.scored else None
        else:
            log._header(setup, log._ms(wall_start), hosts, run_id)
            log._unstarted = resumed_at is None
        return log

    def discard_unstarted(self) -> None:
        """A new run that ends before its training begins (an interrupt or an error in
        start-up) removes the log it began: header lines under a partial name that no run takes
        up (the same command is a new run again, and a new run never continues another's
        partial log), left beside the user's files. A resumed run's log, or one whose training
        began, is kept."""
        if not self._unstarted or self._path is None:
            return
        self._unstarted = False
        with contextlib.suppress(OSError):
            self._stream.close()
        self._mllogger, self._kept = None, None
        with contextlib.suppress(OSError):
            self._path.unlink(missing_ok=True)

    def line_count(self) -> int:
        """Lines the log holds now (0 without one): a checkpoint saves it (run/hooks.py)."""
        if self._kept is None:
            return 0
        return len(self._earlier.splitlines()) + len(self._kept.lines)

    def _ms(self, reading: float) -> int:
        """A clock reading as milliseconds since the Unix epoch, as MLLOG lines carry."""
        wall, at = self._anchor
        return int((wall + reading - at) * 1e3)

    def _line(self, kind: str, key: str, value=None, metadata=None, time_ms=None, depth=0) -> None:
        """One line: kind is event, start (INTERVAL_START) or end (INTERVAL_END), at `time_ms`
        (default: now on the clock); `depth` counts the frames between the public method and this
        call."""
        write = getattr(self._mllogger, kind)
        time_ms = self._ms(self._clock()) if time_ms is None else time_ms
        write(key, value, metadata, time_ms=time_ms, stack_offset=_CALLER_OFFSET + depth)

    def _here(self, key: str, value=None, metadata=None, kind: str = "event", time_ms=None) -> None:
        """A line this module adds of its own (the header, the figures), not a phase the engine
        calls: its `file` and `lineno` are this call of `_here`, one per key, where the value is
        read. A phase's lines name the engine's call (run/)."""
        self._line(kind, key, value, metadata, time_ms)

    def _header(self, setup, start_ms: int, hosts: list[str], run_id: str = "") -> None:
        """The run's start (cache_clear, init_start: at `start_ms`, naming the run id that
        `submission pack` matches with the record's), then the submission, the system and the
        settings, in time order, each line at its own call site."""
        config = setup.config
        self._target = config.quality_target() if config.scored else None
        # hpcai_jax drops no OS cache; a launch script that does may log its own cache_clear.
        self._here("cache_clear", False, time_ms=start_ms)
        self._here("init_start", None, {"run_id": run_id}, kind="start", time_ms=start_ms)
        mesh = _mesh(setup, hosts)
        self._submission(setup, mesh)
        self._settings(setup, mesh)
        self._optimizer(config.optim, config.train.batch_size)

    def _submission(self, setup, mesh: dict) -> None:
        config, results = setup.config, setup.config.results
        workload, layout = config.model.workload, setup.layout
        benchmark = {"model": config.model.model, "dataset": config.data.dataset}
        submission = rules.of_setup(setup)  # the record's division, by the same rules
        violations = {"violations": list(submission.violations)}
        kind = next(iter(setup.mesh.devices.flat)).device_kind
        platform = results.submission_platform or f"{layout.num_devices}x{kind}"
        self._here("submission_benchmark", f"hpcai500_{workload}", benchmark)
        self._here("submission_org", results.submission_org or "unspecified")
        self._here("submission_division", submission.division, violations)
        self._here("submission_platform", platform)
        self._here("submission_status", results.submission_status)
        self._here("number_of_nodes", mesh["number_of_nodes"])
        self._here("accelerators_per_node", mesh["accelerators_per_node"])

    def _settings(self, setup, mesh: dict) -> None:
        m, b = setup.layout.ensemble_size, setup.config.train.batch_size
        self._here("seed", setup.config.train.seed)
        self._here("number_of_models", m)
        self._here("per_model_batch_size", b)
        self._here("global_batch_size", m * b)
        self._here("members_per_device", mesh["members_per_device"])
        self._here("parallel_degree", mesh["parallel_degree"])
        self._here("model_parallel", mesh["model_parallel"])
        self._here("number_of_devices", mesh["number_of_devices"])
        self._here("train_samples", setup.sampler.num_examples)
        if setup.datasets is not None and setup.datasets.eval is not None:
            self._here("eval_samples", len(setup.datasets.eval))
        # Which bytes the splits were read from (data/digest.py): a package states its data.
        splits = data_digest.digest(setup.config.data)
        train = next((v["sha256"] for v in splits.values() if isinstance(v, dict)), None)
        self._here("data_digest", train, splits)

    def _optimizer(self, optim, b: int) -> None:
        peak = optim.learning_rate * b / optim.lr_reference_batch  # the linear scaling rule
        scaling = {
            "learning_rate": optim.learning_rate,
            "reference_batch": optim.lr_reference_batch,
        }
        self._here("opt_name", optim.optimizer)
        self._here("opt_base_learning_rate", peak, scaling)
        self._here("opt_learning_rate_warmup_epochs", optim.warmup_epochs)
        self._here("opt_learning_rate_decay_schedule", optim.lr_schedule)
        self._here("opt_momentum", optim.momentum)
        self._here("opt_weight_decay", optim.weight_decay)
        self._here("label_smoothing", optim.label_smoothing)
        if optim.lr_schedule == "warmup_polynomial":
            self._here("opt_learning_rate_decay_poly_power", optim.lr_decay_power)
            self._here("opt_end_learning_rate", optim.lr_end_value)
        if optim.optimizer == "lars":
            self._here("lars_opt_trust_coefficient", optim.lars_trust_coefficient)

    def init_stop(self, flops_per_step: float | None = None, source: str = "") -> None:
        """Start-up is over: the compiled step's FLOPs (what FLOPS uses; docs/score.md §4), then
        init_stop (for a resumed segment, both go into its segment_start)."""
        if self._segment is not None:
            if flops_per_step is not None:
                self._segment.update(flops_per_step=float(flops_per_step), flops_source=source)
        elif self._mllogger:
            if flops_per_step is not None:
                self._here("flops_per_step", float(flops_per_step), {"source": source})
            self._line("end", "init_stop")

    def run_start(self, first_step: int, at: float) -> None:
        """Before the first step (`first_step` > 0 on a resumed run); `at` is the clock reading
        time to target counts from (a segment's own start, for a resumed segment)."""
        self._unstarted = False
        if self._segment is not None:
            meta = {"first_step": first_step, **self._segment}
            self._line("event", "segment_start", first_step, meta, self._ms(at))
            self._segment["first_step"] = first_step
        elif self._mllogger:
            meta = {"first_step": first_step}
            self._line("start", "run_start", metadata=meta, time_ms=self._ms(at))

    def epoch(self, epoch: dict, start: float, end: float) -> None:
        """A completed epoch (run/clock.py's entry), booked between clock readings `start`
        and `end`: its epoch_start and epoch_stop lines, at those readings."""
        if not self._mllogger:
            return
        index, first, steps = epoch["index"], epoch["first_step"], epoch["steps"]
        self._line("start", "epoch_start", None, {"epoch_num": index}, self._ms(start), depth=1)
        stop = {"epoch_num": index, "step_num": first + steps, "first_step": first, "steps": steps}
        if self._segment is not None and first < self._segment.get("first_step", 0):
            stop["earlier_segments_s"] = epoch["wall_s"] - (end - start)
        self._line("end", "epoch_stop", None, stop, self._ms(end), depth=1)
        self._last_epoch = index

    def evaluated(self, quality, start: float, end: float) -> None:
        """The ensemble's held-out quality, evaluated between clock readings `start` and `end`,
        after the last closed epoch."""
        if not self._mllogger or quality is None:
            return
        epoch = {"epoch_num": self._last_epoch}
        self._line("start", "eval_start", None, epoch, self._ms(start))
        self._line("end", "eval_stop", None, epoch, self._ms(end))
        about = {**epoch, "metric": self._metric, "member_mean": quality.member_mean}
        if self._target is not None:
            about["target"] = self._target.target
        # Known at the evaluation's end: at eval_stop's time, so the next epoch, which starts
        # after it (run/clock.py), follows it in time too.
        self._line("event", "eval_accuracy", float(quality.ensemble), about, self._ms(end))

    def weights_kept(self, digest: str, metadata: dict) -> None:
        """The digest of the members' final weights (run/kept_weights.py), so that a package's copy of
        them can be told from another set (`submission check --reevaluate`)."""
        if self._mllogger:
            self._line("event", "weights_digest", digest, metadata)

    def run_stop(self, record: dict | records.TrainRecord, resumable: bool = False) -> None:
        """After the record (typed, or its JSON layout) is written: the benchmark's figures,
        then run_stop (`outcome`), or segment_stop where a checkpoint lets the run go on;
        closes the file."""
        if not self._mllogger:
            return
        r = records.read(record) if isinstance(record, dict) else record
        if resumable:
            step = r.timing.steps
            stop = {"run_id": r.run_id, "step": step, "reason": r.reason}
            self._line("event", "segment_stop", step, stop)
            self._close()
            return
        metrics, quality = r.metrics, r.quality
        if metrics.flops_per_s is not None:
            about = {
                "per_step": r.flops.per_step,
                "source": r.flops.source,
                "epochs": len(r.epochs),
            }
            self._here("flops_per_s", float(metrics.flops_per_s), about)
        if metrics.vflops_per_s is not None:
            about = {
                "metric": quality.metric,
                "target": quality.target,
                "exponent": quality.exponent,
                "quality": quality.ensemble,
                "penalty": metrics.penalty,
            }
            self._here("vflops_per_s", float(metrics.vflops_per_s), about)
        self._line("end", "run_stop", metadata={**outcome(r), "run_id": r.run_id})
        self._close()

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.close()
        self._mllogger = None
        self._keep_complete()

    def _keep_complete(self) -> None:
        """The file at --mllog's partial name holds every line this run wrote, or is rewritten
        whole (atomically, its directory made again); where it cannot be, the whole log goes to
        the spare path
        (--checkpoint_dir/<run id>.mllog, else ./) and one line names it: a resumed run takes
        it from there (`start`), so the run stays packable."""
        if self._kept is None or self._path is None:
            return
        text = self._earlier + "".join(self._kept.lines)
        try:
            if not self._kept.failed and self._path.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        why = self._kept.failed or "the file was removed or cut during the run"
        full = False
        for target in (self._path, self._spare):
            if target == self._spare and (what := owned.foreign_log(target)):
                why = f"{why}; {target} is {what}, not replaced"  # records/owned.py
                continue
            try:
                record_write.write_text_atomically(target, text)
            except OSError as e:
                why, full = f"{why}; {target}: {e.strerror or e}", full or is_full(e)
                continue
            print(
                f"hpcai_jax: warning: --mllog={self._final or self._path}: {why}; the whole log was written "
                f"again to {target}",
                file=sys.stderr,
                flush=True,
            )
            return
        if full:  # the run raises it once its record is in (run/trainer.py): exit 74
            flag, size = f"--mllog={self._final or self._path}", len(text.encode())
            self.lost = disk_full(flag, "the log", self._path, size, f"nor at {self._spare}")
            return
        print(
            f"hpcai_jax: error: --mllog={self._final or self._path}: {why}",
            file=sys.stderr,
            flush=True,
        )


_PREFIX = owned.MLLOG_PREFIX


def outcome(r: records.TrainRecord) -> dict:
    """run_stop's metadata as MLPerf reads it: `success` only where an evaluation reached the
    target, else `aborted` with the reason. `record_status` is the record's: a complete run that
    missed its target is still scored (VFLOPS with its penalty), an invalid or preempted one is
    not (docs/mllog.md)."""
    q, status = r.quality, {"record_status": r.status}
    if r.status != Status.COMPLETE:
        return {"status": "aborted", "reason": r.reason or f"the run is {r.status}", **status}
    best = max((p.ensemble for p in q.curve if p.ensemble is not None), default=None)
    if q.target is None:
        why = "no quality target (no held-out quality)"
    elif best is None:  # none evaluated, or each one's quality undefined (R² of one example)
        undefined = f"quality undefined in {len(q.curve)} evaluation(s)"
        why = f"target {q.target:g} not reached: {undefined if q.curve else 'no evaluation'}"
    elif best >= q.target:
        return {"status": "success", **status}
    else:
        final = q.ensemble if q.ensemble is not None else best
        why = f"target {q.target:g} not reached: ensemble {final:g}"
        why += f" (best {best:g})" if best > final else ""
    return {"status": "aborted", "reason": why, **status}


def _mesh(setup, hosts: list[str]) -> dict:
    """The machine this segment runs on, as the header and segment_start state it (with the
    members it trains: fewer after a --resume_members=fit resume)."""
    layout = setup.layout
    devices = list(setup.mesh.devices.flat)
    count, per_node = results.node_counts(hosts, [d.process_index for d in devices])
    return {
        "number_of_models": layout.ensemble_size,
        "global_batch_size": layout.ensemble_size * setup.config.train.batch_size,
        "number_of_nodes": count,
        "accelerators_per_node": per_node,
        "members_per_device": layout.members_per_device,
        "parallel_degree": layout.parallel_degree,
        "model_parallel": layout.model_parallel,
        "number_of_devices": layout.num_devices,
    }


def _final(path: Path) -> Path:
    """--mllog's own name for `path`, which may be its partial name (PATH.partial)."""
    return path.with_name(path.name.removesuffix(record_write.PARTIAL))


def _keep_earlier(
    path: Path, overwrite: bool, resumed_at: int | None, final: Path | None = None
) -> None:
    """Before a log is started at `path` (or its partial name): a log already there is another
    run's (refused, as its record would be, unless --overwrite) or, for a resumed run, this
    run's own from a segment that ended without its segment_stop (moved aside to
    PATH.before-step-K, named in a warning). Nothing written is lost either way. `final`: the
    name --mllog gave, where `path` is a staged name of it."""
    final = final or _final(path)
    try:
        if path.stat().st_size == 0:
            return
    except OSError:
        return  # none there (or unreadable: the open that follows names the problem)
    if overwrite:
        return
    if resumed_at is None:
        raise UsageError(
            f"--mllog={final}: the file holds another run's log; give another path, or "
            "--overwrite to replace it"
        )
    aside = path.with_name(f"{final.name}.before-step-{resumed_at}")
    try:
        path.replace(aside)
    except OSError as e:
        raise UsageError(
            f"--mllog={final}: cannot move the earlier log aside ({e.strerror})"
        ) from None
    logging.warning(
        "--mllog=%s does not end with this run's segment_stop at step %d: it was moved to %s "
        "and the resumed run starts a log of its own",
        final,
        resumed_at,
        aside,
    )


def _continued(
    config, path: Path, spare: Path, run_id: str, resumed_at: int | None, lines_at_save: int
) -> tuple[Path, bool, bool]:
    """(staged, append, lost) for the log of --mllog=`path`, written at `staged` until the run
    commits: a resumed segment appends to its own log (the partial one an interrupted segment
    left, else a copy of the one at `path`), cut back to its checkpoint where it died without
    its segment_stop (`lost`: a SIGKILL, a node); any other run keeps or refuses the log at
    `path` (`_keep_earlier`) and starts a new one, which replaces it only once the run commits
    its outputs."""
    refuse_foreign(path)
    if resumed_at is None:
        _keep_earlier(path, config.results.overwrite, None)
        staged = record_write.fresh_stage(path)
        refuse_foreign(path, staged)  # a link or a folder at PATH.<pid>.partial, too
        return staged, False, False
    staged, segment = _resumed_stage(path, run_id), (run_id, resumed_at)
    refuse_foreign(path, staged)
    _take_up(path, staged)
    _recover(staged, spare, segment)
    lost = _cut_to_save(staged, segment, lines_at_save, path)
    append = lost or _open_segment(staged) == segment
    if not append:
        _keep_earlier(staged, config.results.overwrite, resumed_at, path)
    return staged, append, lost


def _resumed_stage(path: Path, run_id: str) -> Path:
    """Where a resumed run stages its log: the partial name where the log there is this run's
    (or none is there), else its own `PATH.<pid>.partial` (record_write.fresh_stage), to which
    the log an earlier segment of this run left under its process's id is moved. Another run's
    partial log (one killed before its commit) is never taken up, cut or appended to."""
    partial = record_write.staged(path)
    named = _log_run_id(partial)
    if named == run_id:
        return partial
    own = record_write.fresh_stage(path)
    earlier = [
        p
        for p in record_write.pid_stages(path)
        if p != own and not owned.foreign_log(p) and _log_run_id(p) == run_id
    ]
    if earlier:
        latest = max(earlier, key=lambda p: p.stat().st_mtime)
        try:
            latest.replace(own)
        except OSError as e:
            raise UsageError(f"--mllog={path}: cannot take up {latest} ({e.strerror})") from None
        return own
    return partial if named is None else own  # a log that names no run: as before, continued


_HEADER_LINES = 8  # a log's init_start is its second line (cache_clear, then init_start)


def _log_run_id(path: Path) -> str | None:
    """The run id the log at `path` names in its init_start, read from its first lines (a
    regular file only, never through a link); None where there is none to read."""
    try:
        if not path.is_file() or path.is_symlink():
            return None
        with path.open(encoding="utf-8") as lines:
            for _ in range(_HEADER_LINES):
                line = lines.readline(1 << 16)
                if not line.startswith(_PREFIX):
                    continue
                entry = json.loads(line[len(_PREFIX) :])
                if isinstance(entry, dict) and entry.get("key") == "init_start":
                    meta = entry.get("metadata")
                    run_id = meta.get("run_id") if isinstance(meta, dict) else None
                    return run_id if isinstance(run_id, str) else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return None


def refuse_foreign(path: Path, *staged: Path) -> None:
    """--mllog (or its partial name, or the `staged` names the run writes) holding a
    directory, a link or a file that is not an MLLOG: one line, whatever --overwrite says
    (records/owned.py)."""
    for name in (path, record_write.staged(path), *staged):
        if what := owned.foreign_log(name):
            shown = "" if name == path else f": {name}"
            raise UsageError(
                f"--mllog={path}{shown} is {what}, not an MLLOG this run may replace: give "
                "another file path"
            )


def _take_up(path: Path, staged: Path) -> None:
    """A resumed run continues the partial log an interrupted segment left, else a copy of the
    committed one at `path` (which stays as it is until the run commits)."""
    try:
        if (staged.is_file() and staged.stat().st_size) or not path.is_file():
            return
        record_write.write_text_atomically(staged, path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--mllog={path}: cannot take the log up ({e})") from None


def _opened(path: str, staged: Path, append: bool):
    """The log file of --mllog=`path` at its partial name `staged`, opened for the run (one line
    on stderr and exit 2 where it cannot be; 74 where the disk is full)."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return open(staged, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - run-long
    except OSError as e:
        if is_full(e):
            raise disk_full(f"--mllog={path}", "the log", staged) from None
        raise UsageError(f"--mllog={path}: cannot write the file ({e.strerror})") from None


def _recover(path: Path, spare: Path, segment: tuple[str, int]) -> None:
    """A resumed run whose log could not be written at --mllog last time takes the whole log
    from the spare path (`MLLog._keep_complete`) where that one ends the segment it resumes."""
    if _open_segment(path) == segment or _open_segment(spare) != segment:
        return
    try:
        record_write.write_text_atomically(path, spare.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--mllog={path}: cannot write the file ({e.strerror or e})") from None
    absl_logging.warning("--mllog=%s: the log taken again from %s", _final(path), spare)


def _cut_to_save(
    path: Path, segment: tuple[str, int], lines_at_save: int, final: Path | None = None
) -> bool:
    """Whether the log at `path` was cut back to its `lines_at_save` lines, those of the
    checkpoint that resumes: the segment after it died without a segment_stop (killed), so its
    later lines are work the resumed run does again. Only a log that holds at least those lines
    and does not already end the segment is cut (the cut part is kept beside it, named after
    `final`, the name --mllog gave)."""
    if not lines_at_save or _open_segment(path) == segment:
        return False
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return False
    if len(lines) < lines_at_save:
        return False
    final = final or _final(path)
    try:
        final.with_name(final.name + ".lost").write_text("".join(lines[lines_at_save:]))
        record_write.write_text_atomically(path, "".join(lines[:lines_at_save]))
    except OSError as e:
        raise UsageError(f"--mllog={final}: cannot write the file ({e.strerror or e})") from None
    absl_logging.warning(
        "--mllog=%s: the segment after step %d ended without its segment_stop; the log is cut "
        "back to the checkpoint's %d lines (the rest kept in %s.lost)",
        final,
        segment[1],
        lines_at_save,
        final.name,
    )
    return True


def _open_segment(path: Path) -> tuple[str, int] | None:
    """(run id, step) of the segment_stop that ends the log at `path`, or None where the log is
    missing, unreadable or ends otherwise (finished, died, another run's)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    last = next((line for line in reversed(lines) if line.startswith(_PREFIX)), None)
    try:
        entry = json.loads(last[len(_PREFIX) :]) if last else {}
    except ValueError:
        return None
    meta = entry.get("metadata") or {}
    if entry.get("key") != "segment_stop":
        return None
    return meta.get("run_id"), meta.get("step")
