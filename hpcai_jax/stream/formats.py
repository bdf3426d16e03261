"""`--output_format=csv|json`: STREAM's stdout for a parser, rendered from the record alone
(docs/stream.md, Machine-readable output). CSV keeps BabelStream's columns with `node,device`
in front, one row per device and kernel, whatever kernels ran; JSON is one object."""

from __future__ import annotations

import json

from hpcai_jax.records import schema
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.stream import rules

JSON_FORMAT = "hpcai_jax stream rows 1"  # the JSON object's `format`: its layout's version


def _rate_column(mibibytes: bool) -> str:
    return "max_mibytes_per_sec" if mibibytes else "max_mbytes_per_sec"


def _mibibytes(record: StreamRecord) -> bool:
    return bool(record.acceptance and record.acceptance.binary_units)


def rows(record: StreamRecord) -> list[dict]:
    """One row per unit measured (a device alone, or the run's placement) and kernel: node,
    device, then BabelStream's CSV columns (rates of the unit's arrays, all its devices)."""
    scale = 2.0**-20 if _mibibytes(record) else 1e-6
    out = []
    for unit in rules.units(record):
        for kernel in unit.kernels.values():
            out.append(
                {
                    "node": unit.node,
                    "device": unit.device,
                    "function": kernel.label,
                    "num_times": record.run.num_times,
                    "n_elements": record.array.elements,
                    "sizeof": record.array.itemsize,
                    _rate_column(_mibibytes(record)): kernel.bytes_moved / kernel.min_s * scale,
                    "min_runtime": kernel.min_s,
                    "max_runtime": kernel.max_s,
                    "avg_runtime": kernel.avg_s,
                }
            )
    return out


def _csv_value(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def csv(record: StreamRecord) -> str:
    table = rows(record)
    header = ",".join(table[0])
    return "\n".join([header] + [",".join(_csv_value(v) for v in row.values()) for row in table])


def as_json(record: StreamRecord) -> str:
    """One object: the run's id, rule set, rows, figure of merit and acceptance section."""
    obj = {
        "format": JSON_FORMAT,
        "run_id": record.run_id,
        "status": record.status,
        "rules": None if record.acceptance is None else record.acceptance.rules.rules,
        "rows": rows(record),
        "figure_of_merit": schema.to_dict(record.figure_of_merit),
        "validation_passed": record.validation.passed,
        "acceptance": None if record.acceptance is None else schema.to_dict(record.acceptance),
    }
    return json.dumps(obj, indent=1, ensure_ascii=False)


def render(record: StreamRecord, output_format: str) -> str:
    return {"csv": csv, "json": as_json}[output_format](record)
