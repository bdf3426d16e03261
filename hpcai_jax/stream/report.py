"""BabelStream's figures and output: the table, its CSV form, and our JSON record.

Bandwidth is BabelStream's: the kernel's byte weight x elements x element size, over the
fastest call, the first iteration excluded; min, max and average seconds over the same calls.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcai_jax.records.stream import Kernel
from hpcai_jax.stream.kernels import KERNELS

BABELSTREAM_VERSION = "5.0"  # the output format followed
COLUMN = 12  # BabelStream's std::setw(12)
# How the table, the figure of merit and the record's reason say that the arrays break the rule.
BELOW_RULE = "below NERSC-10's 4x-cache rule"


@dataclasses.dataclass(frozen=True)
class KernelFigures:
    key: str  # "triad"
    label: str  # "Triad"
    bytes_moved: int  # per call, all devices
    min_s: float
    max_s: float
    avg_s: float
    num_devices: int
    xla_bytes_accessed: float | None  # XLA's cost analysis, all devices (cross-check)

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.min_s

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_s * 1e-9

    @property
    def per_device_gb_per_s(self) -> float:
        return self.gb_per_s / self.num_devices

    def rate(self, mibibytes: bool) -> float:
        """MBytes/sec (10^6) or MiBytes/sec (2^20), as BabelStream prints it."""
        return self.bytes_per_s * (2.0**-20 if mibibytes else 1.0e-6)


def kernel_figures(
    key: str,
    times_s: np.ndarray,
    elements: int,
    itemsize: int,
    num_devices: int,
    xla_bytes_accessed: float | None,
) -> KernelFigures:
    """Statistics of one kernel's calls, the first (warm-up) call excluded as in BabelStream."""
    timed = np.asarray(times_s)[1:]
    spec = KERNELS[key]
    return KernelFigures(
        key=key,
        label=spec.name,
        bytes_moved=spec.arrays_moved * elements * itemsize,
        min_s=float(timed.min()),
        max_s=float(timed.max()),
        avg_s=float(timed.mean()),
        num_devices=num_devices,
        xla_bytes_accessed=xla_bytes_accessed,
    )


def precision_label(precision: str) -> str:
    return {"float64": "double", "float32": "float", "bfloat16": "bfloat16"}[precision]


def header(
    *,
    implementation: str,
    kernels: str,
    num_times: int,
    precision: str,
    elements: int,
    itemsize: int,
    mibibytes: bool,
    placement: str,
) -> str:
    """BabelStream's preamble (version, implementation, run, precision, sizes)."""
    lines = [
        "BabelStream",
        f"Version: {BABELSTREAM_VERSION} (hpcai_jax port)",
        f"Implementation: {implementation}",
    ]
    if kernels == "all":
        lines.append(f"Running kernels {num_times} times")
    else:
        lines.append(f"Running {kernels} {num_times} times")
        lines.append(f"Number of elements: {elements}")
    lines.append(f"Precision: {precision_label(precision)}")
    array_bytes = elements * itemsize
    if mibibytes:
        unit, big, scale, big_scale = "MiB", "GiB", 2.0**-20, 2.0**-30
    else:
        unit, big, scale, big_scale = "MB", "GB", 1.0e-6, 1.0e-9
    lines.append(
        f"Array size: {array_bytes * scale:.1f} {unit} (={array_bytes * big_scale:.1f} {big})"
    )
    lines.append(
        f"Total size: {3 * array_bytes * scale:.1f} {unit} "
        f"(={3 * array_bytes * big_scale:.1f} {big})"
    )
    lines.append(f"Placement: {placement}")
    return "\n".join(lines)


def table(figures: list[KernelFigures], mibibytes: bool) -> str:
    """Function, MBytes/sec, Min (sec), Max, Average: left-aligned 12-wide columns."""
    rows = [
        "".join(
            h.ljust(COLUMN)
            for h in (
                "Function",
                "MiBytes/sec" if mibibytes else "MBytes/sec",
                "Min (sec)",
                "Max",
                "Average",
            )
        )
    ]
    for f in figures:
        rows.append(
            "".join(
                s.ljust(COLUMN)
                for s in (
                    f.label,
                    f"{f.rate(mibibytes):.3f}",
                    f"{f.min_s:.5f}",
                    f"{f.max_s:.5f}",
                    f"{f.avg_s:.5f}",
                )
            )
        )
    return "\n".join(rows)


@dataclasses.dataclass(frozen=True)
class DeviceFigures:
    """--stream_devices=each: one device's figures, measured with that device alone at work."""

    device_id: int  # jax.Device.id, unique in the job
    process_index: int
    figures: list[KernelFigures]
    passed: bool  # its validation


