"""`python -m hpcai_jax.stream.drain RECORD [--json OUT]`: a STREAM acceptance's one report,
from its record: the acceptance lines and the nodes to drain (every node with a device below an
expectation or an outlier), as text, and as JSON with --json. `launch/slurm/stream.sbatch` runs
it after the job (docs/stream.md, A whole cluster). Exit 0 when the acceptance passed, 3 when
it did not, 2 on a record that is not a STREAM record with an acceptance section."""

from __future__ import annotations

import argparse
import json
import os
import sys

from hpcai_jax import records
from hpcai_jax.errors import UsageError, tool_main
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.stream import acceptance


def nodes_to_drain(record: StreamRecord) -> list[str]:
    """The nodes of every device that failed an expectation or stood out below its peers."""
    a = record.acceptance
    bad = [c.figure.node for c in a.expectations if not c.passed]
    bad += [o.figure.node for o in a.outliers]
    return sorted(set(bad))


def report(record: StreamRecord) -> dict:
    return {
        "run_id": record.run_id,
        "nodes": record.provenance.hosts,
        "passed": record.acceptance.passed,
        "drain": nodes_to_drain(record),
        "lines": acceptance.lines(record),
        "acceptance": records.to_dict(record.acceptance),
    }


def _read(path: str) -> StreamRecord:
    try:
        record = records.read(path)
    except (OSError, records.RecordError) as e:
        raise UsageError(f"{path}: not a readable record ({e})") from None
    if not isinstance(record, StreamRecord) or record.acceptance is None:
        raise UsageError(f"{path}: expected a --mode=stream record with an acceptance section")
    return record


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcai_jax.stream.drain")
    parser.add_argument("record", help="the STREAM run's record (RESULTS_DIR/RUN_ID.json)")
    parser.add_argument("--json", default="", help="also write the report here, as JSON")
    args = parser.parse_args(argv)
    record = _read(args.record)
    out = report(record)
    print("\n".join(out["lines"]))
    print(f"nodes to drain: {', '.join(out['drain']) or 'none'}")
    if args.json:
        temporary = f"{args.json}.partial"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, ensure_ascii=False)
        os.replace(temporary, args.json)
    return 0 if out["passed"] else acceptance.ACCEPTANCE_EXIT_CODE


if __name__ == "__main__":
    sys.exit(tool_main("hpcai_jax.stream.drain", run, sys.argv[1:]))
