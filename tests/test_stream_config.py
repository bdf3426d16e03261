"""STREAM flag checks and size rules: every bad value is a one-line UsageError naming its flag."""

from __future__ import annotations

import pytest

from hpcai_jax.errors import UsageError
from hpcai_jax.settings import Settings
from hpcai_jax.stream.cache import CacheInfo, check_size, cpu_cache
from hpcai_jax.stream.config import DEFAULT_ARRAY_SIZE, StreamConfig, resolve_array_size

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
    ],
)
def test_bad_values_are_one_line_errors_naming_the_flag(change, flag):
    assert flag in _error(StreamConfig(**change))


def test_run_config_validates_stream_settings_only_in_stream_mode():
    bad = StreamConfig(precision="float16")
    Settings(mode="flops", stream=bad).validate()
    with pytest.raises(UsageError, match="--precision"):
        Settings(mode="stream", stream=bad).validate()


def test_default_size_is_babelstreams_2_to_the_25():
    size = resolve_array_size(StreamConfig(), 1, None)
    assert (size.elements, size.source) == (DEFAULT_ARRAY_SIZE, "default")
    assert DEFAULT_ARRAY_SIZE == 2**25


def test_explicit_size_must_divide_over_the_devices():
    assert resolve_array_size(StreamConfig(array_size=1024), 8, None).elements == 1024
    with pytest.raises(UsageError, match=r"--array_size=1001: not divisible across 8 devices"):
        resolve_array_size(StreamConfig(array_size=1001, devices="all"), 8, None)


def test_mib_and_fraction_sizes_round_down_to_a_device_multiple():
    size = resolve_array_size(StreamConfig(array_mib=1.0), 1, None)
    assert size.elements == MIB // 8 and size.source == "array_mib"
    size = resolve_array_size(StreamConfig(array_mib=0.001, precision="float32"), 8, None)
    assert size.elements == 256 and "rounded down" in size.note  # 262.1 elements
    # Three float64 arrays in half of 768 MiB per device, over 2 devices: 128 MiB per array.
    size = resolve_array_size(StreamConfig(array_fraction=0.5), 2, 768 * MIB)
    assert size.elements * 8 == 128 * MIB * 2


def test_fraction_needs_a_memory_figure_and_sizes_must_fit():
    with pytest.raises(UsageError, match="--array_fraction=0.5: this backend does not report"):
        resolve_array_size(StreamConfig(array_fraction=0.5), 1, None)
    with pytest.raises(UsageError, match="--array_size=1048576: three arrays need 24.0 MiB"):
        resolve_array_size(StreamConfig(array_size=MIB), 1, 16 * MIB)


def test_cache_rule_is_four_times_the_cache_for_the_three_arrays():
    cache = CacheInfo(32 * MIB, "test", "host")
    assert check_size(43 * MIB, 1, cache).ok  # 129 MiB >= 128 MiB
    small = check_size(42 * MIB, 1, cache)
    assert not small.ok and "126.0 MiB < 4 x largest cache 32.0 MiB" in small.message
    # Local CPU devices share the host's cache: their shards add up.
    assert check_size(11 * MIB, 4, cache).ok
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
