"""The start-up measurements of the compiled step, one door for all of them: each a `Probe` in
`PROBES`, in the order a run takes them, each timed as the start-up phase it is named for
(run/startup.PHASES; the memory analysis, milliseconds, is not one) and each kept where it says,
the runner (`run`) alone consulting what was kept: the counting program per compiled step
(flops/counted_cache.py), the rest per process and per host (flops/host_cache.py, docs/score.md,
"Start-up measurements kept per host"). A reader who needs only the training skips this module:
the run's figures are `Measuring`'s fields, filled here."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from absl import logging

from hpcai_jax import nodes
from hpcai_jax.engine.compiled import count_lowered
from hpcai_jax.flops import analytic, counted_cache, host_cache, peaks
from hpcai_jax.flops import crosscheck as crosscheck_module
from hpcai_jax.flops.crosscheck import analytic_figures, crosscheck
from hpcai_jax.flops.roofline import stream_bandwidth
from hpcai_jax.run import startup
from hpcai_jax.telemetry.comm import comm_volume, cross_member
from hpcai_jax.telemetry.memory import memory_analysis
from hpcai_jax.xla_cost import xla_cost

# The note of a cross-check whose analytic counts an earlier run kept (flops/host_cache.py).
KEPT_COUNTS = "the analytic counts were "

# A store: (what, measure, run id) -> (the figure, "" if measured now, else where it came from).
Store = Callable[[tuple, Callable[[], Any], str], tuple[Any, str]]


@dataclasses.dataclass
class Measuring:
    """What the probes read (the run's setup, its state, the compiled step, a --stream_record's
    bandwidth, the run's id for what it keeps) and the figures they fill for the record."""

    setup: Any
    state: Any
    build: Any  # engine/compiled.compile_step's: lowered, compiled, seconds
    bandwidth: tuple[float, str] | None = None
    run_id: str = ""
    counted: Any = None
    cost: Any = None
    flops: Any = None
    comm: Any = None
    memory: dict = dataclasses.field(default_factory=dict)
    peaks: dict = dataclasses.field(default_factory=dict)


class Probe(NamedTuple):
    """One start-up measurement: `measure` takes its figure, which `take` puts in the run's
    figures (with where a kept one came from), `tell` logs after its phase. `key` names what it
    is kept under in `store` (None, or a key of None: measured every time)."""

    name: str  # its start-up phase, if it is one
    what: str  # what it measures, for a reader of PROBES
    measure: Callable[[Measuring], Any]
    take: Callable[[Measuring, Any, str], None]
    key: Callable[[Measuring], tuple | None] | None = None
    store: Store | None = None
    tell: Callable[[Measuring], None] | None = None


def by_program(what: tuple, measure: Callable[[], Any], run_id: str) -> tuple[Any, str]:
    """The counting program's figures kept per compiled step (flops/counted_cache.py); `what` is
    the step's lowered program alone."""
    del run_id  # the figures name no run: they are the step's
    value, cached = counted_cache.counted(what[0], measure)
    return value, f"read from {counted_cache.folder()}" if cached else ""


def run(m: Measuring, probes: tuple[Probe, ...] | None = None) -> Measuring:
    """Every probe (default PROBES, read at the call: a test or a trace may replace it) in
    order, each under its start-up phase, its figure kept or read where its store says."""
    for probe in PROBES if probes is None else probes:
        timed = probe.name in startup.PHASES
        with startup.phase(probe.name) if timed else contextlib.nullcontext():
            what = probe.key(m) if probe.key and probe.store else None
            if what is None:
                value, source = probe.measure(m), ""
            else:
                value, source = probe.store(what, lambda p=probe: p.measure(m), m.run_id)
            probe.take(m, value, source)
        if probe.tell is not None:
            probe.tell(m)
    return m


def replaced(**measures: Callable[[Measuring], Any]) -> tuple[Probe, ...]:
    """PROBES with those named measuring by the function given instead, keeping nothing: how a
    test or a trace stands in for a start-up measurement, in this one place."""
    unknown = set(measures) - {p.name for p in PROBES}
    assert not unknown, f"no such probe: {sorted(unknown)}"
    return tuple(
        p._replace(measure=measures[p.name], store=None) if p.name in measures else p
        for p in PROBES
    )


def _shapes(m: Measuring) -> tuple:
    s = m.setup
    return (s.mesh, s.layout, s.config.train.batch_size, s.workload.spec.fields)


def _counting_key(m: Measuring) -> tuple | None:
    return None if m.setup.count_step is None else (m.build.lowered,)


def _count(m: Measuring):
    """The members' loops written out: O(members) to trace (docs/members.md, "FLOPs")."""
    if m.setup.count_step is None:
        return None
    return count_lowered(m.setup.count_step, m.state, *_shapes(m))


def _take_counted(m: Measuring, counted, source: str) -> None:
    m.counted = counted
    if m.setup.count_step is not None:
        logging.info(
            "counting program (the members' loops written out): %s",
            source or "traced and lowered",
        )


def _crosscheck_key(m: Measuring) -> tuple:
    """The analytic counts depend on the step's program, the settings they read, the devices and
    the counting code's source."""
    config = m.setup.config
    return (
        "crosscheck",
        counted_cache.key(m.build.lowered),
        repr((config.model, config.mesh, config.optim, config.train.batch_size)),
        [d.id for d in m.setup.mesh.devices.flat],
        host_cache.code_digest(analytic, crosscheck_module),
    )


def _analytic(m: Measuring):
    return analytic_figures(m.setup.config, list(m.setup.mesh.devices.flat), m.setup)


def _take_crosscheck(m: Measuring, figures, source: str) -> None:
    """XLA's count of the step against the analytic one (a loud warning when they disagree)."""
    setup, build = m.setup, m.build
    m.cost = xla_cost(
        build.compiled, setup.layout.num_devices, build.lowered, m.counted, setup.member_loop_trips
    )
    m.flops = crosscheck(setup.config, m.cost.flops, list(setup.mesh.devices.flat), figures)
    if source:
        m.flops.notes.append(f"{KEPT_COUNTS}{source}")


def _tell_flops(m: Measuring) -> None:
    cost, cross = m.cost, m.flops
    logging.info(
        "compiled the ensemble step in %.1f s; %s FLOPs per step from %s (%s)%s",
        m.build.seconds,
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


def _traffic(m: Measuring):
    """The step's collectives, by axis (telemetry/comm.py), read once, for the record process 0
    writes, and a warning for any that spans two members: bagging's members must never wait for
    each other."""
    mesh = m.setup.mesh
    node_index = nodes.device_node_index(list(mesh.devices.flat))  # a collective
    if jax.process_index() != 0:
        return None
    text = m.build.compiled.as_text()
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


def _take_memory(m: Measuring, memory: dict, source: str) -> None:
    m.memory = memory
    if memory:
        logging.info(
            "compiled step memory per device: arguments %.1f MiB, outputs %.1f MiB, "
            "temporaries %.1f MiB",
            memory["argument_bytes"] / 2**20,
            memory["output_bytes"] / 2**20,
            memory["temp_bytes"] / 2**20,
        )


def _note(source: str) -> str:
    return f"; {source}" if source else ""


def _take_peaks(m: Measuring, measured: dict, source: str) -> None:
    m.peaks = dict(measured, measured_method=measured["measured_method"] + _note(source))


def _stream_key(m: Measuring) -> tuple | None:
    return None if m.bandwidth else ("stream",)


def _stream(m: Measuring) -> tuple[float, str]:
    """A --stream_record's bandwidth where one is given, else STREAM's Triad measured here."""
    return m.bandwidth or stream_bandwidth("")


def _take_bandwidth(m: Measuring, bandwidth, source: str) -> None:
    per_device, measured = bandwidth
    m.peaks["bandwidth_per_device"], m.peaks["bandwidth_source"] = (
        per_device,
        measured + _note(source),
    )


def _dtype(m: Measuring) -> tuple:
    return ("matmul", m.setup.config.model.dtype)


PROBES: tuple[Probe, ...] = (
    Probe(
        "counting",
        "the counting program's cost analysis, the step with the members' loops written out",
        _count,
        _take_counted,
        _counting_key,
        by_program,
    ),
    Probe(
        "crosscheck",
        "XLA's FLOPs per step against the analytic count (the FLOP count FLOPS divides)",
        _analytic,
        _take_crosscheck,
        _crosscheck_key,
        host_cache.kept,
        _tell_flops,
    ),
    Probe(
        "traffic",
        "the collectives' bytes per step by mesh axis",
        _traffic,
        lambda m, comm, _: setattr(m, "comm", comm),
    ),
    Probe(
        "memory",
        "the compiled step's memory per device",
        lambda m: memory_analysis(m.build.compiled),
        _take_memory,
    ),
    Probe(
        "peaks",
        "the datasheet and measured matmul peak FLOP/s per device (MFU's divisor)",
        lambda m: peaks.matmul_peaks(m.setup.config.model.dtype),
        _take_peaks,
        _dtype,
        host_cache.kept_in_process,
    ),
    Probe(
        "stream",  # every process: STREAM spans them
        "the bandwidth per device (the roofline's): STREAM's Triad or a --stream_record's",
        _stream,
        _take_bandwidth,
        _stream_key,
        host_cache.kept_by_every_process,
    ),
)
