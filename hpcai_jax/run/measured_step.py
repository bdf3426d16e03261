"""The trainer's compile stage: the ensemble step compiled ahead of timing, and what the record
says about it, each part after the compile a start-up phase of its own (at hundreds of devices
per process they once took most of the start-up without a line: docs/scale_sim.md): XLA's and
the analytic FLOP counts (a loud warning when they disagree), the collectives' traffic, memory
per device, and the peak FLOP/s and bandwidth the MFU and roofline divide by."""

from __future__ import annotations

from typing import NamedTuple

import jax
from absl import logging

from hpcai_jax import nodes
from hpcai_jax.engine.compiled import compile_step, count_lowered
from hpcai_jax.engine.setup import RunSetup
from hpcai_jax.flops import analytic, counted_cache, host_cache
from hpcai_jax.flops import crosscheck as crosscheck_module
from hpcai_jax.flops.crosscheck import FlopFigures, analytic_figures, crosscheck
from hpcai_jax.flops.peaks import bandwidth_at_start, matmul_peaks
from hpcai_jax.flops.roofline import stream_bandwidth
from hpcai_jax.run import interrupt, startup
from hpcai_jax.telemetry.comm import CommVolume, comm_volume, cross_member
from hpcai_jax.telemetry.memory import memory_analysis
from hpcai_jax.xla_cost import XlaCost, xla_cost

# The note of a cross-check whose analytic counts an earlier run kept (flops/host_cache.py).
KEPT_COUNTS = "the analytic counts were "


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
    """Compiles `setup`'s train step for `state` and measures it (the module docstring);
    `bandwidth`: a --stream_record's figure, else STREAM runs here; `run_id` names this run in
    what it keeps for later runs ($HPCAI_JAX_STARTUP_CACHE, flops/host_cache.py)."""
    interrupt.at("compile")  # a signal meanwhile is acted on after it (run/interrupt.py)
    _log_mesh(setup)
    config = setup.config
    shapes = (setup.mesh, setup.layout, config.train.batch_size, setup.workload.spec.fields)
    build = compile_step(setup.train_step, state, *shapes)
    counted = None
    with startup.phase("counting"):  # the members' loops written out: O(members) to trace
        if setup.count_step is not None:
            counted, cached = counted_cache.counted(
                build.lowered, lambda: count_lowered(setup.count_step, state, *shapes)
            )
            logging.info(
                "counting program (the members' loops written out): %s",
                f"read from {counted_cache.folder()}" if cached else "traced and lowered",
            )
    with startup.phase("crosscheck"):
        layout = setup.layout
        cost = xla_cost(
            build.compiled, layout.num_devices, build.lowered, counted, setup.member_loop_trips
        )
        cross = _crosscheck(setup, build.lowered, cost, run_id)
    _log_flops(build.seconds, cost, cross)
    with startup.phase("traffic"):
        node_index = nodes.device_node_index(list(setup.mesh.devices.flat))  # a collective
        # The HLO's traffic is read once, for the record process 0 writes.
        comm = (
            _traffic(build.compiled, setup.mesh, node_index) if jax.process_index() == 0 else None
        )
    memory = memory_analysis(build.compiled)
    _log_memory(memory)
    with startup.phase("peaks"):
        peaks = matmul_peaks(config.model.dtype, run_id)
    with startup.phase("stream"):  # every process: STREAM spans them
        bandwidth = bandwidth_at_start(bandwidth, run_id)
        peaks["bandwidth_per_device"], peaks["bandwidth_source"] = bandwidth
    return MeasuredStep(build.compiled, cost, cross, memory, peaks, comm, build.seconds)


def _crosscheck(setup: RunSetup, lowered, cost: XlaCost, run_id: str) -> FlopFigures:
    """The cross-check, its analytic counts kept per program where $HPCAI_JAX_STARTUP_CACHE is
    set: the step's lowered text, the settings they read and the counting code's source."""
    config, devices = setup.config, list(setup.mesh.devices.flat)
    what = (
        "crosscheck",
        counted_cache.key(lowered),
        repr((config.model, config.mesh, config.optim, config.train.batch_size)),
        [d.id for d in devices],
        host_cache.code_digest(analytic, crosscheck_module),
    )
    figures, source = host_cache.kept(
        what, lambda: analytic_figures(config, devices, setup), run_id
    )
    cross = crosscheck(config, cost.flops, devices, figures)
    if source:
        cross.notes.append(f"{KEPT_COUNTS}{source}")
    return cross


def _log_flops(compile_s: float, cost: XlaCost, cross: FlopFigures) -> None:
    logging.info(
        "compiled the ensemble step in %.1f s; %s FLOPs per step from %s (%s)%s",
        compile_s,
        f"{cross.train_step_flops:.4g}",
        cross.train_step_flops_source,
        cross.source_reason,
        f"; {cost.note}" if cost.note else "",
    )
    if cross.crosscheck_ok is False:
        logging.warning(
            "FLOP CROSS-CHECK FAILED: %s. FLOPS use %s; the record says so "
            "(flops.crosscheck_ok = false)",
            cross.source_reason,
            cross.train_step_flops_source,
        )


def _log_memory(memory: dict) -> None:
    if memory:
        logging.info(
            "compiled step memory per device: arguments %.1f MiB, outputs %.1f MiB, "
            "temporaries %.1f MiB",
            memory["argument_bytes"] / 2**20,
            memory["output_bytes"] / 2**20,
            memory["temp_bytes"] / 2**20,
        )


def _traffic(compiled, mesh, node_index: dict[int, int]) -> CommVolume:
    """The step's collectives, by axis (telemetry/comm.py), and a warning for any that spans
    two members: bagging's members must never wait for each other."""
    text = compiled.as_text()
    comm = comm_volume(text, mesh, node_index)
    for line in cross_member(text, mesh):
        logging.warning("a collective of the training step spans two members: %s", line)
    logging.info(
        "collectives per step and device: training payload %s bytes, on the wire %s bytes "
        "(%s; %d node(s)), reporting %s bytes",
        comm.payload_bytes,
        comm.wire_bytes,
        comm.link_bytes,
        comm.nodes,
        comm.metrics_payload_bytes,
    )
    return comm


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
