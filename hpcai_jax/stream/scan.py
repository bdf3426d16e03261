"""`--stream_scan`: bandwidth against array size, JUPITER's size scan (docs/stream.md, Size
scan). Every power of two from 2^15 elements up to the largest whose three arrays the device's
free memory holds, read once before anything is allocated; on this process's first device
alone. The record's `scan` section holds the figures; `lines` renders its table and
`write_plot` its plot from that section alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax

from hpcai_jax.dtypes import itemsize
from hpcai_jax.errors import UsageError
from hpcai_jax.records.stream import ScanPoint, StreamRecord, StreamScan
from hpcai_jax.stream import report
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.placement import make_placement
from hpcai_jax.stream.sizing import MIB

SCAN_START = 1 << 15  # elements per array, JUPITER's first size


def scan_sizes(free_bytes: int | None, nbytes: int, source: str) -> list[int]:
    """Every power of two from SCAN_START whose three arrays fit in `free_bytes`.

    Raises:
      UsageError: the free memory is unknown, or too small for the first size.
    """
    if free_bytes is None:
        raise UsageError(f"--stream_scan: the device's free memory is unknown ({source})")
    sizes, n = [], SCAN_START
    while 3 * n * nbytes <= free_bytes:
        sizes.append(n)
        n *= 2
    if not sizes:
        raise UsageError(
            f"--stream_scan: three arrays of 2^15 elements need {3 * SCAN_START * nbytes:,} B, "
            f"more than the {free_bytes:,} B free ({source})"
        )
    return sizes


def scanned(
    config: StreamConfig, record: StreamRecord, results_dir: str, measure, room_of
) -> StreamRecord:
    """The record with its `scan` section (and the plot beside it, process 0), or as it is
    without --stream_scan. `measure` and `room_of` are benchmark.py's `measure_bandwidth` and
    `_room` (passed in: benchmark.py calls this module)."""
    if not config.scan:
        return record
    placement = make_placement("one")
    nbytes = itemsize(config.precision)
    room = room_of(dataclasses.replace(config, array_size=SCAN_START), placement)
    sizes = scan_sizes(room.free_bytes_per_device, nbytes, room.free_source)
    points = []
    for n in sizes:
        at = dataclasses.replace(config, array_size=n, allow_small_arrays=True, devices="one")
        result = measure(at, placement=placement, warn=False)
        points.append(
            ScanPoint(
                elements=n,
                bytes_per_array=n * nbytes,
                kernels=report.figures_record(result.figures),
            )
        )
    path = Path(results_dir) / f"{record.run_id}-scan.png" if results_dir else None
    scan = StreamScan(
        device_name=str(placement.devices[0]),
        free_bytes=room.free_bytes_per_device,
        free_source=room.free_source,
        points=points,
        plot=None if path is None else path.name,
    )
    if path is not None and jax.process_index() == 0:
        write_plot(scan, path)
    return dataclasses.replace(record, scan=scan)


def _triad_average_mib(kernel) -> float:
    return kernel.bytes_moved / kernel.avg_s / MIB


def lines(record: StreamRecord, mibibytes: bool) -> list[str]:
    """The scan's table: elements, MiB per array, each kernel's rate, Triad's average in MiB/s."""
    scan = record.scan
    if scan is None or not scan.points:
        return []
    unit = "MiBytes/sec" if mibibytes else "MBytes/sec"
    scale = 2.0**-20 if mibibytes else 1e-6
    labels = [k.label for k in scan.points[0].kernels.values()]
    triad = "triad" in scan.points[0].kernels
    width = 14
    out = [
        f"Size scan on {scan.device_name} alone ({unit}, fastest call; {scan.free_bytes / MIB:,.0f} "
        f"MiB free, {scan.free_source}):",
        "".join(
            h.ljust(width)
            for h in ("Elements", "MiB/array", *labels, *(["Triad avg MiB/s"] if triad else []))
        ),
    ]
    for p in scan.points:
        cells = [str(p.elements), f"{p.bytes_per_array / MIB:.3f}"]
        cells += [f"{k.bytes_moved / k.min_s * scale:.3f}" for k in p.kernels.values()]
        if triad:
            cells.append(f"{_triad_average_mib(p.kernels['triad']):.3f}")
        out.append("".join(c.ljust(width) for c in cells))
    return out


def write_plot(scan: StreamScan, path: Path) -> None:
    """Bandwidth (fastest call, GB/s) of every kernel against MiB per array, log-log: the cache
    levels show as steps on a CPU."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), dpi=100)
    axes = figure.add_subplot()
    sizes = [p.bytes_per_array / MIB for p in scan.points]
    for key, kernel in scan.points[0].kernels.items():
        rates = [p.kernels[key].gb_per_s for p in scan.points]
        axes.plot(sizes, rates, marker="o", label=kernel.label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("MiB per array")
    axes.set_ylabel("GB/s (fastest call)")
    axes.set_title(f"STREAM size scan, {scan.device_name}")
    axes.grid(alpha=0.3, linewidth=0.6)
    axes.legend()
    figure.savefig(path)
