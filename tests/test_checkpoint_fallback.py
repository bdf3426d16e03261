"""A resume past corrupt checkpoints (hpcai_jax/run/checkpoint.py, `_Corrupt`): the newest intact
one is restored, each corrupt one named in one log line and left in place until the run's first
save moves it aside; none intact ends in one line. docs/reliability.md, "Checkpoints and resume".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_one_line_error, run_in_process
from test_reliability import SHORT, _contents, _final_params, _leaves, _record

from hpcai_jax.errors import UsageError
from hpcai_jax.run.checkpoint import Checkpointer

# More than orbax's 1 KiB of inline values: the array lives in a data file of its own.
SIZE = 4096
ONE = jax.sharding.SingleDeviceSharding(jax.devices()[0])
ABSTRACT = {"w": jax.ShapeDtypeStruct((SIZE,), jnp.float32, sharding=ONE)}
# The run of test_reliability's preemption test (its compiled step is shared): 6 steps,
# checkpoints at steps 2, 4 and 6, all kept.
RUN = [*SHORT, "--steps=6", "--checkpoint_every=2", "--keep_checkpoints=3", "--run_name=whole"]


def _save(directory, steps, fingerprint=None):
    checkpointer = Checkpointer(
        str(directory), every=1, keep=5, fingerprint_value=fingerprint or {}
    )
    for step in steps:
        checkpointer.save(
            step, {"w": jnp.arange(SIZE) + float(step)}, {"step": step, "run_id": "r"}
        )
    checkpointer.close()


def _restore(directory):
    checkpointer = Checkpointer(str(directory), every=1, keep=5, fingerprint_value={})
    try:
        state, meta = checkpointer.restore(ABSTRACT)
    finally:
        checkpointer.close()
    return float(state["w"][0]), meta


def _largest_file(step_dir):
    files = [p for p in step_dir.rglob("*") if p.is_file()]
    return max(files, key=lambda p: p.stat().st_size)


def _edit_meta(step_dir, edit):
    path = step_dir / "meta" / "metadata"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def _steps(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def _truncate(path, keep=0.9):
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


# Each way a step can be corrupt (`_Corrupt`), and what the log line says of it.
FAULTS = {
    "orbax metadata missing": (
        lambda d: (d / "_CHECKPOINT_METADATA").unlink(),
        "its _CHECKPOINT_METADATA is missing",
    ),
    "orbax metadata unparsable": (
        lambda d: (d / "_CHECKPOINT_METADATA").write_text("{"),
        "its _CHECKPOINT_METADATA is unreadable (JSONDecodeError",
    ),
    "meta missing": (
        lambda d: shutil.rmtree(d / "meta"),
        "its meta is unreadable (FileNotFoundError: File ",
    ),
    "meta truncated": (
        lambda d: _truncate(d / "meta" / "metadata", 0.5),
        "its meta is unreadable (JSONDecodeError",
    ),
    "meta without its run id": (
        lambda d: _edit_meta(d, lambda m: m.pop("run_id")),
        "its meta does not match the digest saved with it (no run_id)",
    ),
    "meta of another step": (
        lambda d: _edit_meta(d, lambda m: m.update(step=7)),
        "its meta gives step 7",
    ),
    "array file truncated": (
        lambda d: _truncate(_largest_file(d / "state")),
        "its state is unreadable (ValueError: OUT_OF_RANGE",
    ),
    "array file missing": (
        lambda d: _largest_file(d / "state").unlink(),
        "its state is unreadable (",
    ),
    "array metadata truncated": (
        lambda d: _truncate(d / "state" / "_METADATA", 0.5),
        "its state is unreadable (JSONDecodeError",
    ),
    "state missing": (
        lambda d: shutil.rmtree(d / "state"),
        "its state is unreadable (FileNotFoundError",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_falls_back_to_the_previous_step(tmp_path, fault, caplog):
    damage, said = FAULTS[fault]
    _save(tmp_path, [1, 2, 3])
    damage(tmp_path / "3")
    before = _contents(tmp_path)
    with caplog.at_level("WARNING"):
        value, meta = _restore(tmp_path)
    assert (value, meta["step"], meta["run_id"]) == (2.0, 2, "r")
    (line,) = [r.getMessage() for r in caplog.records if "is corrupt" in r.getMessage()]
    assert line.startswith(f"--checkpoint_dir={tmp_path}: checkpoint of step 3 is corrupt ({said}")
    assert line.endswith(f"; left in place at {tmp_path}/3; falling back to step 2")
    assert _contents(tmp_path) == before  # nothing moved, removed or rewritten by the restore


def test_an_intact_checkpoint_restores_without_a_word(tmp_path, caplog):
    """The control of the test above: the same checkpoints undamaged give the newest step."""
    _save(tmp_path, [1, 2, 3])
    with caplog.at_level("WARNING"):
        value, meta = _restore(tmp_path)
    assert (value, meta["step"]) == (3.0, 3)
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()]


def test_the_first_save_after_a_fall_back_moves_the_corrupt_steps_aside(tmp_path, caplog):
    """Steps 3 and 2 corrupt: the restore falls back to 1. Without the move, saving step 2 again
    would keep the corrupt step 2 (a step on disk is kept) and every later resume would fall
    back past it; step 3 would count among --keep_checkpoints and be deleted with no word. The
    moved directories are no steps to orbax, and stay."""
    _save(tmp_path, [1, 2, 3])
    (tmp_path / "3" / "_CHECKPOINT_METADATA").unlink()
    _truncate(_largest_file(tmp_path / "2" / "state"))
    checkpointer = Checkpointer(str(tmp_path), every=1, keep=2, fingerprint_value={})
    with caplog.at_level("WARNING"):
        state, meta = checkpointer.restore(ABSTRACT)
        assert meta["step"] == 1 and _steps(tmp_path) == ["1", "2", "3"]
        checkpointer.save(2, {"w": jnp.arange(SIZE) + 20.0}, {"step": 2, "run_id": "r"})
        checkpointer.save(3, {"w": jnp.arange(SIZE) + 30.0}, {"step": 3, "run_id": "r"})
    checkpointer.close()
    moved = [r.getMessage() for r in caplog.records if "moved the corrupt" in r.getMessage()]
    aside = [p for p in _steps(tmp_path) if ".corrupt-" in p]
    assert [p.split(".")[0] for p in aside] == ["2", "3"]
    assert len(moved) == 2 and all(
        m.endswith("before saving step 2; remove it once inspected") for m in moved
    )
    assert f"checkpoint of step 3 aside to {tmp_path}/{aside[1]}" in moved[0]
    assert sorted(set(_steps(tmp_path)) - set(aside)) == ["2", "3"]  # --keep_checkpoints=2
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert _restore(tmp_path)[0] == 30.0  # the new step 3, nothing corrupt left to pass
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()]
    assert [p for p in _steps(tmp_path) if ".corrupt-" in p] == aside


def test_another_configuration_is_refused_not_fallen_back_past(tmp_path):
    """A checkpoint of another configuration is no damage: the directory is another run's."""
    _save(tmp_path, [1, 2], fingerprint={"train": {"seed": 0}})
    checkpointer = Checkpointer(
        str(tmp_path), every=1, keep=5, fingerprint_value={"train": {"seed": 5}}
    )
    with pytest.raises(UsageError) as error:
        checkpointer.restore(ABSTRACT)
    assert str(error.value) == (
        f"--checkpoint_dir={tmp_path}: checkpoint of step 2 was written by another "
        "configuration (train.seed: checkpoint 0, now 5); use another --checkpoint_dir"
    )


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run: checkpoints of steps 2, 4, 6 and its record."""
    folder = tmp_path_factory.mktemp("whole")
    proc = run_in_process(*RUN, f"--checkpoint_dir={folder}/ck", f"--results_dir={folder}/r")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _steps(folder / "ck") == ["2", "4", "6"]
    return folder


@pytest.mark.slow
def test_a_resume_falls_back_to_the_newest_intact_step_and_ends_as_the_whole_run(whole, tmp_path):
    """Step 6 truncated, step 4 without orbax's metadata: the resume falls back to step 2 (one
    line for each, naming it and where it falls back to), trains steps 3 to 6, moves both aside
    at its save of step 4, and ends with the uninterrupted run's parameters and quality."""
    shutil.copytree(whole / "ck", tmp_path / "ck")
    _truncate(_largest_file(tmp_path / "ck" / "6" / "state"), 0.5)
    (tmp_path / "ck" / "4" / "_CHECKPOINT_METADATA").unlink()
    ck = f"--checkpoint_dir={tmp_path}/ck"
    proc = run_in_process(*RUN, ck, f"--results_dir={tmp_path}/r")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "is corrupt (" in line]
    assert len(lines) == 2, lines
    assert "checkpoint of step 6 is corrupt (its state is unreadable (ValueError: " in lines[0]
    assert lines[0].endswith(f"left in place at {tmp_path}/ck/6; falling back to step 4")
    assert "checkpoint of step 4 is corrupt (its _CHECKPOINT_METADATA is missing); " in lines[1]
    assert lines[1].endswith(f"left in place at {tmp_path}/ck/4; falling back to step 2")
    moved = [line for line in proc.stderr.splitlines() if "moved the corrupt checkpoint" in line]
    assert len(moved) == 2 and all("before saving step 4" in line for line in moved)

    record, uninterrupted = _record(tmp_path / "r"), _record(whole / "r")
    assert record.status == "complete" and record.run_id == "whole"
    # Resumed the run whole from step 2 of 6.
    assert [r.at_step for r in record.resumes] == [2]
    assert record.timing.planned_steps == 6 and record.members.dropped == []
    for key in ("ensemble", "members", "oob"):
        assert getattr(record.quality, key) == getattr(uninterrupted.quality, key), key
    names = _steps(tmp_path / "ck")
    assert [n for n in names if ".corrupt-" not in n] == ["2", "4", "6"]
    assert sorted(n.split(".")[0] for n in names if ".corrupt-" in n) == ["4", "6"]
    step_a, params_a = _final_params(whole / "ck")
    step_b, params_b = _final_params(tmp_path / "ck")
    assert step_a == step_b == 6
    leaves_a, leaves_b = list(_leaves(params_a)), list(_leaves(params_b))
    assert len(leaves_a) == len(leaves_b) > 10
    for a, b in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_no_intact_checkpoint_ends_in_one_line(whole, tmp_path):
    """Every step damaged, step 2's meta stripped of its run id (refused, never resumed under
    another): one line naming each step and its fault, exit 2, no record, nothing moved."""
    shutil.copytree(whole / "ck", tmp_path / "ck")
    _truncate(_largest_file(tmp_path / "ck" / "6" / "state"), 0.5)
    shutil.rmtree(tmp_path / "ck" / "4" / "meta")
    _edit_meta(tmp_path / "ck" / "2", lambda m: m.pop("run_id"))
    before = _contents(tmp_path / "ck")
    ck = f"--checkpoint_dir={tmp_path}/ck"
    proc = run_in_process(*RUN, ck, f"--results_dir={tmp_path}/r")
    assert_one_line_error(
        proc,
        f"{ck}: every checkpoint there is unreadable (step 6: its state is unreadable (",
        f"; step 4: its meta is unreadable (FileNotFoundError: File {tmp_path}/ck/4/meta/metadata",
        "; step 2: its meta does not match the digest saved with it (no run_id)); each is left "
        "in place: move them away to start afresh",
    )
    assert _contents(tmp_path / "ck") == before
    assert not (tmp_path / "r").exists() or not os.listdir(tmp_path / "r")


