"""What each row is judged against, and where that comes from.

Accelerators: datasheets. Memory bandwidth and peak FLOP/s are the engine's own tables
(hpcai_jax/stream/datasheet.py, hpcai_jax/flops/peaks.py); the link bandwidth inside a node is
here (`LINKS`). A device kind no table knows is named in its row, never guessed: the row WARNs.

CPUs have no datasheet figure that means anything for forced host devices sharing a few cores,
so the CPU rows compare with reference-machine figures: measured on one machine, the 2-core x86
one CI runs on (8 forced host devices; `CPU_MACHINE_CLASS`), by the commands docs/node_check.md
gives, and labelled so in every row (`CPU_SOURCE`): they are not what another host should
reach. They are lower bounds of a healthy run there rather than targets: the CPU thresholds are loose (the machine is
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


CPU_MACHINE_CLASS = "2-core x86 CI machine, 8 forced host devices"
# What a CPU row's figure is: the reference machine's lower bound, not this machine's expected
# figure (a ratio of 5 on a bigger host says only that it is not many times slower).
CPU_SOURCE = (
    f"reference: {CPU_MACHINE_CLASS}, its lower bound, not this host's expectation "
    "(docs/node_check.md)"
)

# Figures measured on CPU_MACHINE_CLASS (docs/node_check.md gives the commands and the records'
# values), rounded down.
CPU = {
    # STREAM Triad, float32, all devices of a process at once: aggregate bytes/s of the host
    # (measured 14 to 21 GB/s).
    "stream_triad_host": 14 * GB,
    # Chained 512² matmuls, all devices at once, aggregate FLOP/s of the host (measured float32
    # 22 to 94, bfloat16 68 to 140, float16 113 to 140 GFLOP/s).
    "matmul_host": {"float32": 20e9, "bfloat16": 60e9, "float16": 100e9},
}

_KIB = 1 << 10
_SIZES = tuple(_KIB << i for i in range(15))  # 1 KiB ... 16 MiB
_MB = 1e6
# Bus bandwidth (MB/s) by (processes, axis, collective) at each of _SIZES: a smoothed lower
# envelope of the runs on CPU_MACHINE_CLASS, which vary up to 10x from call to call. "one": 8
# devices in one process (collectives are memory copies); "many": 2 processes x 4 devices, one
# per simulated node, where XLA:CPU runs every collective over gloo, the intra-node ones too.
# Dispatch dominates the small sizes; sizes past the largest the runs reached (512 KiB intra,
# 4 MiB inter, 128 KiB world, in "many") repeat its figure.
CPU_BUSBW_TABLE = """
procs axis       op               1K   2K   4K   8K  16K  32K  64K 128K 256K 512K   1M   2M   4M   8M  16M
one   intra_node all_reduce      1.5    3    6   12   24   40   60  100  200  400  400  400  400  400  400
one   intra_node all_gather      1.2  2.4    5   10   16   30   30   60  100  100  100  100  100  100  100
one   intra_node reduce_scatter  1.2  2.4    5    9   16   25   30   60  130  130  130  130  130  130  130
many  intra_node all_reduce     0.15  0.3  0.6  1.2  1.5  1.5    3    6    8    8    8    8    8    8    8
many  intra_node all_gather     0.07  0.2  0.4  0.6    1  1.5    3    5    7    7    7    7    7    7    7
many  intra_node reduce_scatter  0.2  0.5    1  1.5    3    3    3    3    3    3    3    3    3    3    3
many  inter_node all_reduce     0.19  0.5    1  1.5  1.5    5   10   10   10   50   50   50   50   50   50
many  inter_node all_gather     0.13  0.3  0.3 0.35 0.35    2    4    8   15   30   40   40   40   40   40
many  inter_node reduce_scatter 0.13  0.4  0.4    1    2    2    2  2.5   10   15   15   15   15   15   15
many  world      all_reduce      0.1 0.14  0.3  0.5  0.8    1    3    5    5    5    5    5    5    5    5
many  world      all_gather      0.1 0.15 0.15  0.5  0.6    1    2    3    3    3    3    3    3    3    3
many  world      reduce_scatter  0.1  0.3  0.5    1  1.5    2    3    3    3    3    3    3    3    3    3
"""
CPU_BUSBW_MB: dict[tuple[str, str, str], tuple[float, ...]] = {
    tuple(line.split()[:3]): tuple(float(x) for x in line.split()[3:])
    for line in CPU_BUSBW_TABLE.strip().splitlines()[1:]
}


def cpu_busbw(axis: str, op: str, size_bytes: int, processes: int) -> float | None:
    """The CPU expectation (bytes/s) for busbw of `op` on `axis` at `size_bytes` with
    `processes` processes (the figure of the largest tabulated size not above it), or None."""
    figures = CPU_BUSBW_MB.get(("one" if processes == 1 else "many", axis, op))
    if figures is None:
        return None
    return figures[max(0, bisect.bisect_right(_SIZES, size_bytes) - 1)] * _MB
