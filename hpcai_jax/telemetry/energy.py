"""Energy of the timed training region, where the device exposes a counter: NVIDIA GPUs through
NVML's total-energy counter (`nvidia-ml-py`, the `cuda` extra), read on every local device at the
start and the end of the timed steps and summed over processes. Anything else is reported as
not available, with why: never an estimate."""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np

from hpcai_jax.distributed import allgather


@dataclasses.dataclass(frozen=True)
class EnergyReading:
    available: bool
    why: str = ""
    millijoules: tuple[int, ...] = ()  # per local device, at the time of reading
    at_s: float = dataclasses.field(default_factory=time.perf_counter)


def _nvml_handles(devices) -> list:
    import pynvml  # the `cuda` extra

    pynvml.nvmlInit()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    order = (
        [int(v) for v in visible.split(",")]
        if visible and visible.replace(",", "").isdigit()
        else None
    )
    return [
        pynvml.nvmlDeviceGetHandleByIndex(
            order[d.local_hardware_id] if order else d.local_hardware_id
        )
        for d in devices
    ]


def read_energy(devices=None) -> EnergyReading:
    """The energy counters of this process's devices now (a local read, no collective)."""
    devices = list(devices or jax.local_devices())
    if devices[0].platform != "gpu":
        return EnergyReading(
            False, f"no energy counter on {devices[0].platform} ({devices[0].device_kind})"
        )
    try:
        import pynvml

        handles = _nvml_handles(devices)
        return EnergyReading(
            True, "", tuple(int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in handles)
        )
    except ImportError:
        return EnergyReading(False, "nvidia-ml-py is not installed (pip install -e '.[cuda]')")
    except Exception as e:  # noqa: BLE001 - NVML raises its own error types per driver
        return EnergyReading(False, f"NVML: {type(e).__name__}: {e}")


def energy_record(start: EnergyReading, end: EnergyReading, flops_per_s: float | None) -> dict:
    """Joules of every device of every process over the timed region, average watts and FLOPS
    per watt. A collective when several processes run: every process calls it."""
    ok = start.available and end.available
    local = np.asarray([sum(end.millijoules) - sum(start.millijoules) if ok else -1], np.int64)
    gathered = allgather(local).ravel()
    if not ok or (gathered < 0).any():
        return {"available": False, "why": start.why or end.why or "a process has no counter"}
    joules = float(gathered.sum()) / 1e3
    seconds = end.at_s - start.at_s
    watts = joules / seconds if seconds > 0 else None
    return {
        "available": True,
        "joules": joules,
        "seconds": seconds,
        "average_watts": watts,
        "flops_per_watt": flops_per_s / watts if flops_per_s and watts else None,
        "source": "NVML nvmlDeviceGetTotalEnergyConsumption, every local device, summed "
        "over processes, between the first and last timed step",
    }
