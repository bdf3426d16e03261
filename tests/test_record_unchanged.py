"""A refactor of the engine or of the record's definition changes no figure: the session's tiny
run writes, field for field, the record the same run wrote before (tests/data/tiny_run_record.json,
written by this flagset at the commit that added this test). Only what a run cannot repeat is
left out: timings and rates, the machine's measured peaks, provenance, paths, the record's
new version field, and the note that the analytic counts were read from an earlier run's."""

from __future__ import annotations

import json
import math
import re

from helpers import ROOT

from hpcai_jax.run.probes import KEPT_COUNTS

BASELINE = ROOT / "tests" / "data" / "tiny_run_record.json"
# Paths (flattened, list indices as [i]) whose values depend on the clock, the machine's load or
# where the run wrote; matched from the start of the path.
VOLATILE = (
    r"schema_version$",
    r"provenance\.",
    r"mllog$",
    r"config\.results\.(results_dir|mllog)$",
    r"timing\.",
    r"epochs\[\d+\]\.(wall_s|flops_per_s)$",
    r"metrics\.(?!penalty$)",
    r"peak_flops\.(measured_|bandwidth_)",
    r"roofline\.(?!arithmetic_intensity_flops_per_byte$)",
    r"quality\.curve\[\d+\]\.wall_s$",
    r"time_to_target_s$",
    r"observe\.tensorboard\.dir$",
)


def flatten(value, path: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}.{key}" if path else key))
        return out
    if isinstance(value, list):
        out = {f"{path}#len": len(value)}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{path}[{i}]"))
        return out
    return {path: value}


def stable(record: dict) -> dict:
    record = json.loads(json.dumps(record))
    # Whether an earlier run of the suite kept the analytic counts ($HPCAI_JAX_STARTUP_CACHE,
    # tests/conftest.py) depends on the order the tests ran in: its note is left out, not the
    # counts.
    cross = record.get("flops", {}).get("crosscheck", {})
    if "notes" in cross:
        cross["notes"] = [n for n in cross["notes"] if not n.startswith(KEPT_COUNTS)]
    return {
        path: value
        for path, value in flatten(record).items()
        if not any(re.match(pattern, path) for pattern in VOLATILE)
    }


def test_the_tiny_run_writes_the_record_it_wrote_before(tiny_run):
    before, now = stable(json.loads(BASELINE.read_text())), stable(tiny_run.record)
    assert sorted(set(before) ^ set(now)) == []
    different = [
        (path, before[path], now[path])
        for path in before
        if not (
            math.isclose(before[path], now[path], rel_tol=1e-6, abs_tol=1e-12)
            if isinstance(before[path], float) and isinstance(now[path], float)
            else before[path] == now[path]
        )
    ]
    assert different == []


def test_the_comparison_sees_a_changed_figure():
    """The check itself can fail: one figure changed, one field added, one removed."""
    base = json.loads(BASELINE.read_text())
    changed = json.loads(BASELINE.read_text())
    changed["quality"]["ensemble"] += 1e-3
    changed["data"]["new_field"] = 1
    del changed["comm"]["nodes"]
    before, after = stable(base), stable(changed)
    assert set(before) ^ set(after) == {"data.new_field", "comm.nodes"}
    assert not math.isclose(before["quality.ensemble"], after["quality.ensemble"], rel_tol=1e-6)
