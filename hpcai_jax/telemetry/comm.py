"""Communication of the compiled step, read from its optimized HLO: for every collective, the
mesh axis it runs over, its payload, the bytes each device puts on the wire under the algorithm
that runs it, and whether those bytes stay inside a node or cross the network. The per-member
metrics gathered for the host (`step.METRICS_SCOPE`) are counted apart from the training traffic.

Bagging's promise is visible here: members never exchange training data, so the training
traffic over the `ensemble` axis must be 0; everything a member sends goes over `data` (its
gradient reduction and BatchNorm statistics) and, with --model_parallel, over `model`.

Three figures per step, per device (docs/score.md §8 has the assumptions):

- payload: each collective's result per device (an all-reduce's buffer; an all-gather's
  gathered result; a reduce-scatter's shard), in the element type the backend runs it in: read
  from the optimized HLO, after XLA's passes (XLA:CPU widens bf16 reductions to f32; int8 is the
  s8 values plus the f32 scales actually gathered).
- wire: the bytes a device sends for it, ring algorithms over each collective's own replica
  group of n devices: all-reduce 2 (n − 1) / n × payload; all-gather and all-to-all
  (n − 1) / n × payload; reduce-scatter (n − 1) × payload (= (n − 1) / n of the buffer it
  reduces); collective-permute the payload from each source. A hierarchical or 2d_torus
  reduction is three collectives, each on its own group size. A model: NCCL may choose a tree,
  TPUs run their own torus algorithms, XLA:CPU copies through memory.
- link: the training wire bytes split into intra-node and inter-node. A ring over a group
  whose devices sit on k > 1 nodes is ordered node by node (as NCCL builds its rings), so k of
  its n hops cross the network; a permute's pair crosses when its two devices do.

Wire and link figures are averages over the mesh's devices, so intra + inter = Σ wire.
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction

import numpy as np
from jax.sharding import Mesh

from hpcai_jax.engine.step import METRICS_SCOPE

_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
_OP = re.compile(
    r"=\s*(?P<shape>\(.*?\)|\S+)\s+(?P<op>" + "|".join(_COLLECTIVES) + r")(?P<start>-start)?\("
)
_ARRAY = re.compile(r"\b(?P<dtype>pred|[suf]\d+|bf16|f8\w*|c\d+|token)\[(?P<dims>[\d,]*)\]")
_TOKEN = re.compile(r"\(|\)|" + _ARRAY.pattern)
_BITS = {"pred": 8, "bf16": 16, "token": 0}
_GROUPS = re.compile(
    r"replica_groups=(?P<g>\{\{[\d,{}\s]*\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)"
)
_PAIRS = re.compile(r"source_target_pairs=(?P<g>\{\{[\d,{}\s]*\}\})")
INTRA, INTER = "intra_node", "inter_node"


@dataclasses.dataclass(frozen=True)
class CommVolume:
    """Per device and step, by mesh axis ("ensemble", "data", "model", or several joined by
    commas); training traffic apart from the per-member figures gathered for the host."""

    payload_bytes: dict[str, int]
    wire_bytes: dict[str, int]
    metrics_payload_bytes: dict[str, int]
    metrics_wire_bytes: dict[str, int]
    link_bytes: dict[str, int]  # training wire bytes: intra_node, inter_node
    nodes: int  # nodes the mesh's devices sit on
    collectives: int
    # Training traffic by axis, then "collective element-type" (e.g. "all-reduce f32") → bytes.
    by_collective: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    wire_by_collective: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "unit": "bytes per device per step (wire and link: the mean over the mesh's devices)",
            "model": "ring algorithms over each collective's replica group, rings ordered node "
            "by node; payload = each collective's result, dtype after XLA's passes",
        }


def _parse(shape: str):
    """An HLO shape as a nested list of (element type, bytes) leaves: `(f32[8,4]{1,0}, s8[2])`
    → [("f32", 128), ("s8", 2)]. Layouts (`{1,0:T(8,128)}`) and comments are dropped first."""
    text = re.sub(r"/\*.*?\*/", "", shape)
    while True:
        stripped = re.sub(r"\{[^{}]*\}", "", text)
        if stripped == text:
            break
        text = stripped
    stack: list[list] = [[]]
    for m in _TOKEN.finditer(text):
        if m[0] == "(":
            stack.append([])
        elif m[0] == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            dtype = m["dtype"]
            bits = _BITS.get(dtype)
            if bits is None:
                bits = int(re.sub(r"\D", "", dtype.split("e")[0]) or 8)
            dims = [int(d) for d in m["dims"].split(",") if d]
            stack[-1].append((dtype, int(np.prod(dims, dtype=np.int64)) * bits // 8))
    return stack[0][0] if len(stack[0]) == 1 else stack[0]


def _leaves(tree) -> list[tuple[str, int]]:
    if isinstance(tree, tuple):
        return [tree]
    return [leaf for item in tree for leaf in _leaves(item)]


def _result(op: str, started: bool, shape: str) -> list[tuple[str, int]]:
    """(element type, bytes) of each array a collective delivers to a device. An async
    all-gather-start's or collective-permute-start's shape is (operands, results, ...): the
    results are its second element, an array or a tuple (a combined all-gather)."""
    tree = _parse(shape)
    if (
        started
        and op in ("all-gather", "collective-permute")
        and isinstance(tree, list)
        and len(tree) > 1
    ):
        tree = tree[1]
    return _leaves(tree)


def _groups(text: str) -> list[list[int]]:
    """Replica groups in either of XLA's spellings: {{0,1},{2,3}} or iota [G,S]<=[dims]T(perm)."""
    if text.startswith("{"):
        return [
            [int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([\d,\s]*)\}", text)
        ]
    shape, dims, perm = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text).groups()
    ids = np.arange(int(np.prod([int(d) for d in dims.split(",")]))).reshape(
        [int(d) for d in dims.split(",")]
    )
    if perm:
        ids = ids.transpose([int(p) for p in perm.split(",")])
    return ids.reshape([int(d) for d in shape.split(",")]).tolist()


