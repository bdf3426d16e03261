"""`--checkpoint_every=auto` (hpcai_jax/run/checkpoint_interval.py): the Young/Daly interval from a save
measured in the run, and the record's account of it (docs/reliability.md, "Checkpoint
interval")."""

from __future__ import annotations

import pytest
from helpers import run_in_process
from test_reliability import SHORT, _record

from hpcai_jax.run import checkpoint_interval as interval


def test_young_daly_is_the_square_root_of_twice_save_time_times_mtbf():
    # 2 s per save, MTBF 1 h: sqrt(2 × 2 × 3600) = 120 s = 240 steps of 0.5 s.
    chosen = interval.young_daly(2.0, 3.0, 0.5, 1.0, "--mtbf_hours", left=10_000)
    assert chosen.steps == 240 and chosen.mtbf_hours == 1.0
    assert chosen.why.startswith("auto: sqrt(2 x 2 s per save x 1 h MTBF (--mtbf_hours)) = 120 s")
    # A save that takes longer to write than the interval: the next waits for it.
    slow = interval.young_daly(0.01, 30.0, 0.5, 0.01, "x", left=10_000)
    assert slow.steps == 60 and "raised to the 60 steps a save takes to write" in slow.why
    # An interval past the run's end says so.
    assert (
        "saves at the end and on preemption only"
        in interval.young_daly(2.0, 3.0, 0.5, 1.0, "x", left=100).why
    )


def test_mtbf_follows_the_device_count_unless_given():
    hours, why = interval.mtbf_hours(None, 10_000)
    assert hours == pytest.approx(5.0) and why.startswith("10000 devices at 2e-05")
    assert interval.mtbf_hours(12.5, 10_000) == (12.5, "--mtbf_hours")


@pytest.mark.slow
def test_auto_probes_a_save_and_saves_at_the_interval_it_chose(tmp_path):
    """A tiny MTBF makes the interval a few steps: the probe save after the warm-up and
    PROBE_STEPS timed steps, then saves every N steps, the record saying N and why."""
    steps = 16
    proc = run_in_process(
        *SHORT,
        f"--steps={steps}",
        "--checkpoint_every=auto",
        "--mtbf_hours=1e-7",
        "--keep_checkpoints=20",
        f"--checkpoint_dir={tmp_path}/ck",
        f"--results_dir={tmp_path}/r",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    reliability = _record(tmp_path / "r").reliability
    every = reliability.checkpoint_every_steps
    assert every is not None and every >= 1, reliability
    assert reliability.checkpoint_every_why.startswith("auto: sqrt(2 x ")
    assert reliability.mtbf_hours == pytest.approx(1e-7)
    probe = 1 + interval.PROBE_STEPS  # --timing_warmup_steps=1
    saved = sorted(int(p.name) for p in (tmp_path / "ck").iterdir() if p.name.isdigit())
    expected = sorted({probe, steps} | {s for s in range(probe + 1, steps) if s % every == 0})
    assert saved == expected, (saved, every)
