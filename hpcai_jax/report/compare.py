"""Two records side by side: their headline figures, B/A for each, and what differs between
them (configuration and provenance), so that a change in a figure can be traced to its cause.
"""

from __future__ import annotations

from pathlib import Path

from hpcai_jax import records
from hpcai_jax.errors import UsageError
from hpcai_jax.report.collect import OUTPUT_ONLY, flatten, load
from hpcai_jax.report.markdown import table
from hpcai_jax.report.series import BELOW_RULE_MARK, below_rule
from hpcai_jax.units import cell, duration, percent, ratio, si

DATA, MODEL = "data", "model"  # mesh axes: the keys of the comm section's mappings


def _opt(section, figure):
    """figure(section), or None where the record has no such section."""
    return None if section is None else figure(section)


# (label, the figure of a training record, how to show one figure)
TRAIN_FIGURES = (
    ("Sys_scale (devices)", lambda r: r.mesh.num_devices, str),
    ("FLOPS", lambda r: r.metrics.flops_per_s, lambda v: si(v, "FLOP/s")),
    ("VFLOPS", lambda r: r.metrics.vflops_per_s, lambda v: si(v, "FLOP/s")),
    ("FLOPS steady", lambda r: r.metrics.flops_per_s_steady, lambda v: si(v, "FLOP/s")),
    ("time to target", lambda r: r.time_to_target_s, duration),
    ("images/s (all members)", lambda r: r.metrics.images_per_s, cell),
    ("MFU measured", lambda r: r.metrics.mfu_measured, percent),
    ("MFU datasheet", lambda r: r.metrics.mfu_datasheet, percent),
    ("quality metric", lambda r: r.quality.metric, str),
    ("ensemble quality", lambda r: r.quality.ensemble, cell),
    ("member mean quality", lambda r: r.quality.member_mean, cell),
    ("out-of-bag quality", lambda r: _opt(r.quality.oob, lambda o: o.quality), cell),
    ("step time median", lambda r: r.timing.step_s.median_s, duration),
    ("training time (timed steps)", lambda r: r.timing.train_wall_s, duration),
    ("compile time", lambda r: r.timing.compile_s, duration),
    ("division", lambda r: r.submission.division, str),
    ("P_model", lambda r: r.mesh.model_parallel, str),
    ("gradient reduction", lambda r: r.precision.allreduce, str),
    ("nodes", lambda r: _opt(r.comm, lambda c: c.nodes), str),
    (
        "payload over data per step",
        lambda r: _opt(r.comm, lambda c: c.payload_bytes.get(DATA)),
        lambda v: si(v, "B"),
    ),
    (
        "wire bytes over data",
        lambda r: _opt(r.comm, lambda c: (c.wire_bytes or {}).get(DATA)),
        lambda v: si(v, "B"),
    ),
    (
        "wire bytes over model",
        lambda r: _opt(r.comm, lambda c: (c.wire_bytes or {}).get(MODEL)),
        lambda v: si(v, "B"),
    ),
    (
        "wire bytes intra-node",
        lambda r: _opt(r.comm and r.comm.link_bytes, lambda link: link.intra_node),
        lambda v: si(v, "B"),
    ),
    (
        "wire bytes inter-node",
        lambda r: _opt(r.comm and r.comm.link_bytes, lambda link: link.inter_node),
        lambda v: si(v, "B"),
    ),
    (
        "memory per device (temporaries)",
        lambda r: _opt(r.memory_per_device, lambda m: m.temp_bytes),
        lambda v: si(v, "B"),
    ),
    ("energy", lambda r: r.energy.joules, lambda v: si(v, "J")),
    ("average power", lambda r: r.energy.average_watts, lambda v: si(v, "W")),
    ("FLOPS per watt", lambda r: r.energy.flops_per_watt, lambda v: si(v, "FLOP/J")),
    (
        "arithmetic intensity [FLOP/B]",
        lambda r: _opt(r.roofline, lambda x: x.arithmetic_intensity_flops_per_byte),
        cell,
    ),
    (
        "roofline attainable",
        lambda r: _opt(r.roofline, lambda x: x.attainable_flops_per_s),
        lambda v: si(v, "FLOP/s"),
    ),
    (
        "fraction of attainable",
        lambda r: _opt(r.roofline, lambda x: x.fraction_of_attainable),
        percent,
    ),
)
# Run identity and output paths, not configuration: always differ, explain nothing.
IDENTITY = OUTPUT_ONLY
PROVENANCE = ("device_kind", "backend", "device_count", "local_device_count", "process_count")
PROVENANCE += ("git_commit", "versions")


