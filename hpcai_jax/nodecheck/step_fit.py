"""The batch a check's training step is built at: no larger than the configured one, small enough
that the timed steps fit the item's time, and small enough that the step fits the memory room
(docs/node_check.md, Memory).

Memory is estimated before the compile (the state's bytes, and `example_bytes` per example: every
intermediate value of the forward pass, an upper bound) and the batch cut to fit the room; then
read from XLA's analysis of the compiled step before anything is allocated: the step is compiled
on the state's shapes alone, its arguments, outputs and temporaries per device (`step_bytes`)
are compared with the room, and a step that still does not fit is compiled again (at most twice)
at the batch a line through XLA's figures so far puts within the room (`next_batch`).
Time is estimated before the build from the analytic FLOPs of one example and the device's
matmul rate.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
from jax.extend import core as jcore

from hpcai_jax import config as C
from hpcai_jax.engine.compiled import StepBuild, compile_abstract_step
from hpcai_jax.engine.setup import RunSetup, build_setup
from hpcai_jax.nodecheck.memory import Room, capped_note
from hpcai_jax.telemetry.memory import memory_analysis

# A step's FLOP/s over the matmul rate of its dtype, for the time estimate: at the low end of
# what steps reach (a CPU's bfloat16 ResNet-50 step ran at 18 % of its matmul rate on the CI
# machine class, accelerators' at 30-50 %), so that the estimate errs towards fewer examples.
STEP_EFFICIENCY = 0.2


class DoesNotFit(Exception):
    """Even one example per member does not fit the room: the item is skipped, never run."""


def with_batch(config: C.RunConfig, batch: int) -> C.RunConfig:
    return dataclasses.replace(
        config, train=dataclasses.replace(config.train, batch_size=batch)
    ).validate()


def state_bytes_per_device(abstract_state) -> int:
    """The stacked state's bytes on one device (each leaf's shard)."""
    total = 0
    for leaf in jax.tree.leaves(abstract_state):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding else leaf.shape
        total += math.prod(shape) * leaf.dtype.itemsize
    return total


def step_bytes(compiled) -> int | None:
    """One device's memory while the step runs: arguments + outputs − aliased + temporaries."""
    m = memory_analysis(compiled)
    if not m:
        return None
    return m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]


@dataclasses.dataclass(frozen=True)
class Built:
    config: C.RunConfig  # the configuration built: its batch is the one that fits
    setup: RunSetup
    build: StepBuild
    need_bytes: int | None  # per device, XLA's analysis; None where the backend gives none
    seconds: float  # set-up and compiles, every attempt
    note: str  # the cap, or ""


def _values_bytes(jaxpr) -> int:
    """Bytes of every value an equation of `jaxpr` (and of the jaxprs inside it) outputs."""
    total = 0
    for eqn in jaxpr.eqns:
        for param in eqn.params.values():
            if isinstance(param, jcore.ClosedJaxpr):
                total += _values_bytes(param.jaxpr)
            elif isinstance(param, jcore.Jaxpr):
                total += _values_bytes(param)
        for var in eqn.outvars:
            shape = getattr(var.aval, "shape", None)
            if shape is not None:
                total += math.prod(shape) * var.aval.dtype.itemsize
    return total


def example_bytes(config: C.RunConfig) -> int:
    """What one example adds to one member's step, estimated before anything is compiled: every
    intermediate value of the member's forward pass at batch 1, traced, not run. XLA keeps fewer
    (it fuses; ResNet-50's step adds a third of this per example), so the estimate errs towards
    smaller batches; the compiled step's own figure is checked after."""
    from hpcai_jax.flops.crosscheck import count_config, forward_args, forward_fn

    counted = count_config(with_batch(config, 1))
    variables, x = forward_args(counted)
    return _values_bytes(jax.make_jaxpr(forward_fn(counted.workload))(variables, x).jaxpr)


def _fit_estimate(config: C.RunConfig, state, room: Room, using: int) -> tuple[C.RunConfig, str]:
    """`config` at the largest batch whose estimate (the state and its parameters' gradients,
    and `example_bytes` per example of each member of a device) fits `room`; the cut's words
    ("" when none)."""
    batch = config.train.batch_size
    fixed = state_bytes_per_device(state) + state_bytes_per_device(state.params)
    per_example = config.mesh.members_per_device * example_bytes(config)
    need = fixed + batch * per_example
    if room.fits(need, using):
        return config, ""
    fits = int((room.per_device(using) - fixed) / per_example)
    why = capped_note("batch", batch, max(fits, 0), need, room, using) + " (estimate)"
    if fits < 1:
        raise DoesNotFit(why + ": not one example per member fits")
    return with_batch(config, fits), why


