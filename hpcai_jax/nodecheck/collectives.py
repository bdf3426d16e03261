"""Collective bandwidth like nccl-tests: all-reduce, all-gather, reduce-scatter, broadcast,
alltoall and sendrecv on each mesh axis of the node layout, over message sizes doubling from 1 KiB,
each out of place and in place, with nccl-tests' algorithm and bus bandwidths
(github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md) and its data check (#wrong: elements of the
result that differ from the analytic value). docs/node_check.md specifies it; nccl_table.py
prints it, collective_rows.py judges it.

The devices are laid out as a (node, local) mesh (hpcai_jax/nodes.py: a node is a host), and
each axis is measured with every group at once, as training runs them:

- intra_node: over `local`, the devices of one node (every node's group at the same time);
- inter_node: over `node`, one device per node (every local position's group at once): the
  network, as the middle stage of a hierarchical all-reduce crosses it;
- world: over both, every device in one group (nccl-tests' multi-node run).

One node has no inter_node axis, and its world is its intra_node, so only intra_node is
measured; nodes of one device each have only inter_node. Nodes with different device counts have
no (node, local) mesh: world only.

S, the size of a row, is nccl-tests': the bytes of the whole array (the all-reduce's,
broadcast's, alltoall's and sendrecv's buffer per rank, the all-gather's output, the
reduce-scatter's input), float32. algbw = S / t, t the average time of one call; busbw = algbw ×
`bus_factor` (n the devices in one group), so that busbw is comparable with a link's bandwidth
whatever n. Calls are issued back to back and waited for once (nccl-tests' timed loop), after
WARMUP_ITERS warm-up calls, the first of which also compiles and whose result is checked; with
several processes a row's time is the slowest process's. The data is made on the devices
(`filler`), never on the host.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from hpcai_jax import nodes
from hpcai_jax.distributed import allgather
from hpcai_jax.nodecheck.budget import Allotment, agree

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall", "sendrecv")
ROOT = 0  # broadcast's root rank in its group; nccl-tests prints -1 for collectives without one
NODE, LOCAL = "node", "local"
AXES = {"intra_node": LOCAL, "inter_node": NODE, "world": (NODE, LOCAL)}
MIN_BYTES = 1 << 10
ITEMSIZE = 4  # float32
MAX_ITERS = 20  # nccl-tests' default -n
WARMUP_ITERS = 5  # nccl-tests' default -w
# Memory per device for a message of S bytes, in units of S: the first result of each of the
# twelve (collective, placement) pairs, kept for the data check, and the buffers of the calls timed.
MEMORY_PER_BYTE = 15


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' correction from algorithm to bus bandwidth for n ranks."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
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


@dataclasses.dataclass(frozen=True)
class Rank:
    """One device as nccl-tests' "Using devices" list names it."""

    rank: int  # its position in the world group
    pid: int  # its process's
    host: str  # its node's name
    device: int  # its index on its host (the CUDA ordinal on a GPU)
    bus_id: str  # its PCI bus id where the runtime offers one, else "-"
    kind: str


@dataclasses.dataclass(frozen=True)
class Run:
    """nccl-tests' parameter header of one measurement: one thread per process drives its local
    devices (nThread 1, nGpus the local devices), sizes from min_bytes doubling to max_bytes,
    warmup_iters warm-up calls, at most `iters` timed calls per size."""

    local_devices: int
    min_bytes: int
    max_bytes: int
    warmup_iters: int
    iters: int
    ranks: tuple[Rank, ...]


def describe_run(layout: Layout, max_bytes: int) -> Run:
    """The header of a measurement over `layout` up to `max_bytes`. A collective (every
    process's pid and node name are gathered)."""
    pids = allgather(np.asarray([os.getpid()], np.int64)).reshape(-1)
    hosts = nodes.process_nodes()
    ranks = tuple(
        Rank(
            rank=i,
            pid=int(pids[d.process_index]),
            host=hosts[d.process_index],
            device=int(d.local_hardware_id if d.local_hardware_id is not None else d.id),
            bus_id=str(getattr(d, "pci_bus_id", None) or "-"),
            kind=d.device_kind,
        )
        for i, d in enumerate(layout.mesh.devices.flat)
    )
    return Run(
        jax.local_device_count(),
        MIN_BYTES,
        max(max_bytes, MIN_BYTES),
        WARMUP_ITERS,
        MAX_ITERS,
        ranks,
    )


def _rank(names):
    """This device's position in its group (inside shard_map)."""
    return lax.axis_index(names)


def filler(layout: Layout, axis: str, count: int, block: bool) -> Callable[[], jax.Array]:
    """The data check's input, made on the devices by a jitted function of no arguments:
    element g of the whole array is rank + 1 + g mod 5 on the device of group rank `rank`
    (exact in float32 after any sum). block: each device holds only its own block of the array
    (all-gather's out-of-place input), else the whole array."""
    names, n = AXES[axis], layout.group_size(axis)
    local = count // n if block else count

    def fill():
        rank = _rank(names)
        g = lax.broadcasted_iota(jnp.int32, (1, 1, local), 2) + (rank * local if block else 0)
        return (rank + 1 + g % 5).astype(jnp.float32)

    spec = P(NODE, LOCAL, None)
    return jax.jit(jax.shard_map(fill, mesh=layout.mesh, in_specs=(), out_specs=spec))


