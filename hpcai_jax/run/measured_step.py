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
from hpcai_jax.flops import counted_cache
from hpcai_jax.flops.crosscheck import FlopFigures, crosscheck
from hpcai_jax.flops.peaks import bandwidth_at_start, matmul_peaks
from hpcai_jax.flops.xla import XlaCost, xla_cost
from hpcai_jax.run import interrupt, startup
from hpcai_jax.telemetry.comm import CommVolume, comm_volume, cross_member
from hpcai_jax.telemetry.memory import memory_analysis


class MeasuredStep(NamedTuple):
    """The compiled step and its figures for the record."""

    compiled: jax.stages.Compiled | None
    cost: XlaCost
    flops: FlopFigures
    memory: dict
    peaks: dict
    comm: CommVolume | None  # process 0's alone
    compile_s: float = 0.0


def measure_step(setup: RunSetup, state, bandwidth: tuple[float, str] | None) -> MeasuredStep:
    """Compiles `setup`'s train step for `state` and measures it (the module docstring);
    `bandwidth`: a --stream_record's figure, else STREAM runs here."""
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
        cross = crosscheck(config, cost.flops, list(setup.mesh.devices.flat))
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
        peaks = matmul_peaks(config.model.dtype)
    with startup.phase("stream"):  # every process: STREAM spans them
        peaks["bandwidth_per_device"], peaks["bandwidth_source"] = bandwidth_at_start(bandwidth)
    return MeasuredStep(build.compiled, cost, cross, memory, peaks, comm, build.seconds)


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
