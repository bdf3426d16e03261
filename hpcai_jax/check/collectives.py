"""Collective bandwidth like nccl-tests: all-reduce, all-gather and reduce-scatter on each mesh
axis of the node layout, over message sizes doubling from 1 KiB, with nccl-tests' algorithm and
bus bandwidths (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md).

The devices are laid out as a (node, local) mesh (hpcai_jax/nodes.py: a node is a host), and
each axis is measured with every group at once, as training runs them:

- intra_node: over `local`, the devices of one node (every node's group at the same time);
- inter_node: over `node`, one device per node (every local position's group at once): the
  network, as the middle stage of a hierarchical all-reduce crosses it;
- world: over both, every device in one group (nccl-tests' multi-node run).

One node has no inter_node axis, and its world is its intra_node, so only intra_node is
measured; nodes of one device each have only inter_node. Nodes with different device counts have
no (node, local) mesh: world only.

S, the size of a row, is nccl-tests': the bytes of the whole array (the all-reduce's buffer,
the all-gather's output, the reduce-scatter's input), float32. algbw = S / t, t the average
time of one call; busbw = algbw × 2(n−1)/n for all-reduce and × (n−1)/n for the other two,
n the devices in one group, so that busbw is comparable with a link's bandwidth whatever n.
Calls are issued back to back and waited for once (nccl-tests' timed loop), after one warm-up
call that also compiles; with several processes a row's time is the slowest process's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax import nodes
from hpcai_jax.check.budget import Allotment, agree
from hpcai_jax.distributed import allgather

OPS = ("all_reduce", "all_gather", "reduce_scatter")
NODE, LOCAL = "node", "local"
AXES = {"intra_node": LOCAL, "inter_node": NODE, "world": (NODE, LOCAL)}
MIN_BYTES = 1 << 10
ITEMSIZE = 4  # float32
MAX_ITERS = 20  # nccl-tests' default -n


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' correction from algorithm to bus bandwidth for n ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {op!r}")


def bandwidths(op: str, n: int, size_bytes: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s of one call of `op` on `size_bytes` over n ranks."""
    algbw = size_bytes / seconds
    return algbw, algbw * bus_factor(op, n)


def message_sizes(max_bytes: int) -> list[int]:
    """1 KiB, 2 KiB, ... doubling up to max_bytes (at least 1 KiB)."""
    sizes, size = [], MIN_BYTES
    while size <= max(max_bytes, MIN_BYTES):
        sizes.append(size)
        size *= 2
    return sizes