def _broadcast(names, backend: str) -> Callable:
    """ROOT's buffer to every rank of the group: XLA's collective-broadcast where JAX lowers it
    (GPU: `lax.pbroadcast`, NCCL's broadcast), elsewhere its definition, a sum of the root's
    buffer and zeros (an all-reduce's traffic: the row's note says so)."""
    if backend == "gpu":
        return lambda x: lax.pbroadcast(x, names, ROOT)
    return lambda x: lax.psum(jnp.where(_rank(names) == ROOT, x, jnp.zeros_like(x)), names)


def _collective(op: str, names, n: int, block: int, in_place: bool, backend: str) -> Callable:
    """One device's side of `op` on its [1, 1, elements] buffer."""

    def own(buf):
        return lax.dynamic_slice_in_dim(buf, _rank(names) * block, block, axis=2)

    if op == "all_reduce":
        return lambda x: lax.psum(x, names)
    if op == "all_gather":
        gather = lambda x: lax.all_gather(x, names, axis=2, tiled=True)  # noqa: E731
        return (lambda buf: gather(own(buf))) if in_place else gather
    if op == "reduce_scatter":
        scatter = lambda x: lax.psum_scatter(x, names, scatter_dimension=2, tiled=True)  # noqa: E731
        if not in_place:
            return scatter
        return lambda buf: lax.dynamic_update_slice_in_dim(
            buf, scatter(buf), _rank(names) * block, axis=2
        )
    if op == "broadcast":
        return _broadcast(names, backend)
    if op == "alltoall":
        return lambda x: lax.all_to_all(x, names, 2, 2, tiled=True)
    if op == "sendrecv":  # nccl-tests': each rank sends to the next and receives from the last
        return lambda x: lax.ppermute(x, names, [(r, (r + 1) % n) for r in range(n)])
    raise ValueError(f"unknown collective {op!r}")


