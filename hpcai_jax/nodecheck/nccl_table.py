"""The collective tables as nccl-tests prints them (src/common.cu and src/util.cu of
github.com/NVIDIA/nccl-tests): first its parameter header (threads, devices per process, the
sizes, warm-up and timed iterations) and the list of the devices, one line per rank; then one
table per collective and axis, a line per size with its count, type, reduction and root, then the
out-of-place and the in-place time, algbw, busbw and #wrong; under it the out-of-bounds count
and the average bus bandwidth over every size and both placements. Times in microseconds,
bandwidths in GB/s. docs/node_check.md shows one.
"""

from __future__ import annotations

from hpcai_jax.nodecheck.collectives import OPS, ROOT, Point, Run

TYPE = "float"  # nccl-tests' name of float32
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}  # the others: none
_LEAD = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"


def root(op: str) -> int:
    """nccl-tests' root column: the root rank of a rooted collective, else -1."""
    return ROOT if op == "broadcast" else -1


def header(run: Run) -> str:
    """nccl-tests' parameter line and its "Using devices" list. One thread per process drives
    the process's devices: nThread 1, nGpus its local devices. The timed iterations are the
    most a size gets: the budget may give a size fewer, which the record keeps."""
    lines = [
        f"# nThread 1 nGpus {run.local_devices} minBytes {run.min_bytes} maxBytes "
        f"{run.max_bytes} step: 2(factor) warmup iters: {run.warmup_iters} iters: {run.iters} "
        "agg iters: 1 validation: 1 graph: 0",
        f"# (iters: at most {run.iters} per size, fewer where the budget allows fewer: the "
        "record's `iters`)",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {r.rank:2d} Group  0 Pid {r.pid:6d} on {r.host:>10} device {r.device:2d} "
        f"[{r.bus_id}] {r.kind}"
        for r in run.ranks
    ]
    return "\n".join([*lines, "#"])


def fit(value: float, width: int) -> str:
    """`value` in `width` characters: two decimals, else one, else none, else an exponent."""
    for text in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _cells(time_s: float, algbw: float, busbw: float, wrong: int) -> str:
    return f"  {fit(time_s * 1e6, 7)}  {fit(algbw / 1e9, 6)}  {fit(busbw / 1e9, 6)}  {wrong:6d}"


def avg_busbw(points: list[Point]) -> float:
    """nccl-tests' "Avg bus bandwidth" (bytes/s): the mean busbw over every size, out of place
    and in place."""
    values = [b for p in points for b in (p.busbw, p.in_place_busbw)]
    return sum(values) / len(values) if values else 0.0


def table(points: list[Point]) -> str:
    """One collective on one axis: its sizes ascending."""
    first = points[0]
    out_of_bounds = sum(p.wrong + p.in_place_wrong for p in points)
    lines = [
        f"# {first.op} on {first.axis}, n = {first.n} per group",
        f"#{'':{len(_LEAD) - 1}}  {'out-of-place':^30}  {'in-place':^30}",
        f"{_LEAD}" + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" * 2,
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}" * 2,
    ]
    for p in sorted(points, key=lambda p: p.size_bytes):
        lines.append(
            f"  {p.size_bytes:>10}  {p.count:>12}  {TYPE:>8}  {REDOP.get(p.op, 'none'):>6}"
            + f"  {root(p.op):>6}"
            + _cells(p.time_s, p.algbw, p.busbw, p.wrong)
            + _cells(p.in_place_time_s, p.in_place_algbw, p.in_place_busbw, p.in_place_wrong)
        )
    lines += [
        f"# {'Out of bounds values':<20} : {out_of_bounds} {'FAILED' if out_of_bounds else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {avg_busbw(points) / 1e9:g}",
    ]
    return "\n".join(lines)


def tables(points: list[Point], run: Run | None = None) -> str:
    """`run`'s header (when given), then every (axis, collective) measured, axes in the order
    measured, collectives in OPS order."""
    out = [header(run)] if run is not None else []
    for axis in dict.fromkeys(p.axis for p in points):
        for op in OPS:
            at = [p for p in points if p.axis == axis and p.op == op]
            if at:
                out.append(table(at))
    return "\n\n".join(out)