def _axis(groups: list[list[int]], mesh: Mesh) -> str | None:
    """The mesh axes a collective's groups span (None: no device talks to another)."""
    names, shape = mesh.axis_names, mesh.devices.shape
    spanned = set()
    for group in groups:
        if len(group) < 2:
            continue
        coords = np.array([np.unravel_index(i, shape) for i in group])
        spanned |= {names[a] for a in range(len(names)) if len(set(coords[:, a])) > 1}
    return ",".join(n for n in names if n in spanned) or None


_RING_FACTOR = {
    "all-reduce": lambda n: Fraction(2 * (n - 1), n),
    "all-gather": lambda n: Fraction(n - 1, n),
    "all-to-all": lambda n: Fraction(n - 1, n),
    "reduce-scatter": lambda n: Fraction(n - 1),
}


def wire_and_links(
    op: str, groups: list[list[int]], payload: int, node_of: list[int]
) -> tuple[Fraction, Fraction]:
    """(bytes sent per device, of which inter-node), averaged over the `len(node_of)` devices,
    for one collective of `payload` result bytes per device. `groups` are replica groups (for
    a collective-permute, its source → target pairs); `node_of[i]` is the node of the device
    with id i (its position in the mesh)."""
    total, inter = Fraction(0), Fraction(0)
    if op == "collective-permute":
        for source, target in groups:
            if source != target:
                total += payload
                inter += payload if node_of[source] != node_of[target] else 0
    else:
        for group in groups:
            n = len(group)
            if n < 2:
                continue
            per_device = _RING_FACTOR[op](n) * payload
            nodes = len({node_of[i] for i in group})
            total += n * per_device
            inter += (nodes if nodes > 1 else 0) * per_device
    return total / len(node_of), inter / len(node_of)


