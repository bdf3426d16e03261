"""Peak FLOP/s per device, from datasheets and from a matmul micro-benchmark, for MFU.

MFU (model FLOPs utilisation) = achieved FLOP/s per device / peak FLOP/s per device. Two peaks
are offered: the vendor's datasheet figure for the device kind and dtype (dense, no structured
sparsity), and one measured here with large matmuls (the only one on a CPU, and a check of
the datasheet figure elsewhere). The measured peak for MFU is taken with all of the process's
devices computing at once, as the training step runs them: 8 forced CPU devices on 2 cores each
get a fraction of what one device alone gets.

Which datasheet column applies to "float32": JAX computes float32 matmuls and convolutions at
its default precision with reduced-precision arithmetic where the hardware has it (TF32 tensor
cores on NVIDIA Ampere and later, one bfloat16 pass on TPU; docs.jax.dev "Matmul precision"),
so `peak_flops_per_device(kind, "float32")` returns the TF32 figure on A100/H100/H200, the
bfloat16 figure on TPUs, and the plain FP32 figure on V100. Ask for "float32_highest" for the
full-precision FP32 figure.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax import dtypes

T = 1e12

# Dense peak FLOP/s per device (one GPU, one TPU chip), by datasheet column:
# fp32 = FP32 without tensor cores, tf32/bf16/fp16 = tensor-core (or MXU) figures, no sparsity.
PEAKS: dict[str, dict[str, float]] = {
    # NVIDIA Tesla V100 datasheet (nvidia.com, "NVIDIA Tesla V100 GPU Accelerator", 2018):
    # SXM2 15.7 TFLOPS FP32 and 125 TFLOPS tensor (FP16); PCIe 14 / 112. No TF32 or bfloat16.
    "v100-sxm": {"fp32": 15.7 * T, "fp16": 125 * T},
    "v100-pcie": {"fp32": 14 * T, "fp16": 112 * T},
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com, 2021), SXM and PCIe: 19.5 FP32,
    # 156 TF32, 312 BF16/FP16 TFLOPS (the datasheet's 312/624 pairs are dense/sparse).
    "a100": {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
    # NVIDIA H100 Tensor Core GPU datasheet (nvidia.com, 2023); the tensor-core figures there are
    # with sparsity, dense = half. SXM: 67 FP32, 494.5 TF32, 989.5 BF16/FP16.
    # PCIe: 51 FP32, 378 TF32, 756.5 BF16/FP16 (1,513 sparse).
    # NVL: 60 FP32, 417.5 TF32, 835.5 BF16/FP16.
    "h100-sxm": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T},
    "h100-pcie": {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756.5 * T, "fp16": 756.5 * T},
    "h100-nvl": {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T},
    # NVIDIA H200 Tensor Core GPU datasheet (nvidia.com, 2024), sparse figures halved as above.
    # SXM: 67 FP32, 494.5 TF32, 989.5 BF16/FP16; NVL: 60 FP32, 417.5 TF32, 835.5 BF16/FP16.
    "h200-sxm": {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T},
    "h200-nvl": {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T},
    # Google Cloud TPU system architecture pages (cloud.google.com/tpu/docs/v4, v5e, v5p, v6e):
    # peak bf16 compute per chip 275 (v4), 197 (v5e), 459 (v5p), 918 (v6e) TFLOPS.
    "tpu-v4": {"bf16": 275 * T},
    "tpu-v5e": {"bf16": 197 * T},
    "tpu-v5p": {"bf16": 459 * T},
    "tpu-v6e": {"bf16": 918 * T},
}

# jax's device_kind strings → table rows. Checked in order; the first match wins.
_KIND_PATTERNS = (
    (r"v100.*pcie|pcie.*v100", "v100-pcie"),
    (r"v100", "v100-sxm"),
    (r"a100", "a100"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100.*nvl", "h100-nvl"),
    (r"h100", "h100-sxm"),
    (r"h200.*nvl", "h200-nvl"),
    (r"h200", "h200-sxm"),
    (r"tpu v4", "tpu-v4"),
    (r"tpu v5 ?lite|tpu v5e", "tpu-v5e"),
    (r"tpu v5p|tpu v5$", "tpu-v5p"),
    (r"tpu v6 ?lite|tpu v6e|trillium", "tpu-v6e"),
)

# dtype names → datasheet columns, in order of preference (first present wins). "float32" is the
# precision JAX uses by default for float32 matmuls (module docstring).
_DTYPE_COLUMNS = {
    "float32": ("tf32", "fp32", "bf16"),
    "float32_highest": ("fp32",),
    "tf32": ("tf32",),
    "bfloat16": ("bf16",),
    "float16": ("fp16", "bf16"),
}


def device_row(device_kind: str) -> str | None:
    """The PEAKS row for a jax `device_kind` string, or None for an unknown device (e.g. CPU)."""
    kind = device_kind.lower()
    for pattern, row in _KIND_PATTERNS:
        if re.search(pattern, kind):
            return row
    return None


def peak_flops_per_device(device_kind: str, dtype: str) -> float | None:
    """Datasheet peak FLOP/s of one device for matmuls in `dtype`; None when not known."""
    row = device_row(device_kind)
    if row is None or dtype not in _DTYPE_COLUMNS:
        return None
    for column in _DTYPE_COLUMNS[dtype]:
        if column in PEAKS[row]:
            return PEAKS[row][column]
    return None


@dataclasses.dataclass(frozen=True)
class MatmulPeak:
    """A matmul peak measured with several devices computing at once, as a sharded step runs them:
    on a CPU the devices share the cores, so one device alone overstates what each gets."""

    per_device: float  # FLOP/s: aggregate / num_devices
    aggregate: float  # FLOP/s of all the devices together
    num_devices: int
    size: int  # n of the n×n matrices
    method: str  # how it was measured, for the run record


def cpu_matmul_size(devices: int) -> int:
    """n of the matmuls on `devices` CPU devices: 1024 up to 16 devices, then the multiple of 128
    (at least 128) that keeps devices × n³ at most 16 × 1024³. A call also costs one dispatch
    per device besides its work, so n stays large enough for the work to dominate it."""
    if devices <= 16:
        return 1024
    return max(128, int(1024 * (16 / devices) ** (1 / 3) + 1e-9) // 128 * 128)


def measure_matmul_peak_all(
    dtype: str,
    devices=None,
    size: int | None = None,
    budget_s: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
) -> MatmulPeak:
    """Best of a few timed calls in which every device runs the same chained n×n matmuls on its
    own block (one jitted shard_map over a 1-D mesh of `devices`, default this process's).

    n defaults to 8192 on an accelerator. Each call chains the matmuls in one jitted loop so
    dispatch does not count. On a CPU the devices share the cores, so a call's total work is kept
    about constant as devices are added: the chain is shortened down to one 1024×1024 matmul per
    device, then, past 16 devices, n shrinks (`cpu_matmul_size`); otherwise the work, the time
    and the memory would grow with the device count.
    Compile and a warm-up call are excluded; timed calls stop after about `budget_s` seconds (at
    least 3 calls), read on `clock` (tests pass a fake one). FLOPs: 2 n³ per matmul, XLA's count.
    """
    local = jax.local_devices()
    devices = list(devices or local)
    k, platform = len(devices), devices[0].platform
    n = size or (cpu_matmul_size(k) if platform == "cpu" else 8192)
    reps = max(1, 4 // k) if platform == "cpu" else 20
    jdtype = dtypes.dtype(dtype)
    precision = jax.lax.Precision.HIGHEST if dtype == "float32_highest" else None
    mesh = Mesh(np.asarray(devices), ("d",))
    sharding = NamedSharding(mesh, P("d"))
    rng = np.random.default_rng(0)
    # Scaled so that a chain of products neither overflows nor underflows.
    blocks = (
        rng.standard_normal((n, n), np.float32).astype(jdtype),
        (rng.standard_normal((n, n), np.float32) / np.sqrt(n)).astype(jdtype),
    )
    a, b = (jax.make_array_from_callback((k * n, n), sharding, lambda _, x=x: x) for x in blocks)

    def chain(a, b):
        return jax.lax.fori_loop(0, reps, lambda _, x: jnp.dot(x, b, precision=precision), a)

    run = jax.jit(jax.shard_map(chain, mesh=mesh, in_specs=(P("d"), P("d")), out_specs=P("d")))
    run(a, b).block_until_ready()  # compile + warm-up
    best = float("inf")
    start = clock()
    calls = 0
    while calls < 3 or clock() - start < budget_s:
        t0 = clock()
        run(a, b).block_until_ready()
        best = min(best, clock() - t0)
        calls += 1
    aggregate = 2.0 * n**3 * reps * k / best
    scope = f"{'all ' if set(devices) == set(local) else ''}{k} device{'s' if k > 1 else ''}"
    method = (
        f"{scope} at once, {reps} chained {n}×{n} {dtype} matmul(s) per device per call, "
        f"best of {calls} calls; per device = aggregate / {k}"
    )
    return MatmulPeak(aggregate / k, aggregate, k, n, method)


def measure_matmul_peak(
    dtype: str, device=None, size: int | None = None, budget_s: float = 1.0
) -> float:
    """FLOP/s of one device computing alone (default this process's first), as `--mode=flops`
    reports it; devices that share a CPU each get less (`measure_matmul_peak_all`)."""
    device = device or jax.local_devices()[0]
    return measure_matmul_peak_all(dtype, [device], size, budget_s).aggregate


# What a training run measures at its start, for its MFU and roofline (docs/score.md §7), as a
# probe of run/probes.py, which keeps it per process and per host.


def matmul_peaks(dtype: str) -> dict:
    """The record's `peak_flops` but the bandwidth: per-device peak FLOP/s for MFU, the datasheet
    figure where the device is in the table, and a large-matmul figure measured with all local
    devices at once, as the step runs them (on a CPU the devices share the cores, so one device
    alone would overstate each one's share)."""
    kind = jax.local_devices()[0].device_kind
    measured = measure_matmul_peak_all(dtype)
    return {
        "device_kind": kind,
        "dtype": dtype,
        "datasheet_per_device": peak_flops_per_device(kind, dtype),
        "measured_per_device": measured.per_device,
        "measured_aggregate": measured.aggregate,
        "measured_method": measured.method,
    }
