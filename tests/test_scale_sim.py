"""benchmarks/scale_sim.py's bookkeeping, without starting JAX: reading the launcher's log, the
critical path of start-up, the held-out bytes estimate, the fits, and the wrapper each process
runs (its counting of held-out reads on the real friedman1 source)."""

from __future__ import annotations

import atexit
import datetime
import importlib.util
import logging

import numpy as np
import pytest
from helpers import ROOT


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("scale_sim", ROOT / "benchmarks/scale_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LAUNCHED = datetime.datetime(2026, 12, 4, 16, 0, 0).timestamp()


def _absl(p: int, seconds: float, msg: str) -> str:
    at = datetime.datetime.fromtimestamp(LAUNCHED + seconds)
    return f"[p{p}] I{at:%m%d %H:%M:%S.%f} 1404 x.py:1] {msg}"


def _log(p: int, offset: float, with_step: bool = True) -> list[str]:
    lines = [
        _absl(p, 1.0 + offset, f"jax.distributed: process {p} of 2, coordinator 127.0.0.1:1"),
        _absl(p, 2.0 + offset, f"[p{p}/2] start-up: flags; process {p} of 2; 1 local devices"),
        _absl(p, 3.0 + offset, "[p{p}/2] mesh {'ensemble': 2, 'data': 1, 'model': 1}: M=2"),
        _absl(p, 4.0 + offset, "compiled the ensemble step in 1.1 s"),
        f"[p{p}] mesh (ensemble x data x model)     {{'ensemble': 2}}",  # summary, not absl
        f"[p{p}] \tMaximum resident set size (kbytes): {400_000 + p}",
        f"[p{p}] \tUser time (seconds): 5.00",
        f"[p{p}] \tSystem time (seconds): 0.50",
        f"[p{p}] scale_sim: held_out_bytes=2816 maxrss_kb=1 cpu_s=5.4 cpu_to_step_s=4.25",
    ]
    if with_step:
        lines.insert(4, _absl(p, 5.0 + offset, f"[p{p}/2] process {p}: training steps 0 to 32"))
    return lines


def test_the_log_gives_each_process_its_milestones_and_figures(sim):
    per = sim.parse_log([*_log(0, 0.0), *_log(1, 0.5), "launch/local.py: done"], LAUNCHED)
    assert sorted(per) == [0, 1]
    assert per[1]["at"] == pytest.approx(
        {"import": 1.5, "join": 2.5, "setup": 3.5, "compile": 4.5, "to_step": 5.5}, abs=1e-5
    )
    # GNU time's RSS wins over the wrapper's own; CPU is user + system.
    assert per[1]["rss_kb"] == 400_001 and per[1]["cpu_s"] == pytest.approx(5.5)
    assert per[0]["held_out_bytes"] == 2816 and per[0]["cpu_to_step_s"] == 4.25
    phases = sim.critical_path(per)
    assert phases["import"] == pytest.approx(1.5, abs=1e-5)
    assert sum(phases.values()) == pytest.approx(5.5, abs=1e-5)  # the slowest's first step
    assert sim.cores_used(per, 2, 5.5) == pytest.approx(8.5 / 5.5)


def test_a_process_that_never_trains_has_no_start_up(sim):
    per = sim.parse_log([*_log(0, 0.0), *_log(1, 0.5, with_step=False)], LAUNCHED)
    assert sim.critical_path(per)["to_step"] is None
    assert sim.cores_used(per, 3, 5.5) is None  # a process missing altogether


def test_absl_times_across_a_new_year(sim):
    launched = datetime.datetime(2026, 12, 31, 23, 59, 59).timestamp()
    match = sim.LINE.match("[p0] I0101 00:00:01.000000 1 x.py:1] hello")
    assert sim.absl_time(match, launched) - launched == pytest.approx(2.0)
    assert sim.absl_time(sim.LINE.match("[p0] plain output"), launched) is None


def test_held_out_rows_follow_the_eval_batches(sim):
    assert sim.bytes_per_example() == 44  # 10 float32 features and a float32 target
    assert sim.held_out_rows_per_process(64, 64, 1, members=1) == 64
    assert sim.held_out_rows_per_process(64, 64, 2, members=1) == 32
    assert sim.held_out_rows_per_process(64, 1000, 1, members=1) == 1000  # padding read too
    assert sim.held_out_rows_per_process(64, 999, 2, members=1, evaluations=3) == 3 * 500
    # Member groups share the reading of a block: 16 groups read 64 rows in slices of 4.
    assert sim.held_out_rows_per_process(64, 64, 1, members=16) == 4
    assert sim.held_out_rows_per_process(64, 64, 2, members=8) == 4


def test_fits_tell_a_line_from_a_power_law(sim):
    x = [1, 2, 4, 8, 16]
    line = sim.fit(x, [3 + 2 * n for n in x])
    assert line["slope"] == pytest.approx(2) and line["better"] == "linear"
    assert sim.predict(line, 10_000) == pytest.approx(20_003)
    power = sim.fit(x, [5 * n**0.5 for n in x])
    assert power["exponent"] == pytest.approx(0.5) and power["better"] == "log-log"
    assert sim.predict(power, 10_000) == pytest.approx(500)
    assert sim.fit(x, [0, 1, 2, 3, 4])["exponent"] is None  # no logarithm of 0
    noise = sim.fit(x, [5.0, 5.5, 4.8, 5.4, 5.1])  # no trend: its mean, not a slope, carries on
    assert noise["better"] == "flat" and sim.predict(noise, 10_000) == pytest.approx(5.16)
    assert sim.fit(x, [7, 7, 7, 7, 7])["better"] == "flat"
    assert sim.fit([1, 1], [2, 3]) is None
    assert sim.extrapolated(-5.0, "s") == "< 0 (falls)"


def test_the_plan_interleaves_layouts_between_two_baselines(sim):
    assert sim.plan([1, 2, 3, 4]) == [(1, 1), (2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (1, 1)]


def test_the_wrapper_counts_reads_of_the_held_out_set(sim):
    from hpcai_jax.data import friedman

    code = sim.WRAPPER.replace(
        'runpy.run_module("hpcai_jax.main", run_name="__main__", alter_sys=True)', ""
    )
    assert code != sim.WRAPPER
    original, absl = friedman.load, logging.getLogger("absl")
    namespace: dict = {}
    try:
        exec(compile(code, "<wrapper>", "exec"), namespace)
        train, test = friedman.load()
        train.read(np.arange(8))  # training reads are not counted
        test.head(10).read(np.array([0, 1, 2, 0]))
        assert namespace["held_out"] == [4 * 44]
        step = logging.LogRecord(
            "absl", logging.INFO, "x", 1, "process 0: training steps", (), None
        )
        assert namespace["cpu_at_step"] == [-1.0]
        namespace["_FirstStep"]().filter(step)
        assert namespace["cpu_at_step"][0] > 0
    finally:
        friedman.load = original
        atexit.unregister(namespace.get("_report", print))
        for f in [f for f in absl.filters if type(f).__name__ == "_FirstStep"]:
            absl.removeFilter(f)