# One process of a 2-process job (4 CPU devices each) on one checkpoint directory, which does
# what each line of its stdin asks, then says "done": "save" saves steps 1 and 2 of an array
# split over the 8 devices; "restore" restores the newest intact step, prints it with this
# process's first element, and saves step 2 anew (offset 20). Each with a Checkpointer of its
# own, as a job started anew would have: one job serves every phase of the test below.
_PROCESS = """
import json, sys
import jax
directory, port, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=index)
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from hpcai_jax.run.checkpoint import Checkpointer
sharding = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), PartitionSpec("d"))
n = 8 * 4096
def save(checkpointer, step, offset):
    values = np.arange(n, dtype=np.float32) + offset
    w = jax.make_array_from_callback((n,), sharding, lambda index: values[index])
    checkpointer.save(step, {"w": w}, {"step": step, "run_id": "r"})
for mode in sys.stdin:
    checkpointer = Checkpointer(directory, every=1, keep=5, fingerprint_value={})
    if mode.strip() == "save":
        save(checkpointer, 1, 1)
        save(checkpointer, 2, 2)
    else:
        abstract = {"w": jax.ShapeDtypeStruct((n,), np.float32, sharding=sharding)}
        state, meta = checkpointer.restore(abstract)
        first = float(np.asarray(state["w"].addressable_shards[0].data)[0])
        print(json.dumps({"step": meta["step"], "first": first}))
        save(checkpointer, 2, 20)
    checkpointer.close()
    sys.stderr.flush()
    print("done", flush=True)
"""


