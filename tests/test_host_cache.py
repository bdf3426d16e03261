"""The start-up measurements kept per host (hpcai_jax/flops/host_cache.py, docs/score.md): read
only where $HPCAI_JAX_STARTUP_CACHE is set, only for the same host as JAX sees it, and named
with the run that measured them."""

from __future__ import annotations

import json

import jax
import pytest
from helpers import peaks_at_start

from hpcai_jax.flops import host_cache, peaks
from hpcai_jax.run import probes


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(host_cache.ENV, str(tmp_path / "kept"))
    return tmp_path / "kept"


def _never():
    raise AssertionError("measured although a figure was kept")


def test_a_kept_figure_is_read_by_the_next_run_and_names_the_first(folder):
    value, source = host_cache.kept(("matmul", "float32"), lambda: {"peak": 1.5e9}, "run-a")
    assert value == {"peak": 1.5e9} and source == ""
    (entry,) = folder.glob("matmul-*.json")
    assert json.loads(entry.read_text())["run"] == "run-a"
    again, source = host_cache.kept(("matmul", "float32"), _never, "run-b")
    assert again == {"peak": 1.5e9}
    assert source.startswith(f"read from {host_cache.ENV}={folder}: measured by run run-a at ")
    other, source = host_cache.kept(("matmul", "bfloat16"), lambda: {"peak": 3e9}, "run-b")
    assert other == {"peak": 3e9} and source == ""  # another figure: measured


def test_nothing_is_kept_or_read_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(host_cache.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    calls = []
    for _ in range(2):
        host_cache.kept(("stream",), lambda: calls.append(1) or [5e9, "STREAM"], "run-a")
    assert calls == [1, 1] and host_cache.folder() is None and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "change",
    [
        lambda mp: mp.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4"),
        lambda mp: mp.setattr(jax, "__version__", "0.0.1"),
        lambda mp: mp.setattr(jax, "process_count", lambda: 2),
        lambda mp: mp.setattr(jax, "local_devices", lambda: jax.devices()[:4]),
    ],
    ids=["xla_flags", "jax_version", "process_count", "devices"],
)
def test_another_host_measures_again(folder, monkeypatch, change):
    host_cache.kept(("stream",), lambda: [5e9, "STREAM"], "run-a")
    change(monkeypatch)
    value, source = host_cache.kept(("stream",), lambda: [7e9, "STREAM"], "run-b")
    assert value == [7e9, "STREAM"] and source == ""


def test_a_damaged_entry_or_an_unwritable_folder_costs_only_the_measurement(
    folder, tmp_path, monkeypatch
):
    host_cache.kept(("stream",), lambda: [5e9, "STREAM"], "run-a")
    (entry,) = folder.glob("stream-*.json")
    entry.write_text('{"value": [5e9')  # cut short
    assert host_cache.kept(("stream",), lambda: [6e9, "S"], "run-b") == ([6e9, "S"], "")
    assert json.loads(entry.read_text())["run"] == "run-b"  # measured again and kept whole
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(host_cache.ENV, str(blocked / "kept"))  # under a file: never writable
    assert host_cache.kept(("stream",), lambda: [6e9, "S"], "run-c") == ([6e9, "S"], "")


def test_a_run_s_record_says_its_peaks_came_from_an_earlier_run(folder, monkeypatch):
    """The peak and STREAM probes through the cache, as two processes on one host (each its own
    _MEASURED): the
    second's sources name the first run; STREAM of a several-process run is measured afresh."""
    measured = {"dtype": "float32", "measured_per_device": 1e9, "measured_method": "chained"}
    monkeypatch.setattr(host_cache, "_MEASURED", {})
    monkeypatch.setattr(peaks, "matmul_peaks", lambda dtype: dict(measured))
    monkeypatch.setattr(probes, "stream_bandwidth", lambda path: (5e9, "STREAM Triad"))
    first = peaks_at_start("float32", None)
    assert first["measured_method"] == "chained" and first["bandwidth_source"] == "STREAM Triad"
    first_peak = peaks_at_start("float32", None, "run-a")
    assert first_peak["measured_method"].endswith("; measured by this process's first run")
    monkeypatch.setattr(host_cache, "_MEASURED", {})  # a new process
    peaks_at_start("float16", (1.0, "given"), "run-a")
    monkeypatch.setattr(host_cache, "_MEASURED", {})
    monkeypatch.setattr(peaks, "matmul_peaks", lambda dtype: _never())
    monkeypatch.setattr(probes, "stream_bandwidth", lambda path: _never())
    peak = peaks_at_start("float16", None, "run-b")
    assert peak["measured_per_device"] == 1e9
    assert peak["measured_method"].startswith(f"chained; read from {host_cache.ENV}=")
    assert "measured by run run-a at " in peak["measured_method"]
    per_device, source = peak["bandwidth_per_device"], peak["bandwidth_source"]
    assert per_device == 5e9 and source.startswith("STREAM Triad; read from ")


def _bandwidth_at_start(run_id: str) -> tuple[float, str]:
    """The "stream" probe alone (hpcai_jax/run/probes.py), through its store."""
    stream = tuple(p for p in probes.PROBES if p.name == "stream")
    m = probes.run(probes.Measuring(None, None, None, None, run_id), stream)
    return m.peaks["bandwidth_per_device"], m.peaks["bandwidth_source"]


def test_stream_of_several_processes_is_process_zero_s_for_all(folder, monkeypatch):
    """STREAM is a collective: every process takes process 0's kept figure, or all measure it,
    whatever a process's own cache holds (one that read its own while the others measured would
    wait for them forever)."""
    sent = []
    monkeypatch.setattr(host_cache, "_MEASURED", {})
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(
        host_cache.distributed, "from_process_zero", lambda t, size: sent.append(t) or t
    )
    monkeypatch.setattr(probes, "stream_bandwidth", lambda path: (4e9, "Triad"))
    assert _bandwidth_at_start("run-a") == (4e9, "Triad")  # measured by all, kept
    monkeypatch.setattr(host_cache, "_MEASURED", {})
    monkeypatch.setattr(probes, "stream_bandwidth", lambda path: _never())
    per_device, source = _bandwidth_at_start("run-b")
    assert per_device == 4e9 and "measured by run run-a at " in source
    assert sent[0] == "" and json.loads(sent[1])["run"] == "run-a"
    # Process 1: process 0's word alone counts, its own cache (the same folder here) unread.
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    for zero_says, expected in ((sent[1], 4e9), ("", 3e9)):
        monkeypatch.setattr(host_cache, "_MEASURED", {})
        monkeypatch.setattr(
            host_cache.distributed, "from_process_zero", lambda t, size, z=zero_says: z
        )
        monkeypatch.setattr(probes, "stream_bandwidth", lambda path: (3e9, "Triad"))
        assert _bandwidth_at_start("run-c")[0] == expected
