"""Start-up phases of one process against its local device count (8, 64, 256 forced CPU devices).

Everything between the compile and the first step (the FLOP cross-check, the traffic parse, the
matmul peak, STREAM at start, the barrier) is measured over the process's local devices, so it
grows with them; this shows by how much. Each device count is one `hpcai_jax.main` run of the
regression MLP in a subprocess of its own (M = devices, one member per device, P_degree 1), with
`XLA_FLAGS=--xla_force_host_platform_device_count=N`. From each run it reads the record's
`timing.startup` and, from the log's time stamps, the span from the `compiled the ensemble step`
line to the `training steps` line and the longest silence in it (the issue this answers: 16.5 s
without a line at 256 devices). The baseline is the first device count, measured in the same
run; the post-compile phases are fitted as a + b × devices and evaluated at 8 devices per
process, a GPU node's share (docs/scale_sim.md, Start-up phases against local devices).

    python benchmarks/startup_phases.py [--devices=8,64,256] [--steps=32] [--json=PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpcai_jax.run.startup import PHASES

ROOT = Path(__file__).resolve().parent.parent
# timing.startup's phases, and those that follow the compile (the record of an older commit
# run with --root lacks the later ones: they read as None).
POST_COMPILE = PHASES[PHASES.index("compile") + 1 :]
PER_PROCESS_DEVICES = 8  # a GPU node's devices, one process per node
LINE = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +\d+ [^\]]+\] (.*)$")
COMPILED = re.compile(r"compiled the ensemble step")
FIRST_STEP = re.compile(r"process \d+: training steps \d+ to \d+")


def run_flags(devices: int, steps: int, results: Path) -> list[str]:
    return [
        "--workload=regression",
        "--model=mlp",
        "--dataset=friedman1",
        "--target_quality=0.9",
        f"--ensemble_size={devices}",
        "--parallel_degree=1",
        "--members_per_device=1",
        f"--steps={steps}",
        "--batch_size=16",
        "--train_examples=256",
        "--eval_examples=64",
        "--eval_batch_size=64",
        "--nokeep_weights",
        f"--results_dir={results}",
    ]


def log_times(stderr: str) -> list[tuple[float, str]]:
    """(seconds of the day, message) of each absl line."""
    out = []
    for line in stderr.splitlines():
        if m := LINE.match(line):
            h, mi, s, us = (int(g) for g in m.groups()[2:6])
            out.append((h * 3600 + mi * 60 + s + us / 1e6, m.group(7)))
    return out


def window(lines: list[tuple[float, str]]) -> tuple[float | None, float | None, str]:
    """(span, longest silence, the line that ended it) from the compile line to the first step."""
    start = next((i for i, (_, msg) in enumerate(lines) if COMPILED.search(msg)), None)
    end = next((i for i, (_, msg) in enumerate(lines) if FIRST_STEP.search(msg)), None)
    if start is None or end is None or end <= start:
        return None, None, ""
    part = lines[start : end + 1]
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(part, part[1:], strict=False)]
    longest = max(gaps, default=(0.0, ""))
    return part[-1][0] - part[0][0], longest[0], longest[1]


def run_one(devices: int, steps: int, folder: Path, timeout_s: int, root: Path) -> dict:
    results = folder / f"d{devices}"
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    command = [sys.executable, "-m", "hpcai_jax.main", *run_flags(devices, steps, results)]
    start = time.perf_counter()
    proc = subprocess.run(
        command, capture_output=True, text=True, cwd=root, env=env, timeout=timeout_s
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{devices} devices: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    record = json.loads(next(results.glob("*.json")).read_text())
    # None: a phase the engine under --root does not record.
    phases = {name: record["timing"]["startup"].get(f"{name}_s") for name in PHASES}
    span, silence, ended_by = window(log_times(proc.stderr))
    post = [phases[name] for name in POST_COMPILE]
    return {
        "devices": devices,
        "wall_s": wall,
        "phases": phases,
        "post_compile_s": sum(post) if None not in post else None,
        "log_span_s": span,
        "longest_silence_s": silence,
        "silence_ended_by": ended_by[:80],
    }


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares a + b × x."""
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if n > 1 else 0.0
    return my - b * mx, b


def num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict]) -> list[str]:
    base = rows[0]
    head = "| phase | " + " | ".join(f"{r['devices']} devices s" for r in rows)
    head += f" | {rows[-1]['devices']} / {base['devices']} |"
    lines = [head, "|" + " --- |" * (len(rows) + 2)]

    def row(label: str, values: list[float | None]) -> str:
        ratio = (
            f"{values[-1] / values[0]:.1f}"
            if None not in (values[0], values[-1]) and values[0] > 0
            else "-"
        )
        return f"| {label} | " + " | ".join(num(v) for v in values) + f" | {ratio} |"

    for name in PHASES:
        lines.append(row(name, [r["phases"][name] for r in rows]))
    lines.append(
        row("**after the compile** (crosscheck to barrier)", [r["post_compile_s"] for r in rows])
    )
    lines.append(row("log: compile line to first step", [r["log_span_s"] for r in rows]))
    lines.append(row("log: longest silence in it", [r["longest_silence_s"] for r in rows]))
    lines.append(row("process wall", [r["wall_s"] for r in rows]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--devices", default="8,64,256", help="local device counts, comma-separated"
    )
    parser.add_argument("--steps", type=int, default=32, help="training steps of each run")
    parser.add_argument("--timeout_s", type=int, default=900, help="the limit of each run")
    parser.add_argument("--json", default="", help="write the rows and the fit here")
    parser.add_argument(
        "--root",
        default=str(ROOT),
        help="the source tree whose engine runs (another commit's: `git archive` it there)",
    )
    args = parser.parse_args()
    devices = [int(d) for d in args.devices.split(",")]
    with tempfile.TemporaryDirectory(prefix="startup_phases_") as tmp:
        rows = []
        for n in devices:
            rows.append(run_one(n, args.steps, Path(tmp), args.timeout_s, Path(args.root)))
            r = rows[-1]
            print(
                f"{n:>4} devices: after the compile {num(r['post_compile_s'])} s, "
                f"longest silence {num(r['longest_silence_s'])} s, wall {num(r['wall_s'])} s",
                flush=True,
            )
    print()
    print("\n".join(table(rows)))
    fitted = [r for r in rows if r["post_compile_s"] is not None]
    out = {"rows": rows, "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    if len(fitted) > 1:
        a, b = fit([r["devices"] for r in fitted], [r["post_compile_s"] for r in fitted])
        at = a + b * PER_PROCESS_DEVICES
        print(
            f"\nafter the compile: {a:.2f} s + {b * 1000:.2f} ms × local devices (least squares "
            f"over {', '.join(str(r['devices']) for r in fitted)}); at {PER_PROCESS_DEVICES} "
            f"devices per process (one process per 8-GPU node): {at:.2f} s per process"
        )
        out["fit"] = {"a_s": a, "b_s_per_device": b, "at_8_devices_s": at}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