def max_message_bytes(device) -> int:
    """The largest message: 1 GiB on an accelerator (NVLink's and ICI's bus bandwidth is within a
    few per cent of its plateau from a few hundred MiB; nccl-tests runs reach it by 1 GiB), but at
    most 1/16 of a device's memory (an input and an output live at once; the rest is the other
    items' and the runtime's). 16 MiB on a CPU: 8 host devices moving 2 × 16 MiB each already
    run past the last-level cache, and CI has little time."""
    if device.platform == "cpu":
        return 16 << 20
    from hpcai_jax.stream.placement import device_memory_bytes

    memory = device_memory_bytes(device)
    return min(1 << 30, memory // 16) if memory else 1 << 30


@dataclasses.dataclass(frozen=True)
class Layout:
    """The devices as a (node, local) mesh, and the axes it offers."""

    mesh: Mesh
    axes: tuple[str, ...]  # names from AXES

    def group_size(self, axis: str) -> int:
        names = AXES[axis]
        names = names if isinstance(names, tuple) else (names,)
        return int(np.prod([self.mesh.shape[a] for a in names]))


def node_layout(devices=None) -> Layout:
    """A collective: every process calls it (node names are gathered)."""
    devices = list(jax.devices() if devices is None else devices)
    node_of = nodes.device_node_index(devices)
    by_node: dict[int, list] = {}
    for d in sorted(devices, key=lambda d: (node_of[d.id], d.id)):
        by_node.setdefault(node_of[d.id], []).append(d)
    counts = {len(ds) for ds in by_node.values()}
    if len(counts) == 1:
        grid = np.array([by_node[k] for k in sorted(by_node)])
        axes = ("intra_node",) if len(by_node) == 1 else ("intra_node", "inter_node", "world")
        if grid.shape[1] == 1 and len(by_node) > 1:  # one device per node: the network only
            axes = ("inter_node",)
    else:
        grid = np.array(devices).reshape(1, -1)
        axes = ("world",)
    return Layout(Mesh(grid, (NODE, LOCAL)), axes)


def _program(op: str, layout: Layout, axis: str, count: int) -> tuple[Callable, jax.Array]:
    """The jitted collective and its input: [nodes, local, elements] sharded one block per device."""
    names = AXES[axis]
    n = layout.group_size(axis)
    if op == "all_reduce":
        local, fn = count, lambda x: lax.psum(x, names)
    elif op == "all_gather":
        local, fn = count // n, lambda x: lax.all_gather(x, names, axis=2, tiled=True)
    else:
        local, fn = count, lambda x: lax.psum_scatter(x, names, scatter_dimension=2, tiled=True)
    spec = P(NODE, LOCAL, None)
    run = jax.jit(
        jax.shard_map(fn, mesh=layout.mesh, in_specs=spec, out_specs=spec, check_vma=False)
    )
    shape = (*layout.mesh.devices.shape, local)
    sharding = NamedSharding(layout.mesh, spec)
    x = jax.make_array_from_callback(
        shape, sharding, lambda index: np.ones((1, 1, local), np.float32)
    )
    return run, x


def _timed(op: str, run: Callable, x: jax.Array, iters: int) -> float:
    """Average seconds of one call of `op` over `iters` calls issued back to back (the test hook
    for a degraded link: a test replaces it)."""
    start = time.perf_counter()
    out = None
    for _ in range(iters):
        out = run(x)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / iters


@dataclasses.dataclass(frozen=True)
class Point:
    axis: str
    op: str
    n: int
    size_bytes: int
    count: int  # float32 elements of the whole array
    iters: int
    time_s: float  # average of one call, the slowest process's
    algbw: float  # bytes/s
    busbw: float  # bytes/s


def measure(
    layout: Layout, allotment: Allotment, max_bytes: int
) -> tuple[list[Point], dict[str, str]]:
    """Every axis of `layout`, sizes doubling from 1 KiB (always measured) until `max_bytes` or
    the axis's share of the allotment is spent. Returns the points and, per axis cut short, a
    note saying where."""
    raw: list[tuple[str, str, int, int, int, float]] = []
    cut: dict[str, str] = {}
    sizes = message_sizes(max_bytes)
    for i, axis in enumerate(layout.axes):
        n = layout.group_size(axis)
        share = allotment.left_s() / (len(layout.axes) - i)
        start = time.perf_counter()
        last_s = 0.0
        for size in sizes:
            count = max(n, size // ITEMSIZE // n * n)
            # The next size costs about twice the last one; all processes decide together. The
            # smallest size is always measured: a row needs a figure.
            if size > MIN_BYTES and agree(share - (time.perf_counter() - start) - 2 * last_s) <= 0:
                cut[axis] = f"sizes above {human_size(size // 2)} cut (budget)"
                break
            size_start = time.perf_counter()
            for op in OPS:
                run, x = _program(op, layout, axis, count)
                _timed(op, run, x, 1)  # compiles
                probe = _timed(op, run, x, 1)
                # The same count everywhere: a process with more calls would wait alone.
                iters = int(agree(min(MAX_ITERS, max(1, 0.02 * share / max(probe, 1e-9)))))
                raw.append((axis, op, n, count, iters, _timed(op, run, x, iters)))
            last_s = time.perf_counter() - size_start
    if not raw:
        return [], cut
    slowest = allgather(np.asarray([r[5] for r in raw], np.float64)).max(axis=0)
    points = []
    for (axis, op, n, count, iters, _), t in zip(raw, slowest, strict=True):
        size = count * ITEMSIZE
        algbw, busbw = bandwidths(op, n, size, float(t))
        points.append(Point(axis, op, n, size, count, iters, float(t), algbw, busbw))
    return points, cut


def human_size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


def tables(points: list[Point]) -> str:
    """One nccl-tests-like table per axis: size, count, then time (us), algbw and busbw (GB/s)
    of each collective."""
    out = []
    for axis in dict.fromkeys(p.axis for p in points):
        rows = [p for p in points if p.axis == axis]
        n = rows[0].n
        head = f"{'size (B)':>12} {'count':>11}" + "".join(f" | {op:^26}" for op in OPS)
        sub = f"{'':>12} {'(float32)':>11}" + " | {:>8} {:>8} {:>8}".format(
            "time us", "algbw", "busbw"
        ) * len(OPS)
        lines = [f"collectives on {axis} (n = {n} per group; GB/s)", head, sub]
        for size in dict.fromkeys(p.size_bytes for p in rows):
            at = {p.op: p for p in rows if p.size_bytes == size}
            cells = "".join(
                f" | {at[op].time_s * 1e6:8.1f} {at[op].algbw / 1e9:8.3f} {at[op].busbw / 1e9:8.3f}"
                if op in at
                else f" | {'-':>8} {'-':>8} {'-':>8}"
                for op in OPS
            )
            lines.append(f"{size:>12} {at[next(iter(at))].count:>11}{cells}")
        out.append("\n".join(lines))
    return "\n\n".join(out)
