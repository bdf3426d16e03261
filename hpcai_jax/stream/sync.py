"""Every process starts each timed call together, so the calls of a multi-process job overlap.

With arrays sharded over several processes, Copy, Mul, Add, Triad and Nstream have no
collective: each process would run its calls at its own pace, drift apart, and the "aggregate"
would add up calls that did not run at the same time. Before every call (outside its timing),
all devices of the placement meet in a compiled all-reduce of one element per device; a process
passes it only once every device has, and every device has finished the call before. The job's
time for a call is then the slowest process's, measured from the same start.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from hpcai_jax.stream.placement import Placement


class DeviceBarrier:
    """Calling it returns once every device of `placement` has called it (a blocking all-reduce).

    Compiled once, ahead of timing; a call costs one small all-reduce and a host sync (about the
    collective's latency: microseconds on NVLink, a millisecond or two over gloo on CPUs).
    """

    def __init__(self, placement: Placement):
        self._token = jax.jit(
            lambda: jnp.ones((placement.num_devices,), jnp.int32),
            out_shardings=placement.sharded,
        )()
        self._meet = (
            jax.jit(jnp.sum, out_shardings=placement.replicated).lower(self._token).compile()
        )

    def __call__(self) -> None:
        self._meet(self._token).block_until_ready()


def call_barrier(placement: Placement) -> DeviceBarrier | None:
    """The barrier a placement needs before each call: only arrays spanning several processes
    do (one process dispatches every device's shard of a call at once and waits for all)."""
    spans = {d.process_index for d in placement.devices}
    return DeviceBarrier(placement) if len(spans) > 1 else None
