"""Where STREAM's arrays sit (stream/layout.py): spacers put at least one array's size between
every two arrays on a CPU device, the start values are the same bits as a constant fill's, and
the gap is measured, or said unknown, never assumed."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hpcai_jax.dtypes import dtype as jnp_dtype
from hpcai_jax.stream.kernels import START_A, START_B, START_C
from hpcai_jax.stream.layout import SPACED_ARRAYS, init_arrays, smallest_gap, spacers_fit
from hpcai_jax.stream.placement import make_placement

# 40 MiB per array: above glibc's largest mmap threshold (32 MiB), so each array is a mapping of
# its own, placed as the run's arrays are.
MAPPED = 5 << 20


def test_spacers_set_the_arrays_one_array_apart():
    placement = make_placement("one")
    with jax.enable_x64(True):
        arrays, layout = init_arrays(placement, MAPPED, jnp.float64, spaced=True)
    assert layout.spaced and layout.note == ""
    assert layout.min_gap_bytes >= MAPPED * 8
    assert smallest_gap(arrays) == (layout.min_gap_bytes, "")


@pytest.mark.parametrize("precision", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["one", "all"])
def test_start_values_are_a_constant_fills_bits(precision, mode):
    placement = make_placement(mode)
    dtype = jnp_dtype(precision)
    x64 = jax.enable_x64(True) if precision == "float64" else jax.enable_x64(False)
    with x64:
        arrays, layout = init_arrays(placement, 4096, dtype, spaced=True)
        for name, value in zip("abc", (START_A, START_B, START_C), strict=True):
            assert arrays[name].dtype == dtype and arrays[name].sharding == placement.sharded
            expected = np.full(4096, value, dtype)
            np.testing.assert_array_equal(np.asarray(arrays[name]), expected)
    # Sharded over 8 devices, the gap is each device's own arrays', never a negative overlap.
    assert layout.min_gap_bytes is not None and layout.min_gap_bytes >= 0


def test_packed_on_a_cpu_says_why():
    _, layout = init_arrays(make_placement("one"), 4096, jnp.float32, spaced=False)
    assert not layout.spaced
    assert layout.note == "not spaced: 5 arrays do not fit"


def test_a_gap_without_addresses_is_unknown():
    class Hidden:
        def unsafe_buffer_pointer(self):
            raise NotImplementedError

    shard = types.SimpleNamespace(device="d", data=Hidden())
    array = types.SimpleNamespace(addressable_shards=[shard])
    assert smallest_gap({"a": array}) == (None, "addresses not available: NotImplementedError")


def test_spacers_only_on_cpus_and_where_five_arrays_fit():
    cpu = make_placement("one")
    accelerator = types.SimpleNamespace(platform="gpu")
    assert spacers_fit(cpu, 1000, None)
    assert spacers_fit(cpu, 1000, SPACED_ARRAYS * 1000)
    assert not spacers_fit(cpu, 1000, SPACED_ARRAYS * 1000 - 1)
    assert not spacers_fit(accelerator, 1000, None)
