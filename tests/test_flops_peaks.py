"""Peak FLOP/s: the datasheet table and the matmul micro-benchmark, and MFU."""

from __future__ import annotations

import jax
import pytest

from hpcai_jax.flops.peaks import (
    cpu_matmul_size,
    device_row,
    measure_matmul_peak,
    measure_matmul_peak_all,
    peak_flops_per_device,
)


@pytest.mark.parametrize(
    "device_kind, row",
    [
        ("Tesla V100-SXM2-16GB", "v100-sxm"),
        ("Tesla V100-PCIE-32GB", "v100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("TPU v4", "tpu-v4"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v5p", "tpu-v5p"),
        ("TPU v6 lite", "tpu-v6e"),
        ("cpu", None),
    ],
)
def test_device_kinds_map_to_datasheet_rows(device_kind, row):
    assert device_row(device_kind) == row


# Dense figures (no structured sparsity) in FLOP/s, copied from the datasheets, not from PEAKS:
# NVIDIA Tesla V100 datasheet (2018): SXM2 15.7 TFLOPS FP32, 125 tensor (FP16); PCIe 14 FP32.
# NVIDIA A100 datasheet (2021): 19.5 FP32, 156 TF32, 312 BF16 (dense of the 312/624 pairs).
# NVIDIA H100 / H200 datasheets (2023 / 2024) print tensor-core figures with sparsity; dense is
# half: SXM 989.5 BF16 (1,979 sparse), 494.5 TF32 (989 sparse); H100 PCIe 756.5 BF16 (1,513 sparse).
# Cloud TPU system architecture pages (cloud.google.com/tpu/docs/v4, v5e, v5p, v6e): bf16 per
# chip 275 (v4), 197 (v5e), 459 (v5p), 918 (v6e) TFLOPS.
# "float32" is JAX's default matmul precision: TF32 on Ampere and later, FP32 on V100, one bf16
# pass on TPU; "float32_highest" is full FP32.
@pytest.mark.parametrize(
    "device_kind, dtype, tflops",
    [
        ("NVIDIA A100-SXM4-80GB", "float32", 156),
        ("NVIDIA A100-SXM4-80GB", "float32_highest", 19.5),
        ("NVIDIA A100-SXM4-80GB", "bfloat16", 312),
        ("Tesla V100-SXM2-16GB", "float32", 15.7),
        ("Tesla V100-SXM2-16GB", "float16", 125),
        ("Tesla V100-PCIE-32GB", "float32", 14),
        ("NVIDIA H100 80GB HBM3", "bfloat16", 989.5),
        ("NVIDIA H100 80GB HBM3", "float32", 494.5),
        ("NVIDIA H100 PCIe", "bfloat16", 756.5),  # not 756
        ("NVIDIA H200", "bfloat16", 989.5),
        ("TPU v4", "bfloat16", 275),
        ("TPU v4", "float32", 275),
        ("TPU v5 lite", "bfloat16", 197),
        ("TPU v5p", "bfloat16", 459),
        ("TPU v6 lite", "bfloat16", 918),
    ],
)
def test_datasheet_peaks(device_kind, dtype, tflops):
    assert peak_flops_per_device(device_kind, dtype) == pytest.approx(tflops * 1e12, rel=1e-9)


def test_no_datasheet_peak_for_a_column_the_device_lacks():
    assert peak_flops_per_device("Tesla V100-SXM2-16GB", "bfloat16") is None  # no bf16 on V100


def test_unknown_device_has_no_datasheet_peak():
    assert peak_flops_per_device(jax.devices()[0].device_kind, "float32") is None
    assert peak_flops_per_device("NVIDIA H100 80GB HBM3", "int4") is None


class _TickingClock:
    """A fake clock that moves `tick` seconds at every reading: each timed call lasts one tick."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


@pytest.mark.parametrize("budget_s, calls", [(0.5, 3), (1.0, 4), (2.0, 6)])
def test_timed_calls_stop_at_the_budget_on_the_clock_given(budget_s, calls):
    """At least 3 timed calls, then none once `budget_s` has passed on the clock: on a ticking
    clock (a reading for the start, 2 per call, 1 per check after the third call: 3c - 2 ticks
    after c calls) the count and the figure are known exactly, whatever the machine's load."""
    peak = measure_matmul_peak_all("float32", budget_s=budget_s, clock=_TickingClock(0.125))
    assert f"best of {calls} calls" in peak.method, peak.method
    n, reps, k = peak.size, 1, 8  # 8 devices: one 1024² matmul each (cpu_matmul_size)
    assert peak.aggregate == pytest.approx(2.0 * n**3 * reps * k / 0.125)


