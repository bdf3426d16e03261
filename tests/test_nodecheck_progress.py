"""--mode=check as it runs: each item's rows are printed and the record rewritten (partial) as it
finishes, so a check killed in an item keeps every row before it; and each item's memory is
measured against the room it has before anything is allocated, its sizes cut to fit, the cut
stated in its row."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hpcai_jax import config as C
from hpcai_jax.nodecheck import compute, memory, runner, step_fit, training
from hpcai_jax.nodecheck.budget import Allotment
from hpcai_jax.nodecheck.rows import PASS, WARN, Row
from hpcai_jax.settings import Settings


def _config(results_dir) -> C.RunConfig:
    return Settings(
        mode="check",
        model=C.ModelConfig(workload="regression", model="mlp"),
        data=C.DataConfig(dataset="friedman1"),
        train=C.TrainConfig(batch_size=8),
        results=C.ResultsConfig(results_dir=str(results_dir), run_name="killed"),
    ).validate()


def test_a_check_killed_in_an_item_leaves_every_row_before_it(tmp_path, monkeypatch, capsys):
    """The third item looks at what a kill at that moment would leave (the record on disk, the
    text printed), then dies; the record still holds the first two items' rows."""
    seen = {}

    def dies(ctx, allotment):
        seen["record"] = json.loads((tmp_path / "killed.json").read_text())
        seen["printed"] = capsys.readouterr().out
        raise RuntimeError("killed by the kernel")

    monkeypatch.setattr(
        runner,
        "ITEMS",
        (
            runner.Item("one", 0.3, lambda ctx, a: [Row("one row", PASS, 1.0, 1.0)]),
            runner.Item("two", 0.3, lambda ctx, a: [Row("two row", WARN, note="skipped: x")]),
            runner.Item("three", 0.4, dies),
        ),
    )
    with pytest.raises(RuntimeError, match="killed by the kernel"):
        runner.run_check(_config(tmp_path))
    at_kill = seen["record"]
    assert at_kill["status"] == "partial"
    assert at_kill["reason"] == "running: 2 items finished, item three started"
    items = [r["item"] for r in at_kill["check"]["rows"]]
    assert items[:3] == ["devices", "host cores per device", "energy counters"]
    assert items[3:] == ["one row", "two row"]
    assert "one row" in seen["printed"] and "two row" in seen["printed"]
    after = json.loads((tmp_path / "killed.json").read_text())
    assert after["status"] == "partial" and after["check"]["rows"] == at_kill["check"]["rows"]
    assert after["reason"] == "stopped in item three: RuntimeError: killed by the kernel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed.json"]  # no temporary left


def test_mem_available_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    2000000 kB\n")
    assert memory.mem_available_bytes(str(meminfo)) == 2_048_000_000
    assert memory.mem_available_bytes(str(tmp_path / "none")) is None


@pytest.fixture
def small_host(monkeypatch):
    """A host with 40 MB available: a room of 12 MB for the 8 CPU devices (1.5 MB each)."""
    monkeypatch.setattr(memory, "mem_available_bytes", lambda: 40_000_000)
    room = memory.room()
    assert room.bytes == int(memory.HOST_FRACTION * 40_000_000) and room.devices == 8
    return room


def test_an_item_that_does_not_fit_the_room_is_cut_and_says_so(small_host):
    # STREAM's 128 MiB arrays need 4 x 16 MiB per device; 1.5 MB each fits 2 MiB arrays.
    allotment = Allotment("stream", 5.0, 0.0, lambda: 0.0)  # a stopped clock
    (row,) = compute.stream_rows("cpu", allotment, small_host)
    assert row.note.startswith("2 MiB per array over 8 devices")
    assert " -> 2 by memory: " in row.note and "MiB per array capped " in row.note
    # The cut breaks NERSC-10's rule (one array >= 4x the cache): said, and never a PASS.
    assert "; the 4x-cache rule is broken: one array 2.0 MiB < 4 x largest cache" in row.note
    assert row.status != "PASS"
    n, cut = compute.matmul_size(1024, "cpu", small_host)  # 4 x 4 n² bytes per device
    assert n == 256
    assert cut.startswith("n capped 1024 -> 256 by memory: 0.0168 GB per device at 1024 over ")
    assert "0.0015 GB per device of 0.012 GB room (30% of MemAvailable" in cut
    assert compute.matmul_size(256, "cpu", small_host) == (256, "")
    roomy = dataclasses.replace(small_host, bytes=None)
    assert roomy.fits(1e18) and compute.matmul_size(1024, "cpu", roomy) == (1024, "")


def test_the_next_batch_follows_xla_s_figures_down():
    room = memory.Room(1000, 1, "test")
    # One figure: the state (100) fixed, the rest proportional (200 per example): 90 % of the
    # 900 above the state holds 4.
    assert step_fit.next_batch([(5, 1100)], 100, room, 1) == 4
    assert step_fit.next_batch([(20, 2100)], 100, room, 1) == 8  # 100 per example
    # Two: the line through them (50 per example from 600), whatever the state says; smaller
    # than the last.
    assert step_fit.next_batch([(9, 1050), (7, 950)], 100, room, 1) == 6
    assert step_fit.next_batch([(2, 2000)], 100, room, 1) == 0  # not one example fits


@pytest.mark.slow
def test_a_step_that_does_not_fit_is_cut_before_it_allocates(monkeypatch):
    config = training.step_config(
        Settings(
            mode="check",
            model=C.ModelConfig(workload="regression", model="mlp"),
            data=C.DataConfig(dataset="friedman1"),
            train=C.TrainConfig(batch_size=64),
        ).validate()
    )
    whole = step_fit.build_step(config, None)
    fixed = step_fit.state_bytes_per_device(whole.setup.abstract_state)
    eight = step_fit.build_step(step_fit.with_batch(config, 8), None).need_bytes
    assert whole.need_bytes > eight > fixed > 0
    # The estimate, every intermediate value of the forward pass, is above XLA's figure.
    assert 56 * step_fit.example_bytes(config) > whole.need_bytes - eight
    room = memory.Room(eight * 8, 8, "test")  # room for XLA's batch 8 on each of 8 devices
    cut = step_fit.build_step(config, room)
    assert cut.config.train.batch_size <= 8 and cut.need_bytes <= eight
    assert cut.note.startswith("batch capped 64 -> ")
    with pytest.raises(step_fit.DoesNotFit, match="not one example per member fits"):
        step_fit.build_step(config, memory.Room(fixed * 8, 8, "test"))
    # An estimate that misses: XLA's figures of the compiled steps cut it, build by build.
    monkeypatch.setattr(step_fit, "example_bytes", lambda config: 0)
    rebuilt = step_fit.build_step(config, room)
    assert rebuilt.config.train.batch_size <= 8 and rebuilt.need_bytes <= eight
    assert rebuilt.note.startswith("batch capped 64 -> ") and "(estimate)" not in rebuilt.note
    with pytest.raises(step_fit.DoesNotFit, match="no time left to build it again"):
        step_fit.build_step(config, room, may_rebuild=lambda compile_s: False)
