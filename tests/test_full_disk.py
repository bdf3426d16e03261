"""A full disk is one line and a requeue (docs/reliability.md, Exit codes and Faults): every write
of a run that finds no space (ENOSPC) or no quota (EDQUOT) ends it with one line naming the path
and the bytes it needed, exit 74, which the sbatch scripts requeue; no temporary folder is left;
the record is still written where it fits. The record's and the checkpoints' cases are in
test_results.py and test_reliability.py; the sbatch scripts' in test_launch_scripts.py."""

from __future__ import annotations

import contextlib
import errno
import json
import logging as std_logging
import os
import subprocess

import numpy as np
import pytest
from conftest import TINY
from helpers import assert_one_line_error, run_in_process

from hpcai_jax import errors
from hpcai_jax.errors import DiskFull
from hpcai_jax.run import kept_weights


def test_a_full_disk_is_told_from_other_errors_whatever_its_type():
    """orbax raises tensorstore's ValueError for it; Python an OSError; either may be wrapped."""
    assert errors.is_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert errors.is_full(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)))
    tensorstore = ValueError(
        'RESOURCE_EXHAUSTED: Error writing "params.w/0.0" ... Failed to write 961540 bytes to '
        "file 13: No space left on device [os_error_code='28']"
    )
    try:
        raise RuntimeError("a save failed") from tensorstore
    except RuntimeError as wrapped:
        assert errors.is_full(wrapped)
    assert not errors.is_full(OSError(errno.EACCES, os.strerror(errno.EACCES)))
    assert not errors.is_full(ValueError("RESOURCE_EXHAUSTED: out of memory"))
    assert DiskFull("x").exit_code == errors.NO_SPACE_EXIT_CODE == 74


def test_orbaxs_own_reports_of_a_full_disk_leave_the_log():
    """orbax logs a traceback per thread of a failed save (about 30 lines each): dropped, as the
    run's one line says it; its other errors and the engine's own lines stay."""
    from hpcai_jax import main

    def line(path: str, message: str) -> std_logging.LogRecord:
        return std_logging.LogRecord("absl", std_logging.ERROR, path, 1, message, None, None)

    full = "RESOURCE_EXHAUSTED: ... No space left on device [os_error_code='28']"
    assert not main._FULL_DISK.filter(line("/x/orbax/checkpoint/future.py", full))
    assert main._FULL_DISK.filter(line("/x/orbax/checkpoint/future.py", "another failure"))
    assert main._FULL_DISK.filter(line("/x/hpcai_jax/run/trainer.py", full))


@contextlib.contextmanager
def _small_tmpfs(where, size: str = "200k"):
    """A file system of `size` mounted at `where` (root only: skipped where it cannot be)."""
    where.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()[:120]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.slow  # mount and umount are processes
def test_weights_on_a_full_tmpfs_are_one_error_and_leave_no_folder(tmp_path, capfd):
    """A real full disk: 1 MiB of weights on a 200 KiB tmpfs. orbax's save fails inside
    tensorstore; the error names the folder and the bytes, nothing is left on the file system
    (neither the folder nor orbax's temporary one), and no traceback is printed."""
    w = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)  # no compression
    tree = {"params": {"w": w}, "model_state": {}}
    with _small_tmpfs(tmp_path / "full") as full:
        path = full / "run.weights.partial"
        error = kept_weights._saved_or_full(path, tree, str(full))
        assert str(error) == (
            f"--results_dir={full}: no space left on device to write the members' weights "
            f"{path} (1,048,576 bytes needed)"
        )
        assert os.listdir(full) == []
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.slow
def test_a_run_whose_weights_find_the_disk_full_still_writes_its_record(tmp_path, monkeypatch):
    """The issue's case, ENOSPC injected into the weights' save: one line naming the folder and
    the bytes, exit 74 (requeued), no folder of weights left; the small record is written and
    says why the weights were not kept, and the MLLOG names no weights."""

    def full(path, tree):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(kept_weights, "_save", full)
    results, log = tmp_path / "r", tmp_path / "run.mllog"
    proc = run_in_process(
        *TINY, "--steps=2", f"--results_dir={results}", "--run_name=full", f"--mllog={log}"
    )
    record = results / "full.json"
    assert_one_line_error(
        proc,
        f"--results_dir={results}: no space left on device to write the members' weights "
        f"{results}/full.weights.partial (",
        f"bytes needed); the record {record} is written without them",
        code=74,
    )
    written = json.loads(record.read_text())
    assert written["status"] == "complete"
    assert written["reason"].startswith("the members' weights were not kept: --results_dir=")
    assert not list(results.glob("*.weights*")) and not list(tmp_path.rglob("*.partial"))
    assert "weights_digest" not in log.read_text() and "run_stop" in log.read_text()


def test_a_log_with_no_space_anywhere_ends_the_run_as_a_full_disk(tmp_path, monkeypatch, capsys):
    """The MLLOG's lines are kept in memory and written again at the end; where neither
    --mllog's partial name nor the spare path has room, the run's one line (raised once its
    record is in) names the log and its bytes, exit 74, and nothing else is printed."""
    import io

    from hpcai_jax.telemetry import mllog

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    log, kept = mllog.MLLog(), mllog._KeptLines(io.StringIO())
    kept.lines, kept.failed = [':::MLLOG {"key": "run_stop"}\n'], os.strerror(errno.ENOSPC)
    final = tmp_path / "run.mllog"
    log._kept, log._final, log._spare = kept, final, tmp_path / "spare.mllog"
    log._path = final.with_name("run.mllog.partial")
    monkeypatch.setattr(mllog.record_write, "write_text_atomically", full)
    log._keep_complete()
    assert str(log.lost) == (
        f"--mllog={final}: no space left on device to write the log {log._path} (29 bytes "
        f"needed); nor at {tmp_path}/spare.mllog"
    )
    assert log.lost.exit_code == 74 and capsys.readouterr().err == ""
