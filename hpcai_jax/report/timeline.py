"""A picture of a profiler trace's phases, drawn from the trace file (docs/observe.md).

`python -m hpcai_jax.report.timeline TRACE_DIR OUT.png` reads a `--profile_steps` trace
directory (`<results_dir>/<run_id>.profile/process_N`): its Perfetto trace (Chrome trace JSON)
and the `phases.json` the run wrote beside it, and draws one row per phase: the host's training
steps, input waits and evaluations (the loop's annotations), and the device work of the
compiled step grouped by the named scope of its HLO instructions. It is a reader's overview
without a browser; the trace itself opens in ui.perfetto.dev or TensorBoard's profile plugin.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

OTHER = "other device work of the step"


def _trace_file(directory: Path) -> Path:
    found = sorted(directory.glob("plugins/profile/*/perfetto_trace.json.gz")) or sorted(
        directory.glob("plugins/profile/*/*.trace.json.gz")
    )
    if not found:
        raise FileNotFoundError(f"{directory}: no plugins/profile/*/*trace.json.gz")
    return found[-1]


def phase_spans(directory: Path) -> dict[str, list[tuple[float, float]]]:
    """Phase → [(start µs, duration µs)]: the host annotations by name, the train step's device
    events by their instruction's phase (phases.json, which also names the phases: this reader
    never imports JAX)."""
    with gzip.open(_trace_file(directory)) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    phases = json.loads((directory / "phases.json").read_text())
    host = set(phases["host"])
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        if e["name"] in host:
            row = e["name"]
        elif args.get("hlo_module") == phases["module"] and args.get("hlo_op"):
            row = phases["phases"].get(args["hlo_op"], OTHER)
        else:
            continue
        spans.setdefault(row, []).append((float(e["ts"]), float(e["dur"])))
    return spans


def draw(directory: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spans = phase_spans(directory)
    names = json.loads((directory / "phases.json").read_text())
    host = names["host"]
    rows = [r for r in (*host, *names["device"], OTHER) if r in spans]
    t0 = min(start for row in rows for start, _ in spans[row])
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.2), dpi=90)
    for i, row in enumerate(rows):
        bars = [((s - t0) / 1e3, max(d / 1e3, 0.05)) for s, d in spans[row]]
        ax.broken_barh(bars, (i - 0.35, 0.7), color=f"C{i % 10}")
    ax.set_yticks(range(len(rows)), [f"{r} ({'host' if r in host else 'device'})" for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the trace's first event")
    ax.set_title(f"drawn from {_trace_file(directory).name} ({directory.name})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m hpcai_jax.report.timeline TRACE_DIR OUT.png", file=sys.stderr)
        return 2
    try:
        draw(Path(argv[1]), Path(argv[2]))
    except (OSError, KeyError, ValueError) as e:
        print(f"{argv[1]}: not a --profile_steps trace directory: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
