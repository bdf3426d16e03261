"""Where STREAM's three arrays sit in host memory, and how far apart.

On CPUs, glibc maps each large array on its own, right below the last one: a, b and c end up
4 KiB apart beyond their size, where BabelStream's 2 MiB alignment leaves about 2 MiB (and
STREAM has its OFFSET). Set apart, the engine's kernels ran 2-6 % faster on the AMD EPYC host
of docs/stream.md (Arrays set apart, which also says what is not understood). So on CPUs the
arrays are allocated one by one with a spacer of one array's size between them, freed once
all three exist: Linux places each new mapping in the highest free gap that fits, so a spacer
as large as the arrays lands between them. What came of it is measured, not assumed: the smallest gap between two arrays on any
device goes into the record (`layout`). Accelerators' allocators keep their own arenas.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from hpcai_jax.stream.kernels import ARRAY_NAMES, START_A, START_B, START_C
from hpcai_jax.stream.placement import Placement

SPACED_ARRAYS = 5  # a, b, c and the two spacers, alive together while the arrays are made


@dataclasses.dataclass(frozen=True)
class Layout:
    spaced: bool  # a spacer was allocated between every two arrays
    min_gap_bytes: int | None  # the smallest gap between two arrays on one device; None: unknown
    note: str  # why the arrays were not spaced, or what could not be read; else empty


def spacers_fit(placement: Placement, bytes_per_device: int, free_per_device: int | None) -> bool:
    """Spacers on CPUs only, and only where the arrays and both spacers fit free memory."""
    if placement.platform != "cpu":
        return False
    return free_per_device is None or SPACED_ARRAYS * bytes_per_device <= free_per_device


def init_arrays(
    placement: Placement, elements: int, dtype, spaced: bool
) -> tuple[dict[str, jax.Array], Layout]:
    """a, b, c filled with BabelStream's start values in their shards, each made by its own
    call (one compiled fill, the value converted to `dtype` on the host as a constant would
    be); with `spaced`, a spacer of one array's size between them."""
    fill = jax.jit(
        lambda value: jnp.full((elements,), value, dtype), out_shardings=placement.sharded
    )
    arrays, spacers = {}, []
    for i, (name, value) in enumerate(zip(ARRAY_NAMES, (START_A, START_B, START_C), strict=True)):
        if spaced and i:
            spacers.append(jax.block_until_ready(fill(np.asarray(0, dtype))))
        arrays[name] = jax.block_until_ready(fill(np.asarray(value, dtype)))
    del spacers
    gap, note = smallest_gap(arrays)
    why = "" if spaced or placement.platform != "cpu" else "not spaced: 5 arrays do not fit"
    return arrays, Layout(
        spaced=spaced, min_gap_bytes=gap, note="; ".join(filter(None, [why, note]))
    )


def smallest_gap(arrays: dict[str, jax.Array]) -> tuple[int | None, str]:
    """The fewest bytes between the end of one array and the start of the next in memory, over
    this process's devices; (None, why) where the backend does not give addresses."""
    by_device: dict[object, list[tuple[int, int]]] = {}
    try:
        for array in arrays.values():
            for shard in array.addressable_shards:
                start = shard.data.unsafe_buffer_pointer()
                by_device.setdefault(shard.device, []).append((start, shard.data.nbytes))
    except Exception as e:  # noqa: BLE001 - not every backend or array kind gives addresses
        return None, f"addresses not available: {type(e).__name__}"
    gaps = []
    for spans in by_device.values():
        spans.sort()
        gaps += [nxt[0] - (start + size) for (start, size), nxt in itertools.pairwise(spans)]
    return (min(gaps), "") if gaps else (None, "one array per device")
