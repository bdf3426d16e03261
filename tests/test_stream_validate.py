"""BabelStream's validation: the scalar replay, every run order passing, wrong kernels caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hpcai_jax.stream import measure_bandwidth
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.kernels import KERNELS
from hpcai_jax.stream.validate import dot_check, dot_tolerance, gold_values

N = 1 << 13  # divisible by the 8 test devices; 3 x 64 KiB of doubles


def test_gold_replays_one_iteration_by_hand():
    gold = gold_values("all", 1, "float64", N)
    # c = a = 0.1; b = 0.4 c = 0.04; c = a + b = 0.14; a = b + 0.4 c = 0.096
    assert (gold.a, gold.b, gold.c) == pytest.approx((0.096, 0.04, 0.14), rel=1e-15)
    assert gold.dot == pytest.approx(0.096 * 0.04 * N, rel=1e-15)
    triad = gold_values("triad", 3, "float64", N)
    assert (triad.a, triad.b, triad.c) == pytest.approx((0.2, 0.2, 0.0))
    nstream = gold_values("nstream", 2, "float32", N)
    assert nstream.a == pytest.approx(0.1 + 2 * 0.2, rel=1e-6) and nstream.dot is None


@pytest.mark.parametrize("kernels", ["all", "triad", "nstream"])
@pytest.mark.parametrize("precision", ["float64", "float32", "bfloat16"])
def test_every_run_order_and_precision_validates_on_one_device(kernels, precision):
    result = measure_bandwidth(
        StreamConfig(
            allow_small_arrays=True, array_size=N, num_times=4, precision=precision, kernels=kernels
        )
    )
    assert result.validation.passed, result.validation.failures()
    order = {
        "all": ["copy", "mul", "add", "triad", "dot"],
        "triad": ["triad"],
        "nstream": ["nstream"],
    }[kernels]
    assert [f.key for f in result.figures] == order
    # Every kernel that writes an array wrote it into the donated buffer; Dot writes no array, so
    # nothing is donated to it and its entry stays None (not checked).
    assert result.buffer_reused == {k: None if k == "dot" else True for k in order}


@pytest.mark.parametrize("kernels", ["all", "nstream"])
def test_sharded_over_eight_devices_validates(kernels):
    result = measure_bandwidth(
        StreamConfig(
            allow_small_arrays=True, array_size=N, num_times=4, kernels=kernels, devices="all"
        )
    )
    assert result.placement.num_devices == 8
    assert result.validation.passed, result.validation.failures()
    assert result.validation.checks[0].error < 1e-15
    assert not result.allocation_problems()


@pytest.mark.parametrize("kernels", ["all", "triad", "nstream"])
@pytest.mark.parametrize("devices", ["one", "all"])
def test_a_burst_of_calls_per_sample_still_validates(kernels, devices):
    # Every kernel but Nstream rewrites its output from inputs it leaves alone, so a burst ends
    # as one call does; Nstream adds itself `burst` times, and validation must replay that.
    result = measure_bandwidth(
        StreamConfig(
            allow_small_arrays=True,
            array_size=N,
            num_times=3,
            kernels=kernels,
            devices=devices,
            burst=4,
        )
    )
    assert result.burst == 4
    assert result.validation.passed, result.validation.failures()
    assert all(v in (None, True) for v in result.buffer_reused.values())
    if kernels == "nstream":  # 12 additions, not 3: a replay of 3 would not have passed
        assert (
            gold_values("nstream", 12, "float64", N).a != gold_values("nstream", 3, "float64", N).a
        )


def test_the_burst_is_one_call_on_cpus_and_eight_elsewhere():
    from hpcai_jax.stream.config import resolve_burst

    assert resolve_burst(StreamConfig(), "cpu") == 1
    assert resolve_burst(StreamConfig(), "gpu") == resolve_burst(StreamConfig(), "tpu") == 8
    assert resolve_burst(StreamConfig(burst=3), "gpu") == 3


def _wrong(key: str, fn) -> dict:
    return {**KERNELS, key: dataclasses.replace(KERNELS[key], fn=fn)}


@pytest.mark.parametrize("devices", ["one", "all"])
def test_a_wrong_kernel_is_caught_per_array(devices):
    wrong_triad = _wrong("triad", lambda a, b, c, scalar: b - scalar * c)  # sign slip
    result = measure_bandwidth(
        StreamConfig(allow_small_arrays=True, array_size=N, num_times=3, devices=devices),
        wrong_triad,
    )
    assert not result.validation.passed
    failed = {c.name for c in result.validation.checks if not c.passed}
    assert "a" in failed
    assert any(
        m.startswith("Validation failed on a[]. Average relative error")
        for m in result.validation.failures()
    )


def test_a_wrong_dot_is_caught_by_the_sum_check():
    wrong_dot = _wrong("dot", lambda a, b, c, scalar: (a * a).sum())
    result = measure_bandwidth(
        StreamConfig(allow_small_arrays=True, array_size=N, num_times=3), wrong_dot
    )
    failed = {c.name for c in result.validation.checks if not c.passed}
    assert failed == {"dot"}
    assert result.validation.failures()[0].startswith("Validation failed on sum.")


def test_one_off_error_in_one_element_is_caught_in_float64():
    """Tolerance is 100 eps of the mean: a single element off by 1 in 2^13 is far above it."""

    def nearly_triad(a, b, c, scalar):
        return (b + scalar * c).at[0].add(1.0)

    result = measure_bandwidth(
        StreamConfig(allow_small_arrays=True, array_size=N, num_times=2, kernels="triad"),
        _wrong("triad", nearly_triad),
    )
    assert not result.validation.passed
    assert np.isclose(result.validation.checks[0].error, 1.0 / N / 0.2, rtol=1e-6)


def test_the_float64_dot_tolerance_is_the_sums_error_bound_at_large_sizes():
    """At 2^28 doubles BabelStream's fixed 1e-8 is below the error bound of the sum (its own
    build fails there): the tolerance becomes γ_N + 2u = 2^28·2^-53/(1 − 2^28·2^-53) + 2^-52; at
    2^25 the bound (3.7e-9) is below 1e-8, which stays. float32 keeps its fixed figure."""
    n = 1 << 28
    n_u = n * 2.0**-53
    tolerance, basis = dot_tolerance("float64", n)
    assert tolerance == pytest.approx(n_u / (1 - n_u) + 2.0**-52, rel=1e-12)
    assert 2.9e-8 < tolerance < 3.0e-8 and basis.startswith("the sum's error bound")
    assert dot_tolerance("float64", 1 << 25)[0] == 1e-8
    assert dot_tolerance("float32", 1 << 25)[0] == 1e-4
    # The check at 2^28 without the arrays: a sum just inside the bound passes, just outside fails.
    gold = gold_values("all", 100, "float64", n)
    assert dot_check(gold.dot * (1 + 0.99 * tolerance), gold, "float64", n).passed
    assert not dot_check(gold.dot * (1 + 1.01 * tolerance), gold, "float64", n).passed


@pytest.mark.slow
def test_the_worst_summation_order_at_2_28_doubles_is_within_the_bound():
    """A chunked model of the least accurate order, one running sum over all 2^28 products
    (np.add.accumulate adds strictly in sequence), of the run's own gold values: its error is
    within the tolerance. 32 MiB at a time, never the 2 GiB arrays."""
    n, chunk = 1 << 28, 1 << 22
    gold = gold_values("all", 100, "float64", n)
    term, total = np.float64(gold.a) * np.float64(gold.b), np.float64(0.0)
    for _ in range(n // chunk):
        run = np.full(chunk + 1, term)
        run[0] = total
        total = np.add.accumulate(run)[-1]
    check = dot_check(float(total), gold, "float64", n)
    assert check.passed and 0 < check.error < check.tolerance, check


@pytest.mark.slow
def test_a_real_float64_run_at_2_24_keeps_the_dots_error_tolerance_and_basis():
    """The largest size CI affords (3 × 128 MiB): the Dot check and what the record keeps."""
    result = measure_bandwidth(
        StreamConfig(allow_small_arrays=True, array_size=1 << 24, num_times=2)
    )
    checks = result.validation.to_dict()["checks"]
    dot = checks["dot"]
    assert result.validation.passed and dot["passed"]
    assert 0 <= dot["error"] <= dot["tolerance"] == 1e-8
    assert dot["basis"].startswith("BabelStream's 1e-08 (the sum's error bound for 16777216 terms")