def _program(op: str, layout: Layout, axis: str, count: int, in_place: bool) -> Callable:
    """The jitted collective on [nodes, local, elements], one block per device. In place,
    nccl-tests' layout: the result lands in the input's buffer (the input is donated, so XLA
    may write over it): all-gather's input is its own block of the output buffer, reduce-scatter
    writes its block back at its place in the input."""
    names, n = AXES[axis], layout.group_size(axis)
    backend = layout.mesh.devices.flat[0].platform
    fn = _collective(op, names, n, count // n, in_place, backend)
    spec = P(NODE, LOCAL, None)
    mapped = jax.shard_map(fn, mesh=layout.mesh, in_specs=spec, out_specs=spec, check_vma=False)
    return jax.jit(mapped, donate_argnums=(0,) if in_place else ())


def expected_value(op: str, g, n: int, block: int, rank=0):
    """The analytic result at element g of the whole array on group rank `rank` (`filler`'s
    data): a sum over the ranks for the reductions, the owner's value for all-gather, the
    root's for broadcast, block j of rank j's rank-th block for alltoall, the previous rank's
    for sendrecv."""
    if op == "all_gather":
        return g // block + 1 + g % 5
    if op == "broadcast":
        return ROOT + 1 + g % 5
    if op == "alltoall":
        return g // block + 1 + (rank * block + g % block) % 5
    if op == "sendrecv":
        return (rank - 1) % n + 1 + g % 5
    return n * (n + 1) // 2 + n * (g % 5)


def count_wrong(
    layout: Layout, axis: str, count: int, outs: dict[tuple[str, bool], jax.Array]
) -> dict[tuple[str, bool], int]:
    """nccl-tests' #wrong of each (op, in place) result at one size, in one program: elements of
    this process's devices' results that differ from the analytic value (a reduce-scatter checks
    its own block, in place where it wrote it)."""
    names, n = AXES[axis], layout.group_size(axis)
    block = count // n
    keys = list(outs)

    def wrong_one(op: str, in_place: bool, y):
        rank = _rank(names)
        if op == "reduce_scatter":
            if in_place:
                y = lax.dynamic_slice_in_dim(y, rank * block, block, axis=2)
            g = rank * block + lax.broadcasted_iota(jnp.int32, y.shape, 2)
        else:
            g = lax.broadcasted_iota(jnp.int32, y.shape, 2)
        bad = y != expected_value(op, g, n, block, rank).astype(jnp.float32)
        return jnp.sum(bad, dtype=jnp.int32)

    def wrong(*ys):
        return jnp.stack([wrong_one(*k, y) for k, y in zip(keys, ys, strict=True)])[None, None]

    spec = P(NODE, LOCAL, None)
    counts = jax.jit(
        jax.shard_map(wrong, mesh=layout.mesh, in_specs=(spec,) * len(keys), out_specs=spec)
    )(*outs.values())
    total = sum(
        np.asarray(s.data).reshape(-1, len(keys)).sum(axis=0) for s in counts.addressable_shards
    )
    return {k: int(v) for k, v in zip(keys, total, strict=True)}


def _timed(
    op: str, run: Callable, x: jax.Array, iters: int, in_place: bool
) -> tuple[float, jax.Array]:
    """Average seconds of one call of `op` over `iters` calls issued back to back, and the last
    result (in place, each call takes the last one's result: the donated buffer). The test hook
    for a degraded link: a test replaces it."""
    start = time.perf_counter()
    out = x
    for _ in range(iters):
        out = run(out if in_place else x)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / iters, out


@dataclasses.dataclass(frozen=True)
class Point:
    """One size of one collective on one axis, as nccl-tests prints it: out of place, then in
    place; times are one call on average, the slowest process's; bandwidths in bytes/s."""

    axis: str
    op: str
    n: int
    size_bytes: int
    count: int  # float32 elements of the whole array
    iters: int
    time_s: float
    algbw: float
    busbw: float
    wrong: int  # elements of the result that differ from the analytic value
    in_place_iters: int
    in_place_time_s: float
    in_place_algbw: float
    in_place_busbw: float
    in_place_wrong: int

    @property
    def best_busbw(self) -> float:
        return max(self.busbw, self.in_place_busbw)


def _measure_op(
    op: str, layout: Layout, axis: str, count: int, share: float, in_place: bool, fill
) -> tuple[int, float, jax.Array]:
    """(calls timed, seconds per call, the first call's result for the data check) of one
    collective at one size: WARMUP_ITERS warm-up calls (the first compiles, and its result is
    kept; the others' time is the probe), then as many calls as 2 % of the axis's share allows,
    up to MAX_ITERS. In place, the first result is kept and the later calls start from fresh
    data (each takes the last one's result: its buffer)."""
    run = _program(op, layout, axis, count, in_place)
    _, first = _timed(op, run, fill(), 1, in_place)
    x = fill()
    probe, out = _timed(op, run, x, max(1, WARMUP_ITERS - 1), in_place)
    x = out if in_place else x
    # The same count everywhere: a process with more calls would wait alone.
    iters = int(agree(min(MAX_ITERS, max(1, 0.02 * share / max(probe, 1e-9)))))
    seconds, _ = _timed(op, run, x, iters, in_place)
    return iters, seconds, first


def measure(
    layout: Layout, allotment: Allotment, max_bytes: int
) -> tuple[list[Point], dict[str, str]]:
    """Every axis of `layout`, sizes doubling from 1 KiB (always measured) until `max_bytes` or
    the axis's share of the allotment is spent; each size out of place, then in place. Returns
    the points and, per axis cut short, a note saying where."""
    raw: list[tuple[str, str, int, int, tuple, tuple]] = []
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
            fills = {b: filler(layout, axis, count, b) for b in (False, True)}
            measured, firsts = {}, {}
            for op in OPS:
                for p in (False, True):
                    fill = fills[op == "all_gather" and not p]
                    *measured[op, p], firsts[op, p] = _measure_op(
                        op, layout, axis, count, share, p, fill
                    )
            wrong = count_wrong(layout, axis, count, firsts)
            del firsts
            for op in OPS:
                oop, ip = ((*measured[op, p], wrong[op, p]) for p in (False, True))
                raw.append((axis, op, n, count, oop, ip))
            last_s = time.perf_counter() - size_start
    return (_points(raw) if raw else []), cut


def _points(raw: list[tuple[str, str, int, int, tuple, tuple]]) -> list[Point]:
    """The measured sizes as points: each time the slowest process's, each count of wrong
    values the sum over the processes (one all-gather of each, where the processes meet)."""
    times = np.asarray([[r[4][1], r[5][1]] for r in raw], np.float64)
    wrongs = np.asarray([[r[4][2], r[5][2]] for r in raw], np.float64)
    slowest, wrong = allgather(times).max(axis=0), allgather(wrongs).sum(axis=0)
    points = []
    for (axis, op, n, count, oop, ip), t, w in zip(raw, slowest, wrong, strict=True):
        size = count * ITEMSIZE
        algbw, busbw = bandwidths(op, n, size, float(t[0]))
        ip_algbw, ip_busbw = bandwidths(op, n, size, float(t[1]))
        points.append(
            Point(
                axis=axis,
                op=op,
                n=n,
                size_bytes=size,
                count=count,
                iters=oop[0],
                time_s=float(t[0]),
                algbw=algbw,
                busbw=busbw,
                wrong=int(w[0]),
                in_place_iters=ip[0],
                in_place_time_s=float(t[1]),
                in_place_algbw=ip_algbw,
                in_place_busbw=ip_busbw,
                in_place_wrong=int(w[1]),
            )
        )
    return points


def human_size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"
