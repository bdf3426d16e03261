"""The devices' peak FLOP/s and memory bandwidth a training run measures at its start, for its
MFU and roofline (docs/score.md §7), measured once per process and device set."""

from __future__ import annotations

import jax

from hpcai_jax.flops.peaks import measure_matmul_peak_all, peak_flops_per_device
from hpcai_jax.flops.roofline import stream_bandwidth


def _peak_flops(dtype: str) -> dict:
    """Per-device peak FLOP/s for MFU: the datasheet figure where the device is in the table, and
    a large-matmul figure measured with all local devices at once, as the step runs them (on a
    CPU the devices share the cores, so one device alone would overstate each one's share)."""
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


_MEASURED: dict[tuple, object] = {}  # (what, local device ids) -> what a run measured at start
_REUSED = "; measured by this process's first run"


def _measured_once(what: tuple, measure) -> tuple[object, bool]:
    """(measure(), False) the first time this process asks for `what` on its local devices,
    then (that result, True): a process that trains several runs (an in-process sweep, the
    test suite) measures the same devices' peaks once, and its later records say so."""
    key = (*what, tuple(d.id for d in jax.local_devices()))
    if key in _MEASURED:
        return _MEASURED[key], True
    _MEASURED[key] = measure()
    return _MEASURED[key], False


def matmul_peaks(dtype: str) -> dict:
    """The record's `peak_flops` but the bandwidth: the datasheet and measured matmul peaks."""
    measured, again = _measured_once(("matmul", dtype), lambda: _peak_flops(dtype))
    return dict(measured, measured_method=measured["measured_method"] + (_REUSED if again else ""))


def bandwidth_at_start(bandwidth: tuple[float, str] | None) -> tuple[float, str]:
    """Per-device bandwidth and its source: a --stream_record's (given), else STREAM's Triad
    measured here."""
    if bandwidth:
        return bandwidth
    (per_device, source), again = _measured_once(("stream",), lambda: stream_bandwidth(""))
    return per_device, source + (_REUSED if again else "")


def peaks_at_start(dtype: str, bandwidth: tuple[float, str] | None) -> dict:
    """The record's `peak_flops`: the matmul peak with the per-device bandwidth, that of a
    --stream_record where one is given (None: STREAM's Triad measured here)."""
    peaks = matmul_peaks(dtype)
    peaks["bandwidth_per_device"], peaks["bandwidth_source"] = bandwidth_at_start(bandwidth)
    return peaks
