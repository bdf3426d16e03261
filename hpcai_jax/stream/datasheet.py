"""Datasheet memory bandwidth per accelerator, to read a STREAM figure as a fraction of it.

One device as JAX sees it (an MI250X shows two devices, one per GCD, each with half the
package's bandwidth). Matched as a substring of `device.device_kind`, lowercased, most specific
first; the sources are in docs/stream.md. No CPU row: a host's bandwidth depends on its DIMMs.
"""

from __future__ import annotations

TB = 1e12
GB = 1e9

# (device_kind substring, bytes/s, source)
MEMORY_BANDWIDTH: tuple[tuple[str, float, str], ...] = (
    ("h200", 4.8 * TB, "NVIDIA H200 datasheet (2024): 4.8 TB/s HBM3e, SXM and NVL"),
    ("h100 nvl", 3.9 * TB, "NVIDIA H100 datasheet (2023): NVL 3.9 TB/s"),
    ("h100 pcie", 2.0 * TB, "NVIDIA H100 datasheet (2023): PCIe 2 TB/s"),
    ("h100", 3.35 * TB, "NVIDIA H100 datasheet (2023): SXM 3.35 TB/s HBM3"),
    ("a100 80gb pcie", 1.935 * TB, "NVIDIA A100 datasheet (2021): 80GB PCIe 1,935 GB/s"),
    ("a100-pcie-80gb", 1.935 * TB, "NVIDIA A100 datasheet (2021): 80GB PCIe 1,935 GB/s"),
    ("a100-sxm4-80gb", 2.039 * TB, "NVIDIA A100 datasheet (2021): 80GB SXM 2,039 GB/s"),
    ("a100", 1.555 * TB, "NVIDIA A100 datasheet (2021): 40GB 1,555 GB/s"),
    ("mi300", 5.3 * TB, "AMD Instinct MI300X/MI300A data sheets: 5.3 TB/s HBM3"),
    ("mi250", 1.6384 * TB, "AMD Instinct MI250X/MI250 data sheets: 3.2768 TB/s per OAM, 2 GCDs"),
    ("tpu v6", 1638 * GB, "cloud.google.com/tpu/docs/v6e: 1638 GBps per chip"),
    ("tpu v5 lite", 819 * GB, "cloud.google.com/tpu/docs/v5e: 819 GBps per chip"),
    ("tpu v5e", 819 * GB, "cloud.google.com/tpu/docs/v5e: 819 GBps per chip"),
    ("tpu v5", 2765 * GB, "cloud.google.com/tpu/docs/v5p: 2765 GBps per chip"),
    ("tpu v4", 1200 * GB, "cloud.google.com/tpu/docs/v4: 1200 GBps per chip"),
)


def memory_bandwidth(device_kind: str) -> tuple[float, str] | None:
    """(bytes/s, source) of one device of this kind, or None when the table has no row."""
    kind = device_kind.lower()
    for key, rate, source in MEMORY_BANDWIDTH:
        if key in kind:
            return rate, source
    return None
