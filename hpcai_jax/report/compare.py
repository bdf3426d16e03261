"""Two records side by side: their headline figures, B/A for each, and what differs between
them (configuration and provenance), so that a change in a figure can be traced to its cause.
"""

from __future__ import annotations

from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.report.collect import OUTPUT_ONLY, flatten, load
from hpcai_jax.report.markdown import table
from hpcai_jax.report.series import field
from hpcai_jax.report.units import cell, duration, percent, ratio, si

# (label, path in the record, how to show one figure)
TRAIN_FIGURES = (
    ("Sys_scale (devices)", "mesh.num_devices", str),
    ("FLOPS", "metrics.flops_per_s", lambda v: si(v, "FLOP/s")),
    ("VFLOPS", "metrics.vflops_per_s", lambda v: si(v, "FLOP/s")),
    ("FLOPS steady", "metrics.flops_per_s_steady", lambda v: si(v, "FLOP/s")),
    ("time to target", "time_to_target_s", duration),
    ("images/s (all members)", "metrics.images_per_s", cell),
    ("MFU measured", "metrics.mfu_measured", percent),
    ("MFU datasheet", "metrics.mfu_datasheet", percent),
    ("quality metric", "quality.metric", str),
    ("ensemble quality", "quality.ensemble", cell),
    ("member mean quality", "quality.member_mean", cell),
    ("out-of-bag quality", "quality.oob.quality", cell),
    ("step time median", "timing.step_s.median_s", duration),
    ("training time (timed steps)", "timing.train_wall_s", duration),
    ("compile time", "timing.compile_s", duration),
    ("division", "submission.division", str),
    ("P_model", "mesh.model_parallel", str),
    ("gradient reduction", "precision.allreduce", str),
    ("nodes", "comm.nodes", str),
    ("payload over data per step", "comm.payload_bytes.data", lambda v: si(v, "B")),
    ("wire bytes over data", "comm.wire_bytes.data", lambda v: si(v, "B")),
    ("wire bytes over model", "comm.wire_bytes.model", lambda v: si(v, "B")),
    ("wire bytes intra-node", "comm.link_bytes.intra_node", lambda v: si(v, "B")),
    ("wire bytes inter-node", "comm.link_bytes.inter_node", lambda v: si(v, "B")),
    ("memory per device (temporaries)", "memory_per_device.temp_bytes", lambda v: si(v, "B")),
    ("energy", "energy.joules", lambda v: si(v, "J")),
    ("average power", "energy.average_watts", lambda v: si(v, "W")),
    ("FLOPS per watt", "energy.flops_per_watt", lambda v: si(v, "FLOP/J")),
    ("arithmetic intensity [FLOP/B]", "roofline.arithmetic_intensity_flops_per_byte", cell),
    ("roofline attainable", "roofline.attainable_flops_per_s", lambda v: si(v, "FLOP/s")),
    ("fraction of attainable", "roofline.fraction_of_attainable", percent),
)
# Run identity and output paths, not configuration: always differ, explain nothing.
IDENTITY = OUTPUT_ONLY
PROVENANCE = ("device_kind", "backend", "device_count", "local_device_count", "process_count")
PROVENANCE += ("git_commit", "versions")


def read(path: str) -> dict:
    """The record in `path`; UsageError (naming the path) when there is none."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--compare: {path} is a directory; give two record files")
    if not p.exists():
        raise UsageError(f"--compare: {path}: no such file")
    record = load(p)
    if isinstance(record, str):
        raise UsageError(f"--compare: {path}: {record}")
    if record["mode"] not in ("train", "stream"):
        raise UsageError(f"--compare: {path} is a {record['mode']} record; compare train or stream")
    return record


def _gb(value: float) -> str:
    """GB/s (10^9 bytes) with the prefix its size calls for: 43.36 GB/s, 4.8 TB/s."""
    return si(value * 1e9, "B/s")


def _stream_figures(a: dict, b: dict) -> list[tuple]:
    keys = list(dict.fromkeys([*(a.get("kernels") or {}), *(b.get("kernels") or {})]))
    labels = {k: v.get("label", k) for r in (a, b) for k, v in (r.get("kernels") or {}).items()}
    figures = [("devices", "placement.num_devices", str)]
    figures += [(f"{labels[k]} bandwidth", f"kernels.{k}.gb_per_s", _gb) for k in keys]
    figures += [(f"{labels[k]} per device", f"kernels.{k}.gb_per_s_per_device", _gb) for k in keys]
    return [*figures, ("compile time", "timing.compile_s", duration)]


def figures(a: dict, b: dict) -> str:
    rows = [["status", _status(a), _status(b), ""]]
    spec = TRAIN_FIGURES if a["mode"] == "train" else _stream_figures(a, b)
    for label, path, show in spec:
        va, vb = field(a, path), field(b, path)
        versus = "" if isinstance(va, str) or isinstance(vb, str) else ratio(va, vb)
        rows.append([label, _show(show, va), _show(show, vb), versus])
    return table(["figure", f"A: {a.get('run_id')}", f"B: {b.get('run_id')}", "B/A"], rows)


def _show(show, value) -> str:
    return "n/a" if value is None else show(value)


def _status(record: dict) -> str:
    reason = record.get("reason")
    return str(record.get("status")) + (f" ({reason})" if reason else "")


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
    if a["mode"] != b["mode"]:
        raise UsageError(
            f"--compare: {path_a} is a {a['mode']} record and {path_b} a {b['mode']} record; "
            "compare two records of the same mode"
        )
    config = [
        row
        for row in diff(a.get("config") or {}, b.get("config") or {})
        if not row[0].startswith(IDENTITY)
    ]
    pa, pb = (
        {k: v for k, v in (r.get("provenance") or {}).items() if k in PROVENANCE} for r in (a, b)
    )
    provenance = diff(pa, pb)
    parts = [
        f"# {a.get('run_id')} (A) against {b.get('run_id')} (B)",
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
