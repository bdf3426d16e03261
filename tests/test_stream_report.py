"""BabelStream's figures and output, and the record `--mode=stream` writes."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from hpcai_jax import records
from hpcai_jax.config import ResultsConfig
from hpcai_jax.settings import Settings
from hpcai_jax.stream import cache as stream_cache
from hpcai_jax.stream import report, run_stream
from hpcai_jax.stream.cache import CacheInfo
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.kernels import KERNELS

N = 1 << 13


def test_figures_drop_the_first_call_and_use_the_fastest():
    times = np.array([0.001, 0.004, 0.002, 0.003])  # the first is fastest, but excluded
    f = report.kernel_figures("triad", times, 1000, 8, 1, None)
    assert (f.min_s, f.max_s, f.avg_s) == (0.002, 0.004, pytest.approx(0.003))
    assert f.bytes_moved == 3 * 1000 * 8
    assert f.rate(mibibytes=False) == pytest.approx(24000 / 0.002 * 1e-6)
    assert f.rate(mibibytes=True) == pytest.approx(24000 / 0.002 / 2**20)
    sharded = report.kernel_figures("copy", times, 1000, 8, 4, None)
    assert sharded.per_device_gb_per_s == pytest.approx(sharded.gb_per_s / 4)


def test_table_and_csv_follow_babelstream():
    figures = [
        report.kernel_figures(k, np.array([1.0, 0.5, 0.25]), 2**25, 8, 1, None)
        for k in ("copy", "triad")
    ]
    lines = report.table(figures, mibibytes=False).splitlines()
    assert lines[0] == "Function    MBytes/sec  Min (sec)   Max         Average     "
    assert lines[2].split() == ["Triad", "3221.225", "0.25000", "0.50000", "0.37500"]
    assert report.table(figures, mibibytes=True).splitlines()[0].split()[1] == "MiBytes/sec"
    csv = report.csv(figures, 3, 2**25, 8, mibibytes=False).splitlines()
    assert csv[0] == (
        "function,num_times,n_elements,sizeof,max_mbytes_per_sec,min_runtime,"
        "max_runtime,avg_runtime"
    )
    assert csv[1].split(",")[:4] == ["Copy", "3", str(2**25), "8"]
    assert report.csv(figures, 3, 2**25, 8, mibibytes=True).startswith(
        "function,num_times,n_elements,sizeof,max_mibytes_per_sec"
    )


def _config(tmp_path, **stream) -> Settings:
    return Settings(
        mode="stream",
        stream=StreamConfig(
            **{"allow_small_arrays": True, "array_size": N, "num_times": 3, **stream}
        ),
        results=ResultsConfig(results_dir=str(tmp_path)),
    ).validate()


def test_stream_mode_prints_babelstream_output_and_writes_the_record(
    tmp_path, capsys, monkeypatch, caplog
):
    """--array_size=auto: with a 16 KiB cache the rule asks 4 x 16 KiB = 2^13 doubles per array,
    and the log says why; the record is complete, nothing marked."""
    monkeypatch.setattr(stream_cache, "cpu_cache", lambda: CacheInfo(16 << 10, "test", "host"))
    caplog.set_level(logging.INFO, logger="absl")
    config = Settings(
        mode="stream",
        stream=StreamConfig(num_times=3),
        results=ResultsConfig(results_dir=str(tmp_path)),
    ).validate()
    assert run_stream(config) == 0
    assert (
        "STREAM: --array_size=auto: 2^13 float64 elements: the smallest power of two with one "
        "array >= 4 x the largest cache, 0.0156 MiB (test), over 1 device(s) sharing it"
    ) in caplog.text
    printed = capsys.readouterr().out
    assert "4x-cache rule" not in printed
    out = printed.splitlines()
    assert out[0] == "BabelStream" and "Precision: double" in out
    assert [
        line.split()[0]
        for line in out[out.index(next(x for x in out if x.startswith("Function"))) + 1 :][:5]
    ] == ["Copy", "Mul", "Add", "Triad", "Dot"]
    assert out[-1].startswith("Figure of merit: Triad ")  # printed last
    [path] = tmp_path.glob("stream-*.json")
    record = json.loads(path.read_text())
    r = records.read(path)
    assert r.mode == "stream" and r.status == "complete"
    assert r.cache.size_rule_ok and r.printed == printed
    assert r.array.elements == N and r.array.bytes_per_array == 8 * N
    assert r.placement.num_devices == 1
    assert r.validation.passed is True
    assert set(r.kernels) == {"copy", "mul", "add", "triad", "dot"}
    assert r.kernels["triad"].xla_bytes_accessed == 3 * 8 * N
    assert all(r.allocation[k].buffer_reused for k in ("copy", "mul", "add", "triad"))
    assert r.metrics["stream/triad/gb_per_s"] == r.figure_of_merit.gb_per_s > 0
    assert r.config["stream"]["precision"] == "float64"
    assert "versions" in record["provenance"]  # the key itself, in the file's JSON
    # The reader's typed record is the file's JSON, field for field (docs/record.md).
    assert isinstance(r, records.StreamRecord) and r.schema_version == 2
    assert records.to_dict(r) == record


def test_csv_mode_prints_only_csv_on_stdout(tmp_path, capsys):
    assert (
        run_stream(_config(tmp_path, csv=True, kernels="triad", devices="all", precision="float32"))
        == 0
    )
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].endswith(",n_devices,max_mbytes_per_sec_per_device")
    assert len(lines) == 2 and lines[1].startswith("Triad,3,8192,4,")
    assert "Figure of merit: Triad" in captured.err


def test_validation_failure_exits_one_and_says_why(tmp_path, capsys, monkeypatch):
    broken = dataclasses.replace(KERNELS["triad"], fn=lambda a, b, c, scalar: 2 * b + scalar * c)
    monkeypatch.setitem(KERNELS, "triad", broken)
    assert run_stream(_config(tmp_path, kernels="triad")) == 1
    assert "Validation failed on a[]" in capsys.readouterr().err
    [path] = tmp_path.glob("stream-*.json")
    record = records.read(path)
    assert record.status == "invalid" and record.reason.startswith("validation failed: ")
    assert record.validation.checks["a"].passed is False
