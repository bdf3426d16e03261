"""The trainer's compile stage: the ensemble step compiled ahead of timing, then the start-up
measurements of it, each a probe of run/probes.py timed as a start-up phase of its own (at
hundreds of devices per process they once took most of the start-up without a line:
docs/scale_sim.md): XLA's and the analytic FLOP counts, the collectives' traffic, memory per
device, and the peak FLOP/s and bandwidth the MFU and roofline divide by."""

from __future__ import annotations

from typing import NamedTuple

import jax
from absl import logging

from hpcai_jax.engine.compiled import compile_step
from hpcai_jax.engine.setup import RunSetup
from hpcai_jax.flops.crosscheck import FlopFigures
from hpcai_jax.flops.roofline import stream_bandwidth
from hpcai_jax.run import interrupt, probes
from hpcai_jax.telemetry.comm import CommVolume
from hpcai_jax.xla_cost import XlaCost


class MeasuredStep(NamedTuple):
    """The compiled step and its figures for the record."""

    compiled: jax.stages.Compiled | None
    cost: XlaCost
    flops: FlopFigures
    memory: dict
    peaks: dict
    comm: CommVolume | None  # process 0's alone
    compile_s: float = 0.0


def given_bandwidth(config) -> tuple[float, str] | None:
    """A --stream_record's bandwidth (flops/roofline.py), read before any work so that a bad
    one fails at once; None without one (STREAM then runs at start-up, `measure_step`)."""
    path = config.results.stream_record
    return stream_bandwidth(path) if path else None


def measure_step(
    setup: RunSetup, state, bandwidth: tuple[float, str] | None, run_id: str = ""
) -> MeasuredStep:
    """Compiles `setup`'s train step for `state` and runs the start-up probes on it
    (run/probes.py); `bandwidth`: a --stream_record's figure, else STREAM runs here; `run_id`
    names this run in what it keeps for later runs ($HPCAI_JAX_STARTUP_CACHE)."""
    interrupt.at("compile")  # a signal meanwhile is acted on after it (run/interrupt.py)
    _log_mesh(setup)
    config = setup.config
    shapes = (setup.mesh, setup.layout, config.train.batch_size, setup.workload.spec.fields)
    build = compile_step(setup.train_step, state, *shapes)
    m = probes.run(probes.Measuring(setup, state, build, bandwidth, run_id))
    return MeasuredStep(build.compiled, m.cost, m.flops, m.memory, m.peaks, m.comm, build.seconds)


def _log_mesh(setup: RunSetup) -> None:
    layout = setup.layout
    logging.info(
        "mesh %s: M=%d members, %d per device, P_degree=%d, P_model=%d, %d devices; "
        "strategy %s (%s)",
        dict(setup.mesh.shape),
        layout.ensemble_size,
        layout.members_per_device,
        layout.parallel_degree,
        layout.model_parallel,
        layout.num_devices,
        setup.plan.mapping.strategy,
        setup.member_strategy_why,
    )
