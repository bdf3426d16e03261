"""Version 1, the layout records had before `schema_version` (the shipped
docs/example_report/records, and any record without the field), read as version 2.

Version 2 is version 1's layout, field for field, plus `schema_version`; what the readers used
to default for older records (`r["mesh"].get("model_parallel", 1)`, `comm.payload_bytes` or the
older `comm.bytes_per_step`, ...) is done once, here. Each change is one line of CHANGES, which
docs/record.md shows.
"""

from __future__ import annotations

CHANGES = (
    "`schema_version` is set to 2.",
    "Training records: `comm.bytes_per_step` (before the wire figures) becomes "
    "`comm.payload_bytes`.",
    "Training records: a `mesh` without `model_parallel` or `members_per_device` (before "
    "`--model_parallel` and `--members_per_device`) has 1 of each.",
    "Training records: a `precision` without `allreduce` or `grad_allreduce_dtype` (or no "
    "`precision` at all: before Table 2's communication options) reduced flat, in float32.",
    "Training records: no `energy` (before the energy counters) is `energy.available` false, "
    "`energy.why` not measured.",
    "STREAM records: a `run` without `burst` (before `--stream_burst`) timed every call alone: "
    "a burst of 1.",
    "Everything else a version-1 record lacks reads as a version-2 record that lacks it does: "
    "None, a section of Nones, or an empty list or mapping.",
)


def upgrade(data: dict) -> dict:
    """A version-1 record as the version-2 JSON object it stands for (a new dict; `data` is
    left as it is)."""
    out = {**data, "schema_version": 2}
    if out.get("mode") == "train":
        _train(out)
    if out.get("mode") == "stream" and isinstance(out.get("run"), dict):
        out["run"] = {**out["run"]}
        out["run"].setdefault("burst", 1)
    return out


def _train(out: dict) -> None:
    comm = out.get("comm")
    if isinstance(comm, dict) and "payload_bytes" not in comm and "bytes_per_step" in comm:
        out["comm"] = {
            "payload_bytes": comm["bytes_per_step"],
            **{k: v for k, v in comm.items() if k != "bytes_per_step"},
        }
    mesh = out.get("mesh")
    if isinstance(mesh, dict):
        out["mesh"] = {**mesh}
        out["mesh"].setdefault("members_per_device", 1)
        out["mesh"].setdefault("model_parallel", 1)
    precision = out.get("precision")
    if precision is None or isinstance(precision, dict):
        out["precision"] = {"allreduce": "flat", "grad_allreduce_dtype": "float32"} | (
            precision or {}
        )
    if out.get("energy") is None:
        out["energy"] = {"available": False, "why": "not measured"}
