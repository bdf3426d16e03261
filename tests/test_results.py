"""The record envelope every mode writes, and the claim on a run id."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_config

from hpcai_jax import records, results
from hpcai_jax.errors import DiskFull, UsageError
from hpcai_jax.records import write as record_write


def test_envelope_is_the_same_for_every_mode():
    config = tiny_config()
    record = results.envelope(
        "flops", "x", "invalid", config, "why", flops={"a": 1}, peaks=None, compile_s=1.0
    )
    assert isinstance(record, records.FlopsRecord)
    layout = records.to_dict(record)
    assert list(layout)[:7] == [
        "schema_version",
        "run_id",
        "mode",
        "status",
        "reason",
        "config",
        "provenance",
    ]
    assert (record.run_id, record.mode, record.status, record.reason) == (
        "x",
        "flops",
        "invalid",
        "why",
    )
    assert record.schema_version == records.SCHEMA_VERSION == 2
    assert layout["flops"] == {"a": 1} and record.provenance.device_count == 8
    with pytest.raises(ValueError, match="status 'done'"):
        results.envelope("train", "x", "done", config)


def test_nodes_are_host_names_and_hold_their_processes_devices():
    # Two hosts, two processes each with two devices (launch/local.py's shape, twice).
    hosts = ["a", "a", "b", "b"]
    assert results.node_counts(hosts, [0, 0, 1, 1, 2, 2, 3, 3]) == (2, 4)
    assert results.node_counts(["a"], [0] * 8) == (1, 8)  # one process holding 8 devices
    provenance = results.provenance()
    assert (provenance.number_of_nodes, provenance.accelerators_per_node) == (1, 8)


def test_run_id_is_the_run_name_or_a_fresh_one():
    assert record_write.run_id(tiny_config(), "stream").startswith("stream-")
    import dataclasses

    from hpcai_jax import config as C

    named = dataclasses.replace(
        tiny_config(), results=C.ResultsConfig(run_name="mine", target_quality=0.9)
    )
    assert record_write.run_id(named, "flops") == "mine"


def test_a_record_is_claimed_once(tmp_path):
    results.claim(str(tmp_path), "a", overwrite=False)  # nothing there yet
    record = {"run_id": "a", "mode": "train", "status": "partial"}
    (tmp_path / "a.json").write_text(json.dumps(record))
    with pytest.raises(UsageError, match="already holds a record of run id a"):
        results.claim(str(tmp_path), "a", overwrite=False)
    results.claim(str(tmp_path), "a", overwrite=True)
    results.claim(str(tmp_path), "a", overwrite=False, resuming=True)  # its own partial record
    (tmp_path / "a.json").write_text(json.dumps({**record, "status": "complete"}))
    with pytest.raises(UsageError):
        results.claim(str(tmp_path), "a", overwrite=False, resuming=True)


def test_two_runs_given_the_same_results_directory(tmp_path):
    """Different run ids share a directory; the same run id is refused while its run lives
    (the second run would replace the first's record at its end), and free again once the
    record is written, with no lock file left behind."""
    first = results.claim(str(tmp_path), "same", overwrite=False)
    other = results.claim(str(tmp_path), "other", overwrite=False)
    with pytest.raises(UsageError, match=r"run id same is in use by another run \(pid \d+ on "):
        results.claim(str(tmp_path), "same", overwrite=True)  # --overwrite is for finished ones
    results.write_record(str(tmp_path), "same", {"run_id": "same", "mode": "train", "status": "x"})
    first.release()
    other.release()
    results.claim(str(tmp_path), "same", overwrite=True).release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.json"]


def test_a_full_disk_or_a_removed_directory_never_loses_a_record(tmp_path, monkeypatch):
    """The injection: the record's fsync fails with ENOSPC (any other file's is untouched).
    The record already there (a partial one, say) stays whole, no temp file is left, and the
    error is one line naming the path. A results directory removed during the run is made
    again when the record is written."""
    import errno
    import os

    results.write_record(str(tmp_path), "r", {"run_id": "r", "status": "partial"})
    before = (tmp_path / "r.json").read_bytes()
    fsync = os.fsync

    def full(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(record_write.os, "fsync", full)
    with pytest.raises(DiskFull) as error:
        results.write_record(str(tmp_path), "r", {"run_id": "r", "status": "complete"})
    needed = len(json.dumps({"run_id": "r", "status": "complete"}, indent=2)) + 1
    assert str(error.value) == (
        f"--results_dir={tmp_path}: no space left on device to write the record "
        f"{tmp_path}/r.json ({needed} bytes needed); nothing there was replaced"
    )
    assert error.value.exit_code == 74  # requeued (docs/reliability.md, Exit codes)
    assert (tmp_path / "r.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    monkeypatch.undo()

    gone = tmp_path / "removed"
    results.claim(str(gone), "r", overwrite=False)
    os.rmdir(gone)
    results.write_record(str(gone), "r", {"run_id": "r"})
    assert json.loads((gone / "r.json").read_text()) == {"run_id": "r"}
