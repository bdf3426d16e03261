"""The benchmark's arithmetic: APC (Eq. 4), FLOPS (Eq. 6), penalty and VFLOPS (Eq. 7–8), MFU."""

import pytest

from hpcai_jax.metrics import (
    apc,
    mfu,
    over_epochs,
    penalty,
    per_second,
    vflops_per_s,
    vflops_per_s_why,
)


def test_apc_sums_over_members_and_examples():
    per_example = 23.0e9
    one = apc(per_example, 512)
    assert one == 512 * per_example
    assert apc(per_example, 512, ensemble_size=8) == 8 * one  # Eq. 4 sums over the members


def test_flops_are_the_work_done_over_the_time_it_took():
    # Eq. 6: N/|B| iterations of APC each, over the epoch's wall time; here per member-step.
    assert per_second(2e9, 2502 * 4, 1000.0) == pytest.approx(2e9 * 2502 * 4 / 1000.0)
    assert per_second(None, 10, 1.0) is None
    assert per_second(1e9, 10, 0.0) is None


def test_eq6_over_epochs_is_their_flops_over_their_time():
    # Epochs of 4 s and 1 s, 2e9 and 1e9 FLOPs: 3e9 / 5 s, not the mean of 0.5e9 and 1e9.
    assert over_epochs([2e9, 1e9], [4.0, 1.0]) == pytest.approx(0.6e9)
    assert over_epochs([], []) is None


def test_penalty_rewards_above_the_target_and_exponent_zero_is_neutral():
    assert penalty(0.70, 0.763, 5) == pytest.approx(0.6500, abs=1e-4)
    assert penalty(0.80, 0.763, 5) > 1  # Eq. 8 awards, as the paper defines it
    assert penalty(0.50, 0.9, 0) == 1.0
    assert vflops_per_s(1e12, 0.70, 0.763, 5) == pytest.approx(1e12 * (0.70 / 0.763) ** 5)
    assert vflops_per_s(None, 0.7, 0.763, 5) is None and vflops_per_s(1e12, None, 0.763, 5) is None


def test_mfu():
    assert mfu(1e12, 1e12) == pytest.approx(1.0)
    assert mfu(2.5e11, 1e12) == pytest.approx(0.25)
    assert mfu(None, 1e12) is None and mfu(1e12, None) is None


@pytest.mark.parametrize(
    "achieved, target, why",
    [
        (-0.25, 0.8, "achieved quality -0.25 < 0"),  # a negative R²: (−)^1.5 would be complex
        (float("nan"), 0.8, "achieved quality nan is not a finite number"),
        (float("inf"), 0.8, "achieved quality inf is not a finite number"),
        (0.5, 0.0, "target 0 is not > 0"),
    ],
)
def test_vflops_is_null_with_the_reason_where_eq8_is_undefined(achieved, target, why):
    assert penalty(achieved, target, 1.5) is None
    assert vflops_per_s(1e12, achieved, target, 1.5) is None
    assert why in vflops_per_s_why(1e12, achieved, target, 1.5)
    assert vflops_per_s_why(1e12, 0.0, 0.8, 1.5) is None  # quality 0: VFLOPS 0, defined
    assert vflops_per_s(1e12, 0.0, 0.8, 1.5) == 0.0
    assert vflops_per_s_why(None, 0.5, 0.8, 1.5) == "no FLOPS figure"
