"""What each row is judged against, and where that comes from.

Accelerators: datasheets. Memory bandwidth and peak FLOP/s are the engine's own tables
(hpcai_jax/stream/datasheet.py, hpcai_jax/flops/peaks.py); the link bandwidth inside a node is
here (`LINKS`). A device kind no table knows is named in its row, never guessed: the row WARNs.

CPUs have no datasheet figure that means anything for forced host devices sharing a few cores,
so the CPU expectations are figures measured on the machine class CI runs on (2 cores, 8 forced
host devices; `CPU_MACHINE_CLASS`), by the commands docs/node_check.md gives. They are lower
bounds of a healthy run rather than targets: the CPU thresholds are loose (the machine is
shared), and what they catch is a figure many times off (a kernel or link made slow).
"""

from __future__ import annotations

import bisect

GB = 1e9

# Bus bandwidth one device can sustain to the others of its node, one direction (bytes/s): what
# nccl-tests' busbw is compared with. (device-kind substring, bytes/s, source), most specific
# first. NVLink figures are the datasheets' total (both directions) halved.
LINKS: tuple[tuple[str, float, str], ...] = (
    ("h200 nvl", 300 * GB, "NVIDIA H200 datasheet (2024): NVL 2- or 4-way NVLink bridge 600 GB/s"),
    ("h200", 450 * GB, "NVIDIA H200 datasheet (2024): SXM NVLink 900 GB/s"),
    ("h100 nvl", 300 * GB, "NVIDIA H100 datasheet (2023): NVL NVLink bridge 600 GB/s"),
    ("h100 pcie", 64 * GB, "NVIDIA H100 datasheet (2023): PCIe Gen5 128 GB/s"),
    ("h100", 450 * GB, "NVIDIA H100 datasheet (2023): SXM NVLink 900 GB/s"),
    ("a100-pcie", 32 * GB, "NVIDIA A100 datasheet (2021): PCIe Gen4 64 GB/s"),
    ("a100 pcie", 32 * GB, "NVIDIA A100 datasheet (2021): PCIe Gen4 64 GB/s"),
    ("a100", 300 * GB, "NVIDIA A100 datasheet (2021): SXM NVLink 600 GB/s"),
    ("tpu v6", 224 * GB, "cloud.google.com/tpu/docs/v6e: ICI 3,584 Gbps per chip"),
    ("tpu v5 lite", 100 * GB, "cloud.google.com/tpu/docs/v5e: ICI 1,600 Gbps per chip"),
    ("tpu v5e", 100 * GB, "cloud.google.com/tpu/docs/v5e: ICI 1,600 Gbps per chip"),
    ("tpu v5", 300 * GB, "cloud.google.com/tpu/docs/v5p: ICI 4,800 Gbps per chip"),
    ("tpu v4", 150 * GB, "cloud.google.com/tpu/docs/v4: ICI 2,400 Gbps per chip"),
)


def link_bandwidth(device_kind: str) -> tuple[float, str] | None:
    """(bytes/s, source) of the intra-node link of this device kind, or None."""
    kind = device_kind.lower()
    for key, rate, source in LINKS:
        if key in kind:
            return rate, source
    return None


CPU_MACHINE_CLASS = "2-core CI machine, 8 forced host devices (docs/node_check.md)"
CPU_SOURCE = f"measured on the {CPU_MACHINE_CLASS}"

# Figures measured on CPU_MACHINE_CLASS; see docs/node_check.md for the commands.
CPU = {
    # STREAM Triad, float32, all 8 devices at once, aggregate bytes/s over the host.
    "stream_triad_host": 4.0 * GB,
    # Chained n×n float32/bfloat16/float16 matmuls, all devices at once, aggregate FLOP/s.
    "matmul_host": {"float32": 20e9, "bfloat16": 2e9, "float16": 2e9},
    # Training transform (crop-before-decode to 224², flip) per CPU-second.
    "jpeg_images_per_core_s": 150.0,
}

# Bus bandwidth (bytes/s) by (axis, collective): sizes (bytes) and busbw at each, measured on
# CPU_MACHINE_CLASS; a size in between reads the next smaller size's figure.
CPU_BUSBW: dict[tuple[str, str], tuple[tuple[int, ...], tuple[float, ...]]] = {}


def cpu_busbw(axis: str, op: str, size_bytes: int) -> float | None:
    """The CPU expectation for busbw of `op` on `axis` at `size_bytes`, or None."""
    table = CPU_BUSBW.get((axis, op))
    if table is None:
        return None
    sizes, figures = table
    i = max(0, bisect.bisect_right(sizes, size_bytes) - 1)
    return figures[i]
