"""Peak FLOP/s: the datasheet table and the matmul micro-benchmark, and MFU."""

from __future__ import annotations

import time

import jax
import pytest

from hpcai_jax.flops.peaks import PEAKS, device_row, measure_matmul_peak, mfu, peak_flops_per_device


@pytest.mark.parametrize("device_kind, row", [
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
])
def test_device_kinds_map_to_datasheet_rows(device_kind, row):
    assert device_row(device_kind) == row


def test_float32_means_the_precision_jax_uses_by_default():
    # TF32 tensor cores on Ampere and later, plain FP32 on V100, one bf16 pass on TPU.
    assert peak_flops_per_device("NVIDIA A100-SXM4-80GB", "float32") == PEAKS["a100"]["tf32"]
    assert peak_flops_per_device("NVIDIA A100-SXM4-80GB", "float32_highest") == PEAKS["a100"]["fp32"]
    assert peak_flops_per_device("Tesla V100-SXM2-16GB", "float32") == PEAKS["v100-sxm"]["fp32"]
    assert peak_flops_per_device("TPU v4", "float32") == PEAKS["tpu-v4"]["bf16"]
    assert peak_flops_per_device("Tesla V100-SXM2-16GB", "bfloat16") is None  # no bf16 on V100
    for row in PEAKS.values():  # dense figures: tensor cores beat CUDA cores, bf16 ≥ tf32
        if "bf16" in row and "tf32" in row:
            assert row["bf16"] >= row["tf32"] > row["fp32"]


def test_unknown_device_has_no_datasheet_peak():
    assert peak_flops_per_device(jax.devices()[0].device_kind, "float32") is None
    assert peak_flops_per_device("NVIDIA H100 80GB HBM3", "int4") is None


def test_measured_matmul_peak_is_quick_and_consistent_with_xla():
    start = time.perf_counter()
    peak = measure_matmul_peak("float32", budget_s=0.5)
    elapsed = time.perf_counter() - start
    print(f"\nmeasured CPU float32 matmul peak: {peak / 1e9:.1f} GFLOP/s in {elapsed:.2f} s")
    assert elapsed < 3.0
    # The count behind the figure (2 n³ per matmul) is XLA's count of the same matmul.
    n = 256
    a = jax.ShapeDtypeStruct((n, n), "float32")
    assert jax.jit(lambda a, b: a @ b).lower(a, a).compile().cost_analysis()["flops"] == 2 * n**3
    assert 1e8 < peak < 1e13  # a CPU core does more than 0.1 GFLOP/s, no CPU 10 TFLOP/s


def test_mfu():
    assert mfu(8e12, 2.0, 4, 1e12) == pytest.approx(1.0)
    assert mfu(None, 2.0, 4, 1e12) is None
    assert mfu(8e12, 2.0, 4, None) is None
