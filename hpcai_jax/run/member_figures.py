"""Per-member vectors [M, ...] that the compiled step leaves sharded over `ensemble`, read on the
host. A process reads only its own members' shards (`local`), with no collective; `gather`
combines every process's members into [M] with one small all-gather, called where the processes
meet anyway (the periodic divergence check, the end of the run), so no step waits for another
member (docs/scale.md). `local` and `gather_owned` live in engine/sharded.py, where evaluation
reads its members' counts too.
"""

from __future__ import annotations

import numpy as np

from hpcai_jax.distributed import allgather
from hpcai_jax.engine.sharded import gather_owned as gather_owned
from hpcai_jax.engine.sharded import local


def _rows(array) -> dict[int, tuple[int, int]]:
    """device id → (first member, end) of `array`'s leading axis on that device, every device."""
    out = {}
    for device, index in array.sharding.devices_indices_map(array.shape).items():
        rows = range(array.shape[0])[index[0]] if index else range(array.shape[0])
        out[device.id] = (rows.start, rows.stop)
    return out


def local_mean(array) -> float:
    """The mean of this process's members' values (NaN members ignored): a log line's figure."""
    values = list(local(array).values())
    return float(np.nanmean(np.asarray(values, np.float64))) if values else float("nan")


def gather(arrays: list) -> np.ndarray:
    """[len(arrays), M, ...]: every member's value of each array (same shape and sharding),
    combined over the processes by one all-gather of each process's own members (a collective:
    every process must call it, with as many arrays)."""
    first = arrays[0]
    m = first.shape[0]
    mine = [local(a) for a in arrays]
    members = sorted(mine[0])
    # The most members any process holds, from the sharding alone: the same on every process.
    per_process: dict[int, set[int]] = {}
    rows = _rows(first)
    for device in first.sharding.device_set:
        lo, hi = rows[device.id]
        per_process.setdefault(device.process_index, set()).update(range(lo, hi))
    k = max(len(v) for v in per_process.values())
    ids = np.full((k,), -1, np.int64)
    ids[: len(members)] = members
    values = np.zeros((k, len(arrays), *first.shape[1:]), np.dtype(first.dtype))
    for j, member in enumerate(members):
        for i, table in enumerate(mine):
            values[j, i] = table[member]
    all_ids, all_values = allgather(ids), allgather(values)
    out = np.zeros((len(arrays), m, *first.shape[1:]), values.dtype)
    for p_ids, p_values in zip(all_ids, all_values, strict=True):
        for j, member in enumerate(p_ids):
            if member >= 0:
                out[:, member] = p_values[j]
    return out


def gather_tree(tree):
    """The same tree with every [M] leaf gathered (`gather`), None leaves left as they are."""
    import jax

    leaves, treedef = jax.tree.flatten(tree)
    if not leaves:
        return tree
    by_dtype: dict[str, list[int]] = {}
    for i, leaf in enumerate(leaves):
        by_dtype.setdefault(str(leaf.dtype), []).append(i)
    out = list(leaves)
    for indices in by_dtype.values():  # one all-gather per element type
        for i, value in zip(indices, gather([leaves[i] for i in indices]), strict=True):
            out[i] = value
    return jax.tree.unflatten(treedef, out)