def test_measured_matmul_peak_is_consistent_with_xla():
    one = measure_matmul_peak("float32", budget_s=0.5)
    print(f"\nmeasured CPU float32 matmul peak: {one / 1e9:.1f} GFLOP/s")
    # The count behind the figure (2 n³ per matmul) is XLA's count of the same matmul.
    n = 256
    a = jax.ShapeDtypeStruct((n, n), "float32")
    assert jax.jit(lambda a, b: a @ b).lower(a, a).compile().cost_analysis()["flops"] == 2 * n**3
    assert 1e8 < one < 1e13  # a CPU core does more than 0.1 GFLOP/s, no CPU 10 TFLOP/s


def test_measured_peak_with_all_local_devices_at_once_is_each_devices_share():
    ones, peaks = [], []
    for _ in range(2):  # interleaved, so that a change in the machine's load hits both figures
        ones.append(measure_matmul_peak("float32", budget_s=0.25))
        peaks.append(measure_matmul_peak_all("float32", budget_s=0.25))
    one, peak = max(ones), max(peaks, key=lambda p: p.aggregate)
    print(
        f"\none device alone {one / 1e9:.1f} GFLOP/s; 8 at once {peak.aggregate / 1e9:.1f} "
        f"GFLOP/s, {peak.per_device / 1e9:.1f} each ({peak.method})"
    )
    assert (peak.num_devices, peak.size) == (8, 1024)
    assert peak.per_device * 8 == pytest.approx(peak.aggregate)
    assert 1e8 < peak.aggregate < 1e13
    assert peak.method.startswith("all 8 devices at once, 1 chained 1024×1024 float32 matmul")
    # 8 devices share the 2 cores: each gets ~0.06-0.1 of what one device alone gets here. Other
    # processes' busy threads lift the ratio (8 threads of ours claim more of the cores than one
    # device's): 12 busy loops on top of a load average of 6 measured 0.3-0.5. It nears 0.75
    # only with tens of busy threads per core; the bug this catches (one device timed alone and
    # reported as each device's figure) reads about 1.
    assert peak.per_device < 0.75 * one


def test_a_cpu_process_with_many_devices_keeps_the_matmul_work_constant():
    """One 1024² matmul per device grew the peak's work, time and memory with the devices; past
    16 devices n shrinks so that devices × n³ stays under 16 × 1024³, in multiples of 128."""
    assert [cpu_matmul_size(k) for k in (1, 8, 16)] == [1024] * 3
    assert [cpu_matmul_size(k) for k in (64, 256, 4096, 100_000)] == [640, 384, 128, 128]
    for k in range(17, 4097):
        n = cpu_matmul_size(k)
        assert n % 128 == 0 and k * n**3 <= 16 * 1024**3 < k * (n + 128) ** 3, k


def test_a_process_measures_its_devices_once_and_later_records_say_so(monkeypatch):
    from helpers import peaks_at_start

    from hpcai_jax.flops import host_cache, peaks
    from hpcai_jax.run import probes

    monkeypatch.setattr(host_cache, "_MEASURED", {})
    monkeypatch.delenv("HPCAI_JAX_STARTUP_CACHE", raising=False)  # the process's own reuse alone
    calls = []

    def peak_flops(dtype):
        calls.append(("matmul", dtype))
        return {"dtype": dtype, "measured_per_device": 1e9, "measured_method": "chained matmuls"}

    def stream_bandwidth(path):
        calls.append(("stream", path))
        return 5e9, "STREAM Triad measured at start"

    monkeypatch.setattr(peaks, "matmul_peaks", peak_flops)
    monkeypatch.setattr(probes, "stream_bandwidth", stream_bandwidth)
    first = peaks_at_start("float32", None)
    assert first["measured_method"] == "chained matmuls"
    assert first["bandwidth_source"] == "STREAM Triad measured at start"
    again = peaks_at_start("float32", None)
    assert again["measured_per_device"] == 1e9 and again["bandwidth_per_device"] == 5e9
    reused = "chained matmuls; measured by this process's first run"
    assert again["measured_method"] == reused
    assert again["bandwidth_source"].endswith("; measured by this process's first run")
    assert first["measured_method"] == "chained matmuls"  # the cached result left as it was
    given = peaks_at_start("bfloat16", (7e9, "STREAM record r.json"))
    assert given["bandwidth_source"] == "STREAM record r.json"
    assert given["measured_method"] == "chained matmuls"  # another dtype: measured afresh
    assert calls == [("matmul", "float32"), ("stream", ""), ("matmul", "bfloat16")]