_COMPUTATION = re.compile(r"^(?:ENTRY )?%?(?P<name>[\w.\-]+) \(.*\{\s*$")
_WHILE = re.compile(r"\bwhile\(.*\bbody=%?(?P<body>[\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(?P<n>\d+)"')


def _runs_per_line(lines: list[str]) -> list[int]:
    """How many times each line's instruction runs per call of the program: a while loop's
    body (the members' loop of --member_map=scan) runs its known trip count times, nested
    loops multiply; anything else once."""
    owner, current, trips = [], "", {}
    for line in lines:
        if m := _COMPUTATION.match(line):
            current = m["name"]
        owner.append(current)
        if (w := _WHILE.search(line)) and (t := _TRIPS.search(line)):
            trips[w["body"]] = (current, int(t["n"]))

    def runs(name: str, depth: int = 0) -> int:
        if name not in trips or depth > 16:
            return 1
        parent, n = trips[name]
        return n * runs(parent, depth + 1)

    return [runs(name) for name in owner]


def comm_volume(hlo_text: str, mesh: Mesh, device_nodes: dict[int, int] | None = None):
    """Collectives of an SPMD-partitioned program whose device ids index `mesh.devices.flat`.
    `device_nodes`: device id → node index (hpcai_jax.nodes.device_node_index); None: one node."""
    devices = list(mesh.devices.flat)
    node_of = [device_nodes[d.id] if device_nodes else 0 for d in devices]
    every = [list(range(len(devices)))]
    payload: dict[str, dict[str, int]] = {"train": {}, "metrics": {}}
    wire: dict[str, dict[str, Fraction]] = {"train": {}, "metrics": {}}
    kinds: dict[str, dict[str, int]] = {}
    wire_kinds: dict[str, dict[str, Fraction]] = {}
    links = {INTRA: Fraction(0), INTER: Fraction(0)}
    count = 0
    lines = hlo_text.splitlines()
    for line, times in zip(lines, _runs_per_line(lines), strict=True):
        op = _OP.search(line)
        if op is None or "-done(" in line:
            continue
        name = op["op"]
        found = _PAIRS.search(line) if name == "collective-permute" else _GROUPS.search(line)
        groups = _groups(found["g"]) if found else every
        axis = _axis(groups, mesh)
        if axis is None:
            continue
        scope = "metrics" if METRICS_SCOPE in line else "train"
        arrays = _result(name, bool(op["start"]), op["shape"])
        for dtype, one in arrays:
            nbytes = one * times
            sent, crossing = wire_and_links(name, groups, nbytes, node_of)
            payload[scope][axis] = payload[scope].get(axis, 0) + nbytes
            wire[scope][axis] = wire[scope].get(axis, 0) + sent
            if scope == "train":
                key = f"{name} {dtype}"
                table = kinds.setdefault(axis, {})
                table[key] = table.get(key, 0) + nbytes
                table = wire_kinds.setdefault(axis, {})
                table[key] = table.get(key, 0) + sent
                links[INTER] += crossing
                links[INTRA] += sent - crossing
        count += times
    for tables in (payload, wire):
        for table in tables.values():
            for axis_name in mesh.axis_names:
                table.setdefault(axis_name, 0)
    return CommVolume(
        payload_bytes=payload["train"],
        wire_bytes=_rounded(wire["train"]),
        metrics_payload_bytes=payload["metrics"],
        metrics_wire_bytes=_rounded(wire["metrics"]),
        link_bytes=_rounded(links),
        nodes=len(set(node_of)),
        collectives=count,
        by_collective=kinds,
        wire_by_collective={axis: _rounded(t) for axis, t in wire_kinds.items()},
    )


def cross_member(hlo_text: str, mesh: Mesh) -> list[str]:
    """The collectives of an SPMD-partitioned program (device ids index `mesh.devices.flat`)
    whose replica groups (or permute pairs) hold devices of two members: each such line,
    shortened. Bagging's step must have none (docs/scale.md)."""
    found = []
    for line in hlo_text.splitlines():
        op = _OP.search(line)
        if op is None or "-done(" in line:
            continue
        spec = _PAIRS.search(line) if op["op"] == "collective-permute" else _GROUPS.search(line)
        groups = _groups(spec["g"]) if spec else [list(range(mesh.devices.size))]
        axis = _axis(groups, mesh)
        if axis is not None and "ensemble" in axis.split(","):
            found.append(line.strip()[:200])
    return found


def _rounded(table: dict[str, Fraction]) -> dict[str, int]:
    return {k: round(v) for k, v in table.items()}