class _Job:
    """The two processes of `_PROCESS` on `directory`, started once; `phase` runs one phase in
    both. A hang kills them (after JOB_S), failing the test rather than the suite."""

    JOB_S = 300

    def __init__(self, directory, logs):
        from helpers import ROOT, subprocess_env
        from test_multiprocess import _free_port

        port = str(_free_port())
        self.logs = [logs / f"process_{index}.err" for index in range(2)]
        self.procs = []
        for index, log in enumerate(self.logs):
            with open(log, "w") as err:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", _PROCESS, str(directory), port, str(index)],
                        cwd=ROOT,
                        env=subprocess_env(4),
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                    )
                )
        self.read = [0, 0]  # how much of each process's stderr earlier phases took
        self.timer = threading.Timer(self.JOB_S, self.kill)
        self.timer.start()

    def kill(self):
        self.timer.cancel()
        for proc in self.procs:
            proc.kill()

    def phase(self, mode):
        """What each process printed (its restored step and value), and its stdout and stderr
        in this phase."""
        for proc in self.procs:
            proc.stdin.write(f"{mode}\n")
            proc.stdin.flush()
        outs = []
        for index, proc in enumerate(self.procs):
            out, line = [], ""
            for line in proc.stdout:
                if line == "done\n":
                    break
                out.append(line)
            text = self.logs[index].read_text()
            err, self.read[index] = text[self.read[index] :], len(text)
            assert line == "done\n", err[-3000:]  # else it ended (or hung) in the phase
            outs.append(("".join(out), err))
        printed = [[line for line in out.splitlines() if line.startswith("{")] for out, _ in outs]
        return [json.loads(lines[-1]) if lines else None for lines in printed], outs

    def close(self):
        """Ends both processes (their stdin closed) and checks that each exited 0."""
        try:
            for proc in self.procs:
                proc.stdin.close()
            codes = [proc.wait(timeout=self.JOB_S) for proc in self.procs]
            assert codes == [0, 0], [log.read_text()[-3000:] for log in self.logs]
        finally:
            self.timer.cancel()


