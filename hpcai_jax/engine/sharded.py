"""Per-member arrays [M, ...] that a compiled step leaves sharded over `ensemble`, read on the
host: a process reads only its own members' shards (`local`, no collective), and per-member
figures are combined over the processes as one small all-gather of (member ids, values) per
process, each member's from the one process that owns it (docs/scale.md).
"""

from __future__ import annotations

import collections
import json

import numpy as np

from hpcai_jax.distributed import allgather


def local(array) -> dict[int, np.ndarray]:
    """member → its value, for the members whose shards this process holds (one read of each)."""
    out: dict[int, np.ndarray] = {}
    for shard in array.addressable_shards:
        start = (shard.index[0].start or 0) if shard.index else 0
        if start in out:  # another device of the same member (the `data` or `model` axis)
            continue
        for i, value in enumerate(np.asarray(shard.data)):
            out[start + i] = value
    return out


def owners(array) -> list[int]:
    """member → the first process whose devices hold its shard of `array` (from the sharding
    alone: the same list on every process)."""
    m = array.shape[0]
    first = [-1] * m
    for device, index in array.sharding.devices_indices_map(array.shape).items():
        for member in range(m)[index[0]] if index else range(m):
            if first[member] < 0 or device.process_index < first[member]:
                first[member] = device.process_index
    return first


def _width(owner: list[int]) -> int:
    """The most members one process owns: every process's all-gather block is this wide."""
    return max(collections.Counter(owner).values()) if owner else 0


def gather_owned(mine: dict[int, float], owner: list[int], process: int) -> np.ndarray:
    """[M] float64: member m's value from the process `owner[m]` (this process, `process`,
    gives `mine` for its own), by one all-gather of (ids, values) as wide as the most members
    one process owns: M scalars over the job, not [processes, M] (a collective)."""
    m = len(owner)
    width = _width(owner)
    ids = np.full((width,), -1, np.int64)
    values = np.full((width,), np.nan, np.float64)
    own = [member for member in range(m) if owner[member] == process]
    ids[: len(own)] = own
    values[: len(own)] = [mine[member] for member in own]
    out = np.full((m,), np.nan, np.float64)
    for p_ids, p_values in zip(allgather(ids), allgather(values), strict=True):
        for member, value in zip(p_ids, p_values, strict=True):
            if member >= 0:
                out[member] = value
    return out


def gather_owned_json(mine: dict, owner: list[int], process: int) -> list:
    """[M]: member m's JSON value (a quality that may be None, a dict of figures) from the process
    `owner[m]`, exactly as it gave it: as `gather_owned`, with each value sent as its JSON text
    (two all-gathers: ids and lengths, then the texts padded to the longest; a collective)."""
    m, width = len(owner), _width(owner)
    own = [member for member in range(m) if owner[member] == process]
    texts = [json.dumps(mine[member]).encode() for member in own]
    head = np.full((width, 2), -1, np.int64)
    head[: len(own), 0] = own
    head[: len(own), 1] = [len(t) for t in texts]
    heads = allgather(head)
    body = np.zeros((width, int(heads[..., 1].max(initial=0))), np.uint8)
    for j, text in enumerate(texts):
        body[j, : len(text)] = np.frombuffer(text, np.uint8)
    out: list = [None] * m
    for p_head, p_body in zip(heads, allgather(body), strict=True):
        for (member, length), row in zip(p_head, p_body, strict=True):
            if member >= 0:
                out[member] = json.loads(row[:length].tobytes())
    return out