def slowest(devices: list[DeviceFigures]) -> list[KernelFigures]:
    """Per kernel, the slowest device's figures: what every device of the job reaches."""
    return [
        min((d.figures[i] for d in devices), key=lambda f: f.gb_per_s)
        for i in range(len(devices[0].figures))
    ]


def each_device_table(devices: list[DeviceFigures], mibibytes: bool) -> str:
    """One row per device, its best-call rate per kernel, and its Triad (or Nstream) against the
    median device's, so that a slow device stands out."""
    unit = "MiBytes/sec" if mibibytes else "MBytes/sec"
    merit = merit_kernel(devices[0].figures)
    median = float(np.median([merit_kernel(d.figures).gb_per_s for d in devices]))
    labels = [f.label for f in devices[0].figures]
    rows = [
        f"Each device alone ({len(devices)} devices, {unit}, fastest call):",
        "".join(h.ljust(COLUMN) for h in ("Device", "Process", *labels, f"{merit.label}/median")),
    ]
    for d in devices:
        cells = [str(d.device_id), str(d.process_index)]
        cells += [f"{f.rate(mibibytes):.3f}" for f in d.figures]
        cells.append(f"{merit_kernel(d.figures).gb_per_s / median:.3f}")
        rows.append("".join(c.ljust(COLUMN) for c in cells))
    return "\n".join(rows)


def per_device_table(figures: list[KernelFigures], mibibytes: bool) -> str:
    """With arrays sharded over several devices: each device's share of the aggregate rate."""
    unit = "MiBytes/sec" if mibibytes else "MBytes/sec"
    rows = [
        f"Per device ({figures[0].num_devices} devices, aggregate / devices):",
        "".join(h.ljust(COLUMN) for h in ("Function", unit)),
    ]
    for f in figures:
        rows.append(f.label.ljust(COLUMN) + f"{f.rate(mibibytes) / f.num_devices:.3f}")
    return "\n".join(rows)


def csv(
    figures: list[KernelFigures], num_times: int, elements: int, itemsize: int, mibibytes: bool
) -> str:
    """BabelStream's CSV; a per-device column is appended when the arrays span several devices."""
    rate_col = "max_mibytes_per_sec" if mibibytes else "max_mbytes_per_sec"
    columns = [
        "function",
        "num_times",
        "n_elements",
        "sizeof",
        rate_col,
        "min_runtime",
        "max_runtime",
        "avg_runtime",
    ]
    several = figures and figures[0].num_devices > 1
    if several:
        columns += ["n_devices", rate_col + "_per_device"]
    rows = [",".join(columns)]
    for f in figures:
        values = [
            f.label,
            num_times,
            elements,
            itemsize,
            f.rate(mibibytes),
            f.min_s,
            f.max_s,
            f.avg_s,
        ]
        if several:
            values += [f.num_devices, f.rate(mibibytes) / f.num_devices]
        rows.append(",".join(_csv_value(v) for v in values))
    return "\n".join(rows)


def each_device_csv(
    devices: list[DeviceFigures], num_times: int, elements: int, itemsize: int, mibibytes: bool
) -> str:
    """BabelStream's CSV with the device and its process in front: one row per device and kernel."""
    lines = []
    for d in devices:
        rows = csv(d.figures, num_times, elements, itemsize, mibibytes).splitlines()
        if not lines:
            lines.append("device,process," + rows[0])
        lines += [f"{d.device_id},{d.process_index},{row}" for row in rows[1:]]
    return "\n".join(lines)


