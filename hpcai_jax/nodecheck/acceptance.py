"""`--mode=check` judged for acceptance (docs/node_check.md, Acceptance): `--check_expect`, a
collective's bus bandwidth at a size, as one row each; and `--check_json`, the collectives in
the shape nccl-tests writes its JSON (argv, a sanitised environment, versions, one object per
row), rendered from the record."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.nodecheck.rows import FAIL, PASS, Row
from hpcai_jax.records import schema
from hpcai_jax.records.nodecheck import CheckRecord
from hpcai_jax.stream.expect import UNITS

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SIZES = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 1 << 10, "MiB": 1 << 20}
SIZES["GiB"] = 1 << 30
JSON_FORMAT = "hpcai_jax check collectives 1"  # the JSON object's `format`
_NUMBER = r"([0-9]+(?:\.[0-9]*)?)"
_ONE = re.compile(
    rf"^\s*([a-z_]+)\s*:\s*{_NUMBER}\s*([A-Za-z/]+)\s*@\s*{_NUMBER}\s*([A-Za-z]+)\s*$"
)


@dataclasses.dataclass(frozen=True)
class CollectiveExpectation:
    op: str
    given: str
    bytes_per_s: float  # the least bus bandwidth
    size_bytes: int  # the message it is judged at


def parse(text: str) -> tuple[CollectiveExpectation, ...]:
    """A comma list of OP:VALUEUNIT@SIZE, e.g. `all_reduce:304GB/s@8GiB`; empty: none.

    Raises:
      UsageError: an item not of that form, an unknown collective or unit.
    """
    out = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        match = _ONE.match(item)
        ok = (
            match is not None
            and match[1] in OPS
            and match[3] in UNITS
            and match[5] in SIZES
            and float(match[2]) > 0
        )
        if not ok:
            raise UsageError(
                f"--check_expect={text}: {item!r}: expected OP:VALUEUNIT@SIZE, e.g. "
                f"all_reduce:304GB/s@8GiB, OP one of {', '.join(OPS)}, UNIT one of "
                f"{', '.join(UNITS)}, SIZE in {', '.join(SIZES)}, the value positive"
            )
        size = int(float(match[4]) * SIZES[match[5]])
        out.append(CollectiveExpectation(match[1], item, float(match[2]) * UNITS[match[3]], size))
    return tuple(out)


def check_json_path(path: str) -> None:
    """Refuses, before anything runs, a `--check_json` that cannot be written."""
    if not path:
        return
    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        raise UsageError(
            f"--check_json={path}: expected a file path in an existing directory "
            f"({'a directory' if target.is_dir() else 'no such directory'})"
        )


def rows(points, expectations: tuple[CollectiveExpectation, ...]) -> list[Row]:
    """One row per expectation and group measured (intra- and inter-node): the best bus
    bandwidth (out of place or in place) at the size, FAIL below it or where not measured."""
    out = []
    for e in expectations:
        found = [p for p in points if p.op == e.op and p.size_bytes == e.size_bytes]
        if not found:
            sizes = sorted({p.size_bytes for p in points if p.op == e.op})
            out.append(
                Row(
                    item=f"expected {e.op} bus bandwidth",
                    status=FAIL,
                    expected=e.bytes_per_s,
                    unit="B/s",
                    source=f"--check_expect {e.given}",
                    note=f"not measured at {e.size_bytes} B (sizes measured: "
                    f"{', '.join(map(str, sizes)) or 'none'})",
                )
            )
        for p in found:
            best = max(p.busbw, p.in_place_busbw or 0.0)
            out.append(
                Row(
                    item=f"expected {e.op} bus bandwidth {p.axis}",
                    status=PASS if best >= e.bytes_per_s else FAIL,
                    measured=best,
                    expected=e.bytes_per_s,
                    unit="B/s",
                    source=f"--check_expect {e.given}",
                    note=f"{p.n} devices, {p.size_bytes} B",
                )
            )
    return out


# Environment variables a JSON file may carry: the collective libraries' and XLA's settings,
# never credentials or paths of the user's (nccl-tests' JSON sanitises its environment alike).
ENV_PREFIXES = ("NCCL_", "XLA_", "JAX_", "TF_", "CUDA_", "ROCM_", "HIP_", "SLURM_JOB_NUM_NODES")


def _environment(record: CheckRecord) -> dict[str, str]:
    given = record.provenance.environment or {}
    return {k: v for k, v in sorted(given.items()) if k.startswith(ENV_PREFIXES)}


def _row(point) -> dict:
    reduces = point.op in ("all_reduce", "reduce_scatter")
    return {
        "op": point.op,
        "axis": point.axis,
        "ranks": point.n,
        "size": point.size_bytes,
        "count": point.count,
        "type": "float",
        "redop": "sum" if reduces else "none",
        "root": -1,
        "out_of_place": {
            "time_us": point.time_s * 1e6,
            "algbw_gbs": point.algbw / 1e9,
            "busbw_gbs": point.busbw / 1e9,
            "wrong": point.wrong,
        },
        "in_place": {
            "time_us": None if point.in_place_time_s is None else point.in_place_time_s * 1e6,
            "algbw_gbs": None if point.in_place_algbw is None else point.in_place_algbw / 1e9,
            "busbw_gbs": None if point.in_place_busbw is None else point.in_place_busbw / 1e9,
            "wrong": point.in_place_wrong,
        },
    }


def as_json(record: CheckRecord, argv: list[str]) -> str:
    """nccl-tests' JSON shape: the command, its environment, the versions, one object per row
    (a collective at a size on a group of devices), and the verdict's rows."""
    check = record.check
    obj = {
        "format": JSON_FORMAT,
        "argv": argv,
        "environment": _environment(record),
        "versions": {**record.provenance.versions, "backend": record.provenance.backend},
        "devices": {"kind": check.system.device_kind, "count": check.system.device_count},
        "nodes": check.system.nodes,
        "results": [_row(p) for p in check.collectives],
        "expectations": [schema.to_dict(r) for r in check.rows if r.item.startswith("expected ")],
        "verdict": check.verdict,
    }
    return json.dumps(obj, indent=1, ensure_ascii=False)


def write_json(path: str, record: CheckRecord, argv: list[str]) -> None:
    """`as_json` to `path`, atomically: a temporary file renamed over it."""
    temporary = f"{path}.partial"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(as_json(record, argv) + "\n")
    os.replace(temporary, path)
