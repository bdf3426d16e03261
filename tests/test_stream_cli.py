"""`python -m hpcai_jax.main --mode=stream` end to end: bad values end in one line and exit 2,
the shipped flagfile runs, and a two-process job shards the arrays over both processes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT, run_in_process, run_main

from hpcai_jax import records

pytestmark = pytest.mark.slow  # a CLI run (a process, or STREAM measured) in each


def _error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("hpcai_jax: error: ")
    return last.removeprefix("hpcai_jax: error: ")


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--array_size=-8"],
            "--array_size=-8: expected >= 1 elements per array (or auto for the rule's size)",
        ),
        (
            ["--precision=float16"],
            "--precision='float16': expected one of float64, float32, bfloat16",
        ),
        (
            ["--stream_devices=all", "--array_size=1001"],
            "--array_size=1001: not divisible across 8 devices (--stream_devices=all); use a multiple of 8",
        ),
        (["--array_size=7"], "--array_size=7: one array 5.34e-05 MiB < 4 x largest cache"),
        (
            ["--allow_small_arrays"],
            "--allow_small_arrays: needs a size given by hand (--array_size, --array_mib or "
            "--array_fraction); --array_size=auto always keeps the 4x-cache rule",
        ),
        (  # 2^40 doubles: never allocated, refused by the free-memory check first
            ["--array_size=1099511627776", "--allow_small_arrays"],
            "--array_size=1099511627776: three arrays of 8,388,608 MiB need 25,165,824 MiB per "
            "device, more than the ",
        ),
    ],
)
def test_bad_values_end_in_one_line(args, message, tmp_path):
    """In this process (its 8 CPU devices, the CLI's own parser and exit code): each value is
    refused before anything is measured, so no process of its own is needed."""
    proc = run_in_process("--mode=stream", f"--results_dir={tmp_path}", *args)
    assert _error_line(proc).startswith(message)
    assert not list(tmp_path.glob("*.json"))


def test_shipped_flagfile_runs(tmp_path):
    proc = run_main(
        "--flagfile=configs/stream.flags",
        "--array_size=65536",
        "--allow_small_arrays",
        "--num_times=3",
        f"--results_dir={tmp_path}",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "BabelStream" and lines[-1].startswith("Figure of merit: Triad")
    # 512 KiB per array, by hand, below the rule: said under the table, in the figure of merit
    # and in the record's status; the record keeps stdout as printed (NERSC-10's rules).
    below = "below NERSC-10's 4x-cache rule"
    assert lines[-4].startswith(f"Arrays {below} (--allow_small_arrays), this measures a cache")
    # NERSC-10's verdict then closes the report (stream/acceptance.py), the size clause waived.
    assert lines[-3].startswith("nersc10: one array 524,288 B < 4 × the largest cache")
    assert lines[-3].endswith("FAIL (--allow_small_arrays); figure of merit triad")
    assert lines[-2] == "Acceptance: PASS"
    assert lines[-1].endswith(f"; arrays {below})")
    [record] = [records.read(p) for p in tmp_path.glob("stream-*.json")]
    assert record.validation.passed and record.array.elements == 65536
    assert (record.mode, record.status) == ("stream", "small_arrays")
    assert record.reason.startswith(f"arrays {below}: one array 0.5 MiB < 4 x largest cache")
    assert not record.cache.size_rule_ok
    assert record.printed == proc.stdout
    # On a CPU the arrays were set apart, and how far is measured (stream/layout.py).
    assert record.layout.spaced and record.layout.min_gap_bytes >= 0


def test_run_name_is_the_record_id_in_every_mode(tmp_path):
    """--run_name means the same in every mode: the record's exact id, never overwritten."""
    args = [
        "--mode=stream",
        "--array_size=4096",
        "--allow_small_arrays",
        "--num_times=2",
        "--run_name=bw",
        f"--results_dir={tmp_path}",
    ]
    first = run_main(*args, timeout=120)
    assert first.returncode == 0, first.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["bw.json"]
    original = (tmp_path / "bw.json").read_text()
    again = run_in_process(*args)  # refused before anything is measured: no process needed
    assert _error_line(again).startswith(
        f"--results_dir={tmp_path} already holds a record of run id bw"
    )
    assert (tmp_path / "bw.json").read_text() == original


@pytest.mark.multiprocess
def test_two_processes_shard_the_arrays_and_process_zero_reports(tmp_path):
    """launch/local.py: 2 processes x 4 CPU devices, one 8-device job through hpcai_jax.main."""
    proc = subprocess.run(
        [
            sys.executable,
            "launch/local.py",
            "--num_processes=2",
            "--devices_per_process=4",
            "--timeout_s=120",
            "--",
            sys.executable,
            "-m",
            "hpcai_jax.main",
            "--mode=stream",
            "--array_size=8192",
            "--allow_small_arrays",
            "--num_times=3",
            "--stream_devices=all",
            f"--results_dir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "[p0] BabelStream" in lines and "[p1] BabelStream" not in lines  # process 0 reports
    assert "[p0] Placement: all 8 devices of 2 process(es), arrays sharded 8 ways" in lines
    assert [x for x in lines if x.startswith("[p0] ")][-1].startswith("[p0] Figure of merit: Triad")
    [record] = [records.read(p) for p in tmp_path.glob("stream-*.json")]
    assert record.placement.num_devices == 8 and record.placement.process_count == 2
    assert record.validation.passed
