"""What --overwrite replaces (docs/reliability.md, "What --overwrite replaces"): a run's outputs
are replaced only where they hold this project's own record, MLLOG, events or kept weights,
told by their content; a directory, a link or another file under an output's name is refused
in one line, with or without --overwrite, before any compute, and every byte of it is kept. And
a new run never replaces an earlier run's partial log before it commits its own outputs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import TINY
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax.errors import UsageError
from hpcai_jax.records import owned
from hpcai_jax.records import write as record_write

LOG_LINE = (
    ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "%s", '
    '"metadata": {"file": "hpcai_jax/telemetry/mllog.py", "lineno": 1}}'
)
OUR_LOG = "\n".join(LOG_LINE % key for key in ("submission_benchmark", "run_stop")) + "\n"
OUR_RECORD = json.dumps({"schema_version": 2, "run_id": "mine", "mode": "train", "status": "x"})


def _sums(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (and of `root` itself where it is a file)."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _logs_folder(tmp_path: Path) -> Path:
    """The issue's: a folder of a user's logs, given as --mllog."""
    _write(tmp_path / "logs" / "run1.mllog", "a\n")
    _write(tmp_path / "logs" / "older" / "run0.mllog", "b\n")
    return tmp_path / "logs"


def _notes(tmp_path: Path) -> Path:
    return _write(tmp_path / "notes.txt", "my notes on the runs\n")


def _record_folder(tmp_path: Path) -> Path:
    """A directory named like the run's record."""
    return _write(tmp_path / "r" / "mine.json" / "keep.txt", "mine\n").parent


def _foreign_json(tmp_path: Path) -> Path:
    return _write(tmp_path / "r" / "mine.json", json.dumps({"run_id": "mine", "notes": "a"}))


def _weights_folder(tmp_path: Path) -> Path:
    """A folder named like the run's kept weights that orbax did not write."""
    return _write(tmp_path / "r" / "mine.weights" / "keep.txt", "mine\n").parent


def _events_folder(tmp_path: Path) -> Path:
    return _write(tmp_path / "r" / "tensorboard" / "mine" / "keep.txt", "mine\n").parent


# (what is there, the flag that names it, what the line says it is)
CASES = {
    "log folder": (_logs_folder, "--mllog", "is a directory, not an MLLOG"),
    "notes file as the log": (
        _notes,
        "--mllog",
        "is a file of other lines than :::MLLOG ones, not an MLLOG",
    ),
    "folder named like the record": (_record_folder, "", "mine.json is a directory"),
    "JSON that is no record": (
        _foreign_json,
        "",
        "is JSON without a record's run_id, mode and status, not a record",
    ),
    "folder named like the weights": (
        _weights_folder,
        "",
        "is a directory without an orbax checkpoint in it, not kept weights",
    ),
    "folder named like the events": (
        _events_folder,
        "",
        "holding other files than TensorBoard events (keep.txt), not",
    ),
}


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
@pytest.mark.parametrize("case", list(CASES))
def test_what_the_project_did_not_write_survives_overwrite(tmp_path, case, overwrite):
    """Each is refused in one line naming what it is, exit 2, before any compute, with or
    without --overwrite, and no line recommends --overwrite; every file is byte for byte (sha256)
    what it was, and no record, log or partial file of the run is left."""
    make, flag, what = CASES[case]
    there = make(tmp_path)
    before = _sums(there)
    mllog = there if flag == "--mllog" else tmp_path / "run.mllog"
    proc = run_in_process(
        *TINY,
        f"--results_dir={tmp_path}/r",
        "--run_name=mine",
        f"--mllog={mllog}",
        *(["--overwrite"] if overwrite else []),
    )
    assert_one_line_error(proc, str(there), what)
    assert "--overwrite" not in proc.stderr.splitlines()[-1]
    assert _sums(there) == before and before
    assert not list(tmp_path.rglob("*.partial")) and not (tmp_path / "run.mllog").exists()


def test_a_symbolic_link_is_never_an_output(tmp_path):
    target = _notes(tmp_path)
    link = tmp_path / "link.mllog"
    link.symlink_to(target)
    assert owned.foreign_log(link) == owned.foreign_record(link) == "a symbolic link"
    proc = run_in_process(
        *TINY, f"--results_dir={tmp_path}/r", f"--mllog={link}", "--overwrite", "--steps=1"
    )
    assert_one_line_error(proc, f"--mllog={link} is a symbolic link")
    assert link.is_symlink() and target.read_text() == "my notes on the runs\n"


