"""STREAM flag checks and size rules: every bad value is a one-line UsageError naming its flag."""

from __future__ import annotations

import pytest

from hpcai_jax.errors import UsageError
from hpcai_jax.settings import Settings
from hpcai_jax.stream.cache import CacheInfo, check_size, cpu_cache, rule_elements_per_device
from hpcai_jax.stream.config import Room, StreamConfig, resolve_array_size

MIB = 1 << 20


def _error(config: StreamConfig) -> str:
    with pytest.raises(UsageError) as info:
        config.validate()
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "change, flag",
    [
        ({"array_size": -5}, "--array_size=-5"),
        ({"array_mib": -1.0}, "--array_mib=-1.0"),
        ({"array_fraction": 1.5}, "--array_fraction=1.5"),
        (
            {"precision": "float16"},
            "--precision='float16': expected one of float64, float32, bfloat16",
        ),
        ({"kernels": "copy"}, "--stream_kernels='copy'"),
        ({"devices": "two"}, "--stream_devices='two'"),
        ({"num_times": 1}, "--num_times=1"),
        ({"array_size": 1024, "array_mib": 8.0}, "--array_size=1024 and --array_mib=8.0"),
        ({"allow_small_arrays": True}, "--allow_small_arrays: needs a size given by hand"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_flag(change, flag):
    assert flag in _error(StreamConfig(**change))


def test_run_config_validates_stream_settings_only_in_stream_mode():
    bad = StreamConfig(precision="float16")
    Settings(mode="flops", stream=bad).validate()
    with pytest.raises(UsageError, match="--precision"):
        Settings(mode="stream", stream=bad).validate()


def _room(n=1, memory=None, rule=1 << 25, free=None):
    return Room(n, memory, rule, "the rule's reason", free, "test memory")


def test_auto_size_is_the_rules_power_of_two_per_device():
    size = resolve_array_size(StreamConfig(), _room(n=8, rule=1 << 25))
    assert (size.elements, size.source) == (1 << 28, "rule")
    assert size.note == "--array_size=auto: 2^28 float64 elements: the rule's reason"


@pytest.mark.parametrize(
    "cache_mib, itemsize, sharing, per_device",
    [
        (300, 8, 1, 1 << 28),  # this host's L3: 1,200 MiB per array needs 2^28 doubles
        (480, 8, 1, 1 << 28),  # the host: 1,920 MiB per array, still 2^28
        (300, 8, 8, 1 << 25),  # eight CPU devices share it: 2^25 each, 2^28 together
        (256, 8, 1, 1 << 27),  # MI300's Infinity Cache: exactly 1 GiB of doubles
        (50, 4, 1, 1 << 26),  # an H100's L2 in float32: 200 MiB needs 2^25.6, so 2^26
        (50, 2, 1, 1 << 27),  # and in bfloat16
    ],
)
def test_rule_size_is_the_smallest_power_of_two_with_one_array_4x_the_cache(
    cache_mib, itemsize, sharing, per_device
):
    cache = CacheInfo(cache_mib * MIB, "test", "host")
    assert rule_elements_per_device(cache, itemsize, sharing) == per_device
    assert check_size(per_device * itemsize, sharing, cache).ok
    assert not check_size(per_device // 2 * itemsize, sharing, cache).ok


def test_unknown_cache_gets_babelstreams_2_to_the_25():
    assert rule_elements_per_device(CacheInfo(None, "unknown", "host"), 8, 1) == 1 << 25


def test_explicit_size_must_divide_over_the_devices():
    assert resolve_array_size(StreamConfig(array_size=1024), _room(8)).elements == 1024
    with pytest.raises(UsageError, match=r"--array_size=1001: not divisible across 8 devices"):
        resolve_array_size(StreamConfig(array_size=1001, devices="all"), _room(8))


def test_mib_and_fraction_sizes_round_down_to_a_device_multiple():
    size = resolve_array_size(StreamConfig(array_mib=1.0), _room())
    assert size.elements == MIB // 8 and size.source == "array_mib"
    size = resolve_array_size(StreamConfig(array_mib=0.001, precision="float32"), _room(8))
    assert size.elements == 256 and "rounded down" in size.note  # 262.1 elements
    # Three float64 arrays in half of 768 MiB per device, over 2 devices: 128 MiB per array.
    size = resolve_array_size(StreamConfig(array_fraction=0.5), _room(2, 768 * MIB))
    assert size.elements * 8 == 128 * MIB * 2


def test_fraction_needs_a_memory_figure_and_sizes_must_fit_free_memory():
    with pytest.raises(UsageError, match="--array_fraction=0.5: this backend does not report"):
        resolve_array_size(StreamConfig(array_fraction=0.5), _room())
    with pytest.raises(UsageError) as info:
        resolve_array_size(StreamConfig(array_size=MIB), _room(free=16 * MIB))
    assert str(info.value) == (
        "--array_size=1048576: three arrays of 8 MiB need 24 MiB per device, more than the "
        "16 MiB free (test memory)"
    )
    with pytest.raises(UsageError) as info:  # the rule's size: the way out is named
        resolve_array_size(StreamConfig(), _room(rule=1 << 28, free=4096 * MIB))
    assert str(info.value) == (
        "--array_size=auto (2^28 elements, the 4x-cache rule's size): three arrays of 2,048 "
        "MiB need 6,144 MiB per device, more than the 4,096 MiB free (test memory); free "
        "memory, or give a smaller size with --allow_small_arrays"
    )


def test_cache_rule_is_four_times_the_cache_for_each_array():
    cache = CacheInfo(32 * MIB, "test", "host")
    assert check_size(128 * MIB, 1, cache).ok
    small = check_size(127 * MIB, 1, cache)
    assert not small.ok and "one array 127.0 MiB < 4 x largest cache 32.0 MiB" in small.message
    # Local CPU devices share the host's cache: their shards add up.
    assert check_size(32 * MIB, 4, cache).ok
    assert not check_size(31 * MIB, 4, cache).ok
    assert check_size(1, 1, CacheInfo(None, "unknown", "device")).ok
    assert small.message.endswith("at least 128.0 MiB (--array_size, --array_mib)")


def test_a_training_run_too_small_for_the_cache_is_told_its_own_remedy(monkeypatch, caplog):
    """A training run's STREAM at start has no --array_size of its own: its note names
    --stream_record, not the flags of --mode=stream it was not given. It is no warning, logged
    on every training run, but part of the bandwidth's source, which the summary prints."""
    import logging

    from hpcai_jax.flops import roofline
    from hpcai_jax.stream import cache as stream_cache

    caplog.set_level(logging.WARNING, logger="absl")
    huge = CacheInfo(1 << 40, "test: 1 TiB", "host")
    monkeypatch.setattr(stream_cache, "cpu_cache", lambda: huge)
    monkeypatch.setattr(roofline, "_CPU_ELEMENTS", 1 << 12)
    _, source = roofline.stream_bandwidth("")
    warned = [r.getMessage() for r in caplog.records if "arrays too small" in r.getMessage()]
    assert warned == []
    assert "; arrays too small, this measures a cache: " in source, source
    assert source.endswith(f"({roofline.AT_START_REMEDY})") and "--array_size" not in source


def test_cpu_cache_sums_last_level_instances(tmp_path):
    for cpu, shared in ((0, "0-1"), (1, "0-1"), (2, "2-3")):
        for index, (level, kind, size) in enumerate(
            ((1, "Data", "32K"), (1, "Instruction", "32K"), (3, "Unified", "16384K"))
        ):
            d = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
            d.mkdir(parents=True)
            for name, value in (
                ("level", level),
                ("type", kind),
                ("size", size),
                ("shared_cpu_list", shared if level == 3 else str(cpu)),
            ):
                (d / name).write_text(f"{value}\n")
    info = cpu_cache(tmp_path)
    assert info.bytes == 32 * MIB and info.source == "sysfs: 2 x L3 16 MiB"


def test_this_machine_reports_a_cache():
    assert cpu_cache().bytes is not None


def test_docs_default_size_table_is_what_the_rule_gives():
    """docs/stream.md's table of default sizes per device kind, row by row, against the code."""
    import re

    from helpers import ROOT

    from hpcai_jax.stream.cache import ACCELERATOR_CACHE_BYTES, accelerator_cache

    text = (ROOT / "docs" / "stream.md").read_text()
    rows = re.findall(
        r"^\| ([^|]+) \| ([\d,]+) MiB \| 2\^(\d+) \([\d,]+ MiB\) \| 2\^(\d+) \([\d,]+ MiB\) \|$",
        text,
        re.M,
    )
    assert len(rows) >= 12, rows
    seen = set()
    for names, cache_mib, f64, f32 in rows:
        cache = CacheInfo(int(cache_mib.replace(",", "")) * MIB, "doc", "device")
        assert rule_elements_per_device(cache, 8, 1) == 1 << int(f64), names
        assert rule_elements_per_device(cache, 4, 1) == 1 << int(f32), names
        if names.startswith(("CPU", "any other")):
            continue
        for name in names.split(", "):
            assert accelerator_cache(name).bytes == cache.bytes, name
            seen.add(name)
    assert seen == {key for key, _ in ACCELERATOR_CACHE_BYTES}  # every kind the table knows