def read(path: str) -> records.TrainRecord | records.StreamRecord:
    """The record in `path`; UsageError (naming the path) when there is none."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--compare: {path} is a directory; give two record files")
    if not p.exists():
        raise UsageError(f"--compare: {path}: no such file")
    record = load(p)
    if isinstance(record, str):
        raise UsageError(f"--compare: {path}: {record}")
    if record.mode not in ("train", "stream"):
        raise UsageError(f"--compare: {path} is a {record.mode} record; compare train or stream")
    return record


def _gb(value: float) -> str:
    """GB/s (10^9 bytes) with the prefix its size calls for: 43.36 GB/s, 4.8 TB/s."""
    return si(value * 1e9, "B/s")


def _kernel(key: str, figure):
    """A STREAM record's figure of one kernel, or None where it did not run that kernel."""
    return lambda r: _opt(r.kernels.get(key), figure)


def _stream_figures(a: records.StreamRecord, b: records.StreamRecord) -> list[tuple]:
    keys = list(dict.fromkeys([*a.kernels, *b.kernels]))
    labels = {k: v.label or k for r in (a, b) for k, v in r.kernels.items()}
    figures = [("devices", lambda r: r.placement.num_devices, str)]
    figures += [("size rule", lambda r: BELOW_RULE_MARK if below_rule(r) else "kept", str)]
    figures += [(f"{labels[k]} bandwidth", _kernel(k, lambda x: x.gb_per_s), _gb) for k in keys]
    figures += [
        (f"{labels[k]} per device", _kernel(k, lambda x: x.gb_per_s_per_device), _gb) for k in keys
    ]
    return [*figures, ("compile time", lambda r: r.timing.compile_s, duration)]


def figures(a: records.AnyRecord, b: records.AnyRecord) -> str:
    rows = [["status", _status(a), _status(b), ""]]
    spec = TRAIN_FIGURES if a.mode == "train" else _stream_figures(a, b)
    for label, figure, show in spec:
        va, vb = figure(a), figure(b)
        versus = "" if isinstance(va, str) or isinstance(vb, str) else ratio(va, vb)
        rows.append([label, _show(show, va), _show(show, vb), versus])
    return table(["figure", f"A: {a.run_id}", f"B: {b.run_id}", "B/A"], rows)


def _show(show, value) -> str:
    return "n/a" if value is None else show(value)


def _status(record: records.AnyRecord) -> str:
    return str(record.status) + (f" ({record.reason})" if record.reason else "")


def _value(value) -> str:
    if value is _ABSENT:
        return "(absent)"
    return '""' if value == "" else str(value)


_ABSENT = object()


def diff(a: dict, b: dict) -> list[list[str]]:
    """[key, A's value, B's value] for every leaf that differs."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted(fa.keys() | fb.keys())
    return [
        [k, _value(fa.get(k, _ABSENT)), _value(fb.get(k, _ABSENT))]
        for k in keys
        if fa.get(k, _ABSENT) != fb.get(k, _ABSENT)
    ]


def compare(path_a: str, path_b: str) -> str:
    """The markdown comparison of two records (train or stream, the same mode)."""
    a, b = read(path_a), read(path_b)
    if a.mode != b.mode:
        raise UsageError(
            f"--compare: {path_a} is a {a.mode} record and {path_b} a {b.mode} record; "
            "compare two records of the same mode"
        )
    config = [
        row for row in diff(a.config or {}, b.config or {}) if not row[0].startswith(IDENTITY)
    ]
    pa, pb = (
        {k: v for k, v in records.to_dict(r.provenance).items() if k in PROVENANCE} for r in (a, b)
    )
    provenance = diff(pa, pb)
    parts = [
        f"# {a.run_id} (A) against {b.run_id} (B)",
        f"A: `{path_a}`  \nB: `{path_b}`",
        "## Headline figures",
        figures(a, b),
        "## Configuration differences",
        table(["config field", "A", "B"], config)
        if config
        else "None (run name and results directory aside).",
        "## Provenance differences",
        table(["provenance", "A", "B"], provenance) if provenance else "None.",
    ]
    return "\n\n".join(parts) + "\n"