def test_the_projects_own_outputs_are_recognised_by_content(tmp_path):
    """What --overwrite may replace: every shipped record, a log of :::MLLOG lines (its last
    cut short, as a killed run leaves it), an empty file, orbax's folder, a folder of events;
    not a log with another line in it, a record without its envelope, another folder."""
    shipped = sorted((ROOT / "docs" / "example_report" / "records").glob("*.json"))
    assert shipped and all(owned.foreign_record(p) == "" for p in shipped)
    assert owned.foreign_record(_write(tmp_path / "ours.json", OUR_RECORD)) == ""
    assert owned.foreign_record(tmp_path / "none.json") == ""
    assert owned.foreign_log(_write(tmp_path / "a.mllog", OUR_LOG)) == ""
    assert owned.foreign_log(_write(tmp_path / "cut.mllog", OUR_LOG + ':::MLLOG {"na')) == ""
    assert owned.foreign_log(_write(tmp_path / "empty.mllog", "")) == ""
    assert owned.foreign_log(_write(tmp_path / "b.mllog", OUR_LOG + "my note\n"))
    assert owned.foreign_log(_write(tmp_path / "c.mllog", ":::MLLOG not json\n"))
    theirs = OUR_LOG.replace("hpcai_jax/telemetry/mllog.py", "train.py")  # another benchmark's
    assert owned.foreign_log(_write(tmp_path / "d.mllog", theirs)).startswith("an MLLOG another")
    for other in ({"run_id": "r", "mode": "other_tool", "status": "ok"}, {"run_id": "r"}):
        assert owned.foreign_record(_write(tmp_path / "e.json", json.dumps(other)))
    assert owned.foreign_record(_write(tmp_path / "list.json", "[1, 2]"))
    assert owned.foreign_weights(_write(tmp_path / "w" / "_CHECKPOINT_METADATA", "{}").parent) == ""
    assert (
        owned.foreign_events(_write(tmp_path / "e" / "events.out.tfevents.1.h", "x").parent) == ""
    )
    assert owned.foreign_events(_write(tmp_path / "f" / "other", "x").parent)


def test_a_new_run_never_replaces_an_earlier_runs_partial_log(tmp_path, monkeypatch):
    """The issue's exit-130 case: an earlier run's log at --mllog's partial name (a run
    interrupted before its commit, which its resume continues) is byte for byte what it was
    after a new --overwrite run that stops in its start-up; the new run's lines were at a name
    of its own, `PATH.<pid>.partial`, which its commit would have renamed to PATH, and which it
    removes as it stops before its training began (telemetry/mllog.discard_unstarted)."""
    from hpcai_jax.engine.setup import RunSetup
    from hpcai_jax.telemetry import mllog

    log = _write(tmp_path / "logs" / "small.mllog", OUR_LOG)
    earlier = _write(record_write.staged(log), OUR_LOG.replace("run_stop", "segment_stop"))
    before = _sums(tmp_path / "logs")

    def stopped(self):
        raise RuntimeError("injected: the run stops in its start-up")

    own = []
    discard = mllog.MLLog.discard_unstarted

    def seen(self):
        own.append((self._path, "init_start" in self._path.read_text()))
        discard(self)

    monkeypatch.setattr(RunSetup, "init_state", stopped)
    monkeypatch.setattr(mllog.MLLog, "discard_unstarted", seen)
    with pytest.raises(RuntimeError, match="injected"):
        run_in_process(*TINY, f"--results_dir={tmp_path}/r", f"--mllog={log}", "--overwrite")
    assert _sums(tmp_path / "logs") == before
    [(path, started)] = own
    assert path.name == f"small.mllog.{os.getpid()}.partial" and started and not path.exists()
    assert earlier.read_text().endswith('"lineno": 1}}\n') and "segment_stop" in earlier.read_text()


def test_the_spare_path_of_a_log_never_replaces_a_users_file(tmp_path, capsys):
    """Where --mllog cannot be written, the whole log goes to the spare path
    (--checkpoint_dir/<run id>.mllog, else ./<run id>.mllog), unless a file of a user's is
    there: then it is kept as it was and the error line says so."""
    import io

    from hpcai_jax.telemetry import mllog

    blocker = _write(tmp_path / "blocker", "a file where the log's folder should be")
    spare = _notes(tmp_path)
    log, kept = mllog.MLLog(), mllog._KeptLines(io.StringIO())
    kept.lines, kept.failed = [OUR_LOG], "Read-only file system"
    log._kept, log._spare = kept, spare
    log._final, log._path = blocker / "run.mllog", blocker / "run.mllog.partial"
    log._keep_complete()
    assert spare.read_text() == "my notes on the runs\n"
    err = capsys.readouterr().err
    assert f"{spare} is a file of other lines than :::MLLOG ones, not replaced" in err


@pytest.mark.parametrize("name", ["mine.json", "mine.json.partial"])
def test_every_mode_refuses_a_folder_named_like_its_record(tmp_path, name):
    """records/write.claim, which the train, stream, flops and check modes call before any
    compute: a folder under the record's name or its partial name is refused with
    --overwrite too, and kept."""
    folder = _write(tmp_path / name / "keep.txt", "mine\n").parent
    before = _sums(folder)
    with pytest.raises(UsageError, match=rf"{name} is a directory, not a record") as error:
        record_write.claim(str(tmp_path), "mine", overwrite=True)
    assert "--overwrite" not in str(error.value) and _sums(folder) == before
    assert not (tmp_path / ".mine.lock").exists()  # nothing of the run left
