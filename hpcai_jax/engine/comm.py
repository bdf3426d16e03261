"""Communication volume of the compiled step, read from its optimized HLO: the bytes of every
collective, by the mesh axis it runs over, training traffic apart from the per-member metrics
gathered for the host (`step.METRICS_SCOPE`).

Bagging's promise is visible here: members never exchange training data, so the training
traffic over the `ensemble` axis must be 0; everything a member sends goes over `data` (its
gradient all-reduce and BatchNorm statistics). Bytes are each collective's result per device
(for an all-reduce, the payload every device contributes and receives), summed over the step.
A ring all-reduce of S bytes over n devices sends 2 (n − 1) / n × S per device. The training
traffic is also broken down by collective and element type (`by_collective`): read from the
optimized HLO it is what the backend moves (XLA:CPU widens bf16/f16 reductions to f32), read
from the HLO before XLA's passes it is what the program asked for.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
from jax.sharding import Mesh

from hpcai_jax.engine.step import METRICS_SCOPE

_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
_OP = re.compile(
    r"=\s*(?P<shape>\(.*?\)|\S+)\s+(?P<op>" + "|".join(_COLLECTIVES) + r")(?P<start>-start)?\("
)
_ARRAY = re.compile(r"\b(?P<dtype>pred|[suf]\d+|bf16|f8\w*)\[(?P<dims>[\d,]*)\]")
_BITS = {"pred": 8, "bf16": 16}
_GROUPS = re.compile(
    r"replica_groups=(?P<g>\{\{[\d,{}\s]*\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)"
)
_PAIRS = re.compile(r"source_target_pairs=(?P<g>\{\{[\d,{}\s]*\}\})")


@dataclasses.dataclass(frozen=True)
class CommVolume:
    bytes_per_step: dict[str, int]  # training traffic by mesh axis ("ensemble", "data", or both)
    metrics_bytes_per_step: dict[str, int]  # per-member figures gathered for the host
    collectives: int
    # Training traffic by axis, then "collective element-type" (e.g. "all-reduce f32") → bytes.
    by_collective: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "unit": "bytes of each collective's result per device, summed over one step",
        }


def _arrays(shape: str) -> list[tuple[str, int]]:
    """(element type, bytes) of every array in an HLO shape, e.g. `(f32[8,4], bf16[2])`."""
    out = []
    for m in _ARRAY.finditer(shape):
        dtype = m["dtype"]
        bits = _BITS.get(dtype) or int(re.sub(r"\D", "", dtype) or 8)
        dims = [int(d) for d in m["dims"].split(",") if d]
        out.append((dtype, int(np.prod(dims, dtype=np.int64)) * bits // 8))
    return out


def _nbytes(shape: str) -> int:
    return sum(n for _, n in _arrays(shape))


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


def comm_volume(hlo_text: str, mesh: Mesh) -> CommVolume:
    """Collectives of an SPMD-partitioned program whose device ids index `mesh.devices.flat`."""
    training: dict[str, int] = {}
    metrics: dict[str, int] = {}
    kinds: dict[str, dict[str, int]] = {}
    count = 0
    for line in hlo_text.splitlines():
        op = _OP.search(line)
        if op is None or "-done(" in line:
            continue
        groups = _PAIRS.search(line) if op["op"] == "collective-permute" else _GROUPS.search(line)
        axis = _axis(_groups(groups["g"]), mesh) if groups else ",".join(mesh.axis_names)
        if axis is None:
            continue
        shape = op["shape"]
        if op["start"] and op["op"] == "all-gather" and shape.startswith("("):
            shape = shape.rsplit(",", 1)[-1]  # (operand, result): count the result
        target = metrics if METRICS_SCOPE in line else training
        target[axis] = target.get(axis, 0) + _nbytes(shape)
        if target is training:
            table = kinds.setdefault(axis, {})
            for dtype, nbytes in _arrays(shape):
                key = f"{op['op']} {dtype}"
                table[key] = table.get(key, 0) + nbytes
        count += 1
    for table in (training, metrics):
        for name in mesh.axis_names:
            table.setdefault(name, 0)
    return CommVolume(training, metrics, count, kinds)