def _csv_value(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def triad_only_summary(
    runtime: float, elements: int, itemsize: int, num_times: int, mibibytes: bool
) -> str:
    """BabelStream's Triad-only report: total runtime of the loop (every call, the first
    included) and the bandwidth over it.

    Our loop blocks after every call, so this includes num_times synchronisations that
    BabelStream's un-synchronised loop does not (a slightly pessimistic figure).
    """
    total_bytes = 3 * itemsize * elements * num_times
    bandwidth = total_bytes / runtime * (2.0**-30 if mibibytes else 1.0e-9)
    return (
        "--------------------------------\n"
        f"Runtime (seconds): {runtime:.5f}\n"
        f"Bandwidth ({'GiB/s' if mibibytes else 'GB/s'}):  {bandwidth:.3f}"
    )


def merit_kernel(figures: list[KernelFigures]) -> KernelFigures:
    """The figure of merit: Triad (BabelStream's), or Nstream when it runs alone."""
    return next((f for f in figures if f.key == "triad"), figures[-1])


def figure_of_merit(figures: list[KernelFigures], mibibytes: bool, note: str = "") -> str:
    """The closing line: the figure of merit's rate (`note`: what the figure is of)."""
    fom = merit_kernel(figures)
    unit = "MiBytes/sec" if mibibytes else "MBytes/sec"
    return (
        f"Figure of merit: {fom.label} {fom.rate(mibibytes):.3f} {unit} "
        f"(= {fom.gb_per_s:.3f} GB/s{note})"
    )


def metrics(figures: list[KernelFigures]) -> dict[str, float]:
    """Flat, namespaced figures for the record: `stream/<kernel>/gb_per_s` and friends."""
    out: dict[str, float] = {}
    for f in figures:
        prefix = f"stream/{f.key}"
        out[f"{prefix}/gb_per_s"] = f.gb_per_s
        out[f"{prefix}/gb_per_s_per_device"] = f.per_device_gb_per_s
        out[f"{prefix}/min_s"] = f.min_s
        out[f"{prefix}/max_s"] = f.max_s
        out[f"{prefix}/avg_s"] = f.avg_s
    return out


def figures_record(figures: list[KernelFigures]) -> dict[str, Kernel]:
    """The record's `kernels` section: kernel key → its figures (docs/record.md)."""
    return {
        f.key: Kernel(
            label=f.label,
            bytes_moved=f.bytes_moved,
            arrays_moved=KERNELS[f.key].arrays_moved,
            gb_per_s=f.gb_per_s,
            gb_per_s_per_device=f.per_device_gb_per_s,
            min_s=f.min_s,
            max_s=f.max_s,
            avg_s=f.avg_s,
            xla_bytes_accessed=f.xla_bytes_accessed,
        )
        for f in figures
    }


@dataclasses.dataclass(frozen=True)
class Printout:
    """All that BabelStream's output is rendered from: what a run measured (stream/benchmark.py)
    or what its record holds (`check` re-renders a packed run's stdout from it)."""

    implementation: str
    kernels: str  # --stream_kernels
    num_times: int
    precision: str
    elements: int
    itemsize: int
    mibibytes: bool
    csv: bool
    placement: str  # placement.placement_line
    figures: list[KernelFigures]  # with `devices`, the slowest device's per kernel
    devices: list[DeviceFigures] | None  # --stream_devices=each
    below_rule: str  # the size rule's message where the arrays break it, else empty
    triad_runtime_s: float | None = None  # --stream_kernels=triad: every call's seconds summed


def render(p: Printout) -> tuple[str, str]:
    """(BabelStream's report, its figure-of-merit line) as the run prints them."""
    below = f"; arrays {BELOW_RULE}" if p.below_rule else ""
    if p.devices is None:
        text = _report(p)
        fom = figure_of_merit(p.figures, p.mibibytes, below)
    else:
        if p.csv:
            text = each_device_csv(p.devices, p.num_times, p.elements, p.itemsize, p.mibibytes)
        else:
            text = "\n".join([_header(p), each_device_table(p.devices, p.mibibytes)])
        note = f"; the slowest of {len(p.devices)} devices, each measured alone{below}"
        fom = figure_of_merit(p.figures, p.mibibytes, note)
    if below and not p.csv:
        text += (
            f"\nArrays {BELOW_RULE} (--allow_small_arrays), this measures a cache: {p.below_rule}"
        )
    return text, fom


def stdout(p: Printout) -> str:
    """Everything the run prints on stdout: the report, then (unless --csv, which prints it on
    stderr) the figure of merit."""
    text, fom = render(p)
    return "\n".join([text] + ([] if p.csv else [fom])) + "\n"


def _header(p: Printout) -> str:
    return header(
        implementation=p.implementation,
        kernels=p.kernels,
        num_times=p.num_times,
        precision=p.precision,
        elements=p.elements,
        itemsize=p.itemsize,
        mibibytes=p.mibibytes,
        placement=p.placement,
    )


def _report(p: Printout) -> str:
    """The report of one placement: the header and the table, or the CSV lines."""
    if p.csv:
        return csv(p.figures, p.num_times, p.elements, p.itemsize, p.mibibytes)
    parts = [_header(p), table(p.figures, p.mibibytes)]
    if p.figures and p.figures[0].num_devices > 1:
        parts.append(per_device_table(p.figures, p.mibibytes))
    if p.kernels == "triad" and p.triad_runtime_s is not None:
        parts.append(
            triad_only_summary(p.triad_runtime_s, p.elements, p.itemsize, p.num_times, p.mibibytes)
        )
    return "\n".join(parts)