@pytest.mark.multiprocess
def test_processes_agree_on_the_step_when_only_one_reads_the_damage(tmp_path):
    """Each process reads only its own devices' part of the state: a file damaged in step 2
    that process 1 alone reads fails there only. Both fall back to step 1 together (a process
    restoring step 2 while its peer restores step 1 would train a mixed state)."""
    directory = tmp_path / "ck"
    directory.mkdir()
    job = _Job(directory, tmp_path)
    try:
        job.phase("save")
        _truncate(_largest_file(directory / "2" / "state" / "ocdbt.process_1"), 0.5)  # its data
        results, outs = job.phase("restore")
        # Process 0's first element is element 0, process 1's element 4 * 4096, at step 1.
        assert results == [{"step": 1, "first": 1.0}, {"step": 1, "first": 1.0 + 4 * 4096}]
        assert "unreadable by process 1" in outs[0][1] and "its state is unreadable" in outs[1][1]
        # Their save of step 2: process 0 moved the corrupt one aside, and both see the new step.
        assert "moved the corrupt checkpoint of step 2 aside" in outs[0][1]
        assert len([p for p in _steps(directory) if p.startswith("2.corrupt-")]) == 1
        results, _ = job.phase("restore")
        assert results == [{"step": 2, "first": 20.0}, {"step": 2, "first": 20.0 + 4 * 4096}]
    except BaseException:
        job.kill()
        raise
    job.close()
