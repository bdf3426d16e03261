"""The device's roofline and where the training step sits on it: attainable FLOP/s =
min(peak, bandwidth × arithmetic intensity), with the peak from the matmul measured at start,
the bandwidth from STREAM's Triad (measured at start on every device at once, or read from a
STREAM record given with --stream_record), and the step's arithmetic intensity from XLA's cost
analysis of the compiled step (FLOPs over bytes accessed, per device)."""

from __future__ import annotations

import jax

from hpcai_jax import metrics, records
from hpcai_jax.errors import UsageError
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.xla_cost import XlaCost

# Triad at start: float32 arrays of BabelStream's default 2^25 elements on a CPU (128 MiB each,
# past the 4x-largest-cache rule here), a tenth of device memory for the three arrays elsewhere;
# a few calls, the fastest kept.
_CPU_ELEMENTS = 1 << 25
_ACCELERATOR_FRACTION = 0.1
_CALLS = 5
# A training run's arrays are not its flags': a cache-sized measurement is replaced by a record.
AT_START_REMEDY = "give the run --stream_record=<a --mode=stream record with arrays that large>"


def stream_bandwidth(record_path: str) -> tuple[float, str]:
    """Per-device Triad bandwidth (bytes/s) and where it came from."""
    if record_path:
        try:
            record = records.read(record_path)
            is_stream = isinstance(record, records.StreamRecord)
            triad, why = record.kernels.get("triad") if is_stream else None, "no Triad figure"
        except records.RecordError as e:
            triad, why = None, str(e)
        per_device = triad.gb_per_s_per_device if triad else None
        if not isinstance(per_device, int | float):
            raise UsageError(
                f"--stream_record={record_path}: not a STREAM record with a Triad figure ({why})"
            )
        return per_device * 1e9, f"STREAM record {record_path} (Triad, per device)"
    from hpcai_jax.stream.benchmark import measure_bandwidth  # STREAM's kernels, timing, check

    cpu = jax.devices()[0].platform == "cpu"
    n = jax.device_count()  # the arrays are split over every device: a multiple of their count
    config = StreamConfig(
        array_size=_CPU_ELEMENTS // n * n if cpu else 0,
        array_fraction=0.0 if cpu else _ACCELERATOR_FRACTION,
        num_times=_CALLS,
        precision="float32",
        kernels="triad",
        devices="all",
        allow_small_arrays=True,  # the source below says where the rule is broken
    )
    # Not a warning on every training run: the source says it, and the run's summary prints it.
    result = measure_bandwidth(config, remedy=AT_START_REMEDY, warn=False)
    triad = next(f for f in result.figures if f.key == "triad")
    return (
        triad.per_device_gb_per_s * 1e9,
        f"STREAM Triad measured at start: all {triad.num_devices} devices at once, float32, "
        f"{result.size.elements} elements, best of {_CALLS - 1} samples of {result.burst} call(s), "
        "per device"
        + (
            ""
            if result.size_check.ok
            else f"; arrays too small, this measures a cache: {result.size_check.message}"
        ),
    )


def roofline(
    cost: XlaCost,
    peak_per_device: float | None,
    bandwidth: float,
    bandwidth_source: str,
    flops_per_s_per_device: float | None,
) -> dict:
    """The record's `roofline` section (per device)."""
    intensity = (
        cost.flops_per_device / cost.bytes_accessed_per_device
        if cost.flops_per_device and cost.bytes_accessed_per_device
        else None
    )
    attainable = metrics.attainable(peak_per_device, bandwidth, intensity)
    return {
        "peak_flops_per_s": peak_per_device,
        "bandwidth_bytes_per_s": bandwidth,
        "bandwidth_source": bandwidth_source,
        "ridge_point_flops_per_byte": peak_per_device / bandwidth if peak_per_device else None,
        "arithmetic_intensity_flops_per_byte": intensity,
        "attainable_flops_per_s": attainable,
        "achieved_flops_per_s": flops_per_s_per_device,
        "fraction_of_attainable": (
            flops_per_s_per_device / attainable if flops_per_s_per_device and attainable else None
        ),
        "bound": (
            None
            if intensity is None or not peak_per_device
            else "memory"
            if intensity * bandwidth < peak_per_device
            else "compute"
        ),
        "per": "device; intensity from XLA's flops and bytes accessed of the compiled step",
    }