MAX_BUILDS = 3  # a step compiled, then at most twice more at a smaller batch
# The share of the room above the fixed part a rebuild aims at: XLA's buffers do not grow exactly
# in line with the batch, and a build that misses by a few bytes costs another compile.
AIM = 0.9


def next_batch(measured: list[tuple[int, int]], state: int, room: Room, using: int) -> int:
    """The batch to build next from XLA's figures so far, (batch, bytes per device), none of
    which fit: where the line through the last two, or, after one, through it and the state
    alone (the rest taken as proportional to the batch), fills AIM of the room above its fixed
    part; always smaller than the last."""
    (b2, n2), room_bytes = measured[-1], room.per_device(using)
    slope, base = ((n2 - state) / b2, state) if b2 else (0.0, n2)
    if len(measured) > 1:
        b1, n1 = measured[-2]
        if b1 != b2 and (n1 - n2) / (b1 - b2) > 0:
            slope = (n1 - n2) / (b1 - b2)
            base = n2 - slope * b2
    fits = int(AIM * (room_bytes - base) / slope) if slope > 0 else b2 // 2
    return max(0, min(fits, b2 - 1))


def build_step(
    config: C.RunConfig,
    room: Room | None,
    compiler_options: dict | None = None,
    may_rebuild=lambda compile_s: True,
    devices: list | None = None,
) -> Built:
    """`config`'s step over `devices` (default all) at a batch that fits `room` (None: not
    checked): cut first by the estimate (`example_bytes`), then compiled on abstract state and
    compiled again at a smaller batch when XLA's figure does not fit and `may_rebuild(the first
    compile's seconds)`. Raises DoesNotFit when no batch fits or there is no time to build
    again; nothing is allocated before the step fits."""
    start, notes = time.perf_counter(), []
    setup = build_setup(config, devices=devices, open_data=False)
    using = len(setup.mesh.local_devices)
    if room is not None:
        config, note = _fit_estimate(config, setup.abstract_state, room, using)
        if note:
            notes.append(note)
            setup = build_setup(config, devices=devices, open_data=False)
    measured: list[tuple[int, int]] = []  # (batch, XLA's bytes per device) of each compile
    for attempt in range(MAX_BUILDS):
        build = compile_abstract_step(setup, compiler_options)
        need = step_bytes(build.compiled)
        if room is None or need is None or room.fits(need, using):
            took = time.perf_counter() - start
            return Built(config, setup, build, need, took, "; ".join(notes))
        batch = config.train.batch_size
        measured.append((batch, need))
        fits = next_batch(measured, state_bytes_per_device(setup.abstract_state), room, using)
        why = capped_note("batch", batch, fits, need, room, using)
        if fits < 1:
            raise DoesNotFit(why + ": not one example per member fits")
        if attempt == MAX_BUILDS - 1 or not may_rebuild(build.seconds):
            raise DoesNotFit(why + ": no time left to build it again")
        notes.append(why)
        config = with_batch(config, fits)
        setup = build_setup(config, devices=devices, open_data=False)
    raise AssertionError("unreachable")


@dataclasses.dataclass
class Sizing:
    """What sizes an item's steps: the memory room (measured when the item starts), the matmul
    rate per device of each dtype (FLOP/s: measured by the matmul item, else expected), and the
    seconds one example of one member took in the flagship step, by dtype, once measured."""

    room: Room | None = None
    rates: dict[str, float] = dataclasses.field(default_factory=dict)
    example_s: dict[str, float] = dataclasses.field(default_factory=dict)

    def seconds_per_example(self, config: C.RunConfig) -> float | None:
        """One example of one member on one device: measured, else analytic FLOPs over
        STEP_EFFICIENCY of the dtype's matmul rate (int8 steps compute around float32)."""
        dtype = config.model.dtype
        if dtype in self.example_s:
            return self.example_s[dtype]
        rate = self.rates.get("float32" if dtype == "int8" else dtype)
        if not rate:
            return None
        from hpcai_jax.flops.crosscheck import count_config

        flops = count_config(with_batch(config, 1)).train_step.per_example("xla")
        return flops / (STEP_EFFICIENCY * rate)

    def cap_for_time(
        self, config: C.RunConfig, seconds: float, calls: int
    ) -> tuple[C.RunConfig, str]:
        """`config` at the largest batch whose `calls` steps fit `seconds` (every member of a
        device runs on it in turn), and the row's words for the cut ("" when none)."""
        per = self.seconds_per_example(config)
        asked = config.train.batch_size
        if per is None:
            return config, ""
        members = config.mesh.members_per_device
        fits = max(1, int(max(seconds, 0.0) / (calls * members * per)))
        if fits >= asked:
            return config, ""
        note = (
            f"batch capped {asked} -> {fits} by time: {calls} steps of {members} x {fits} "
            f"examples at ~{per:.3g} s each fit {seconds:.3g} s"
        )
        return with_batch(config, fits), note
