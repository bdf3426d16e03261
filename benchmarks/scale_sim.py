"""Evidence at scale from one machine (issue 33, item 5): N JAX processes of one CPU device each
train the regression MLP through `launch/local.py`, in two layouts (M = N members of
P_degree = 1; M = N / 2 members of P_degree = 2), and the figures that decide whether thousands
of processes start and run (start-up and its phases, peak RSS, host time per step, held-out
bytes read per process, the record's size) are fitted against N and extrapolated to 2,240,
10,000 and 27,648 processes. Every figure is also printed as a ratio to the 1-process run's,
measured in the same run (first and last, so that a drifting machine load shows).

What each column is, the table measured here, and what one machine cannot show:
docs/scale_sim.md.

    python benchmarks/scale_sim.py [--processes=1,2,4,8,16] [--json=PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "launch" / "local.py"
GNU_TIME = "/usr/bin/time"

# One process per GPU, or per TPU VM worker (4 chips): where the engine is meant to run.
TARGETS = (
    ("TPU pod 8,960 chips / 4", 2_240),
    ("1,250 nodes x 8 GPUs", 10_000),
    ("4,608 nodes x 6 GPUs", 27_648),
)

# What each process runs: hpcai_jax.main, with the held-out source of friedman1 wrapped so that
# the bytes this process reads from it are counted (measured, next to the estimate), the CPU time
# it has used when it logs its first training line noted, and its own peak RSS and CPU time
# printed at exit (the fallback where GNU time is missing). If the engine has moved on and the
# wrapping fails, the run goes on and the figure is only estimated.
WRAPPER = """\
import atexit, logging, resource, runpy, sys
held_out, cpu_at_step = [0], [-1.0]


def _cpu_s():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class _FirstStep(logging.Filter):
    def filter(self, record):
        if cpu_at_step[0] < 0 and "training steps" in str(record.msg):
            cpu_at_step[0] = _cpu_s()
        return True


logging.getLogger("absl").addFilter(_FirstStep())
try:
    from hpcai_jax.data import friedman
    from hpcai_jax.data.source import ArraySource

    class Counted(ArraySource):
        def read(self, indices):
            out = super().read(indices)
            held_out[0] += sum(a.nbytes for a in out.values())
            return out

        def head(self, n):
            part = super().head(n)
            return part if part is self else Counted(part.spec, part.arrays)

    _load = friedman.load

    def _counted_load():
        train, test = _load()
        return train, Counted(test.spec, test.arrays)

    friedman.load = _counted_load
except Exception as e:
    held_out[0] = -1
    print(f"scale_sim: cannot count held-out reads: {e!r}", file=sys.stderr)


def _report():
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"scale_sim: held_out_bytes={held_out[0]} maxrss_kb={use.ru_maxrss} "
        f"cpu_s={_cpu_s():.3f} cpu_to_step_s={cpu_at_step[0]:.3f}",
        file=sys.stderr,
        flush=True,
    )


atexit.register(_report)
runpy.run_module("hpcai_jax.main", run_name="__main__", alter_sys=True)
"""

# A relayed line: `[p3] ` and, for absl's lines, `I1204 16:06:56.712019 140433 file.py:12] `.
LINE = re.compile(
    r"^\[p(?P<p>\d+)\] (?:(?P<level>[IWEF])(?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):"
    r"(?P<s>\d\d)\.(?P<us>\d{6}) +\d+ [^\]]+\] )?(?P<msg>.*)$"
)
# The engine's log lines that end each start-up phase, in order; the phase is named for what
# happens before its line (docs/scale_sim.md, Columns).
MILESTONES = (
    ("import", re.compile(r"jax\.distributed: process \d+ of \d+")),
    ("join", re.compile(r"start-up: ")),
    ("setup", re.compile(r"\bmesh \{")),
    ("compile", re.compile(r"compiled the ensemble step")),
    ("to_step", re.compile(r"process \d+: training steps \d+ to \d+")),
)
PER_PROCESS = {
    "rss_kb": re.compile(r"Maximum resident set size \(kbytes\): (\d+)"),
    "user_s": re.compile(r"User time \(seconds\): ([\d.]+)"),
    "sys_s": re.compile(r"System time \(seconds\): ([\d.]+)"),
    "self": re.compile(
        r"scale_sim: held_out_bytes=(-?\d+) maxrss_kb=(\d+) cpu_s=([\d.]+) "
        r"cpu_to_step_s=(-?[\d.]+)"
    ),
}
# Figures fitted against processes: (row key, label, unit).
FIGURES = (
    ("startup_max_s", "start-up (slowest process)", "s"),
    ("startup_cpu_s", "start-up CPU time per process (median)", "s"),
    ("rss_max_mb", "peak RSS per process (max)", "MB"),
    ("step_median_s", "step time (median of processes)", "s"),
    ("train_wall_s", "train wall (record)", "s"),
    ("held_out_bytes", "held-out bytes read per process", "B"),
    ("record_bytes", "record size", "B"),
)


def bytes_per_example() -> int:
    """friedman1's example on the host, from its spec (10 float32 features, a float32 target)."""
    from hpcai_jax.data import friedman

    return sum(
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        for shape, dtype in friedman.SPEC.fields.values()
    )


def held_out_rows_per_process(
    eval_examples: int, eval_batch_size: int, p_degree: int, members: int, evaluations: int = 1
) -> int:
    """Held-out rows one process of one device reads: eval batches of `eval_batch_size` rounded up
    to a multiple of P_degree, each of a member's P_degree blocks read in `split` slices by as
    many member groups (data/pipeline.eval_batches), the padding of the last batch read too."""
    from hpcai_jax.data.pipeline import read_split

    size = -(-eval_batch_size // p_degree) * p_degree
    batches = -(-eval_examples // size)
    return evaluations * batches * size // p_degree // read_split(size // p_degree, members)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2,4,8,16", help="process counts, comma-separated")
    parser.add_argument("--steps", type=int, default=32, help="training steps per run")
    parser.add_argument("--batch_size", type=int, default=16, help="per-member batch")
    parser.add_argument("--train_examples", type=int, default=256)
    parser.add_argument("--eval_examples", type=int, default=64, help="also the eval batch size")
    parser.add_argument("--log_every", type=int, default=8, help="progress and agreement period")
    parser.add_argument("--repeats", type=int, default=1, help="times the whole plan is run")
    parser.add_argument("--distributed_timeout_s", type=int, default=900)
    parser.add_argument("--timeout_s", type=float, default=1200, help="the launcher's limit")
    parser.add_argument(
        "--stream_at_start",
        action="store_true",
        help="let every run measure STREAM at start, as the engine does by default (on CPUs its "
        "arrays are split over all devices, so each process's RSS then falls with N)",
    )
    parser.add_argument("--json", default="", help="write every figure and fit here")
    parser.add_argument("--keep", default="", help="keep the runs' records and logs here")
    args = parser.parse_args(argv)
    try:
        args.counts = sorted({int(n) for n in args.processes.split(",") if n.strip()})
    except ValueError:
        parser.error(f"--processes={args.processes}: expected comma-separated integers")
    if not args.counts or args.counts[0] < 1:
        parser.error(f"--processes={args.processes}: expected counts >= 1")
    if args.repeats < 1:
        parser.error(f"--repeats={args.repeats}: expected >= 1")
    return args


def stream_record(workdir: Path) -> Path:
    """A small STREAM record (one process, Triad), given to every run as --stream_record so that
    none measures STREAM at start: on CPUs that start-up measurement splits 2^25-element arrays
    over every device of the job, a per-process memory and time that shrinks with N here and
    does not exist in that form on accelerators (docs/scale_sim.md)."""
    out = workdir / "stream"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcai_jax.main",
            "--mode=stream",
            "--array_size=4194304",
            "--num_times=5",
            "--precision=float32",
            "--stream_kernels=triad",
            f"--results_dir={out}",
        ],
        cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
    )
    found = sorted(out.glob("*.json"))
    if done.returncode != 0 or not found:
        raise SystemExit(f"scale_sim: the STREAM record failed: {done.stderr[-500:]}")
    return found[0]


def engine_flags(args: argparse.Namespace, processes: int, p_degree: int, results: Path):
    """hpcai_jax.main's flags for one run: one member per P_degree devices, one device each."""
    stream = [f"--stream_record={args.stream_record}"] if args.stream_record else []
    return [
        *stream,
        "--workload=regression",
        "--model=mlp",
        "--dataset=friedman1",
        "--target_quality=0.9",
        f"--ensemble_size={processes // p_degree}",
        f"--parallel_degree={p_degree}",
        "--members_per_device=1",
        f"--batch_size={args.batch_size}",
        f"--train_examples={args.train_examples}",
        f"--eval_examples={args.eval_examples}",
        f"--eval_batch_size={args.eval_examples}",
        f"--steps={args.steps}",
        f"--log_every={args.log_every}",
        f"--distributed_timeout_s={args.distributed_timeout_s}",
        f"--results_dir={results}",
        # Every process's own INFO lines (the first training line is timed from them); by
        # default processes other than 0 log only warnings and errors.
        "--verbosity=1",
    ]


def has_gnu_time() -> bool:
    """GNU time's -v gives the peak RSS of the process it runs; busybox's or a shell's may not."""
    if not os.access(GNU_TIME, os.X_OK):
        return False
    done = subprocess.run([GNU_TIME, "-v", "true"], capture_output=True, text=True)
    return done.returncode == 0 and "Maximum resident set size" in done.stderr


def launch(args, processes: int, p_degree: int, results: Path, gnu_time: bool):
    """Runs the job through the launcher; returns (launch time.time(), wall s, exit code, lines).
    A hung launcher gets SIGTERM (which it forwards) a minute past its own limit, then SIGKILL."""
    command = [sys.executable, "-c", WRAPPER, *engine_flags(args, processes, p_degree, results)]
    argv = [
        sys.executable,
        str(LAUNCHER),
        f"--num_processes={processes}",
        "--devices_per_process=1",
        f"--timeout_s={args.timeout_s:g}",
        "--",
        *([GNU_TIME, "-v"] if gnu_time else []),
        *command,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start, begun = time.time(), time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    guards = [
        threading.Timer(args.timeout_s + 60, proc.send_signal, (signal.SIGTERM,)),
        threading.Timer(args.timeout_s + 90, proc.kill),
    ]
    for guard in guards:
        guard.daemon = True
        guard.start()
    lines = [line.rstrip("\n") for line in proc.stdout]
    code = proc.wait()
    for guard in guards:
        guard.cancel()
    return start, time.perf_counter() - begun, code, lines


def absl_time(match: re.Match, launched: float) -> float | None:
    """An absl line's local timestamp as time.time(); absl omits the year: the launch's, or the
    next one for a run that crossed a new year."""
    if not match.group("level"):
        return None
    year = datetime.datetime.fromtimestamp(launched).year
    fields = [int(match.group(k)) for k in ("mo", "d", "h", "mi", "s", "us")]
    at = datetime.datetime(year, *fields).timestamp()
    if at < launched - 86_400:
        at = datetime.datetime(year + 1, *fields).timestamp()
    return at


def parse_log(lines: list[str], launched: float) -> dict[int, dict]:
    """Per process: each milestone's seconds after launch (its first line), peak RSS (GNU time's,
    else the wrapper's own), CPU seconds and held-out bytes read (the wrapper's count)."""
    out: dict[int, dict] = {}
    for line in lines:
        match = LINE.match(line)
        if not match:
            continue
        proc = out.setdefault(int(match.group("p")), {"at": {}})
        msg = match.group("msg")
        at = absl_time(match, launched)
        if at is not None:
            for name, pattern in MILESTONES:
                if name not in proc["at"] and pattern.search(msg):
                    proc["at"][name] = at - launched
            continue
        for key, pattern in PER_PROCESS.items():
            found = pattern.search(msg)
            if found and key == "self":
                proc["held_out_bytes"] = int(found.group(1))
                proc.setdefault("rss_kb", int(found.group(2)))
                proc["self_cpu_s"] = float(found.group(3))
                if float(found.group(4)) >= 0:
                    proc["cpu_to_step_s"] = float(found.group(4))
            elif found:
                proc[key] = float(found.group(1))
    for proc in out.values():
        if "user_s" in proc and "sys_s" in proc:
            proc["cpu_s"] = proc["user_s"] + proc["sys_s"]
        elif "self_cpu_s" in proc:
            proc["cpu_s"] = proc["self_cpu_s"]
    return out


def critical_path(per_process: dict[int, dict]) -> dict[str, float | None]:
    """Each phase's share of the job's start-up: the slowest process's arrival at its milestone
    less its arrival at the one before. The job waits for its slowest process at every one, so
    the phases add up to the start-up of the slowest process's first training line."""
    phases, before = {}, 0.0
    for name, _ in MILESTONES:
        times = [p["at"].get(name) for p in per_process.values()]
        if not times or None in times:
            phases[name] = None
            continue
        phases[name] = max(times) - before
        before = max(times)
    return phases


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _max(values) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def read_record(results: Path) -> tuple[dict | None, int | None]:
    """Process 0's JSON record (alone it writes one) and its size in bytes."""
    found = sorted(results.glob("*.json"))
    if not found:
        return None, None
    return json.loads(found[0].read_text()), found[0].stat().st_size


def record_figures(record: dict | None) -> dict:
    """The host's time per step as the record has it: every process's median and slowest step on
    its own clock, the slowest process's timed steps summed, the agreements' waits."""
    if record is None:
        return {}
    timing = record.get("timing", {})
    per = timing.get("per_process") or []
    startups = [p.get("startup_s") for p in per]
    return {
        "step_median_s": _median((p.get("step_s") or {}).get("median_s") for p in per),
        "step_max_s": _max((p.get("step_s") or {}).get("max_s") for p in per),
        "train_wall_s": timing.get("train_wall_s"),
        "agree_max_s": _max(p.get("agree_s") for p in per),
        "eval_s": timing.get("eval_s"),
        "record_startup_max_s": _max(startups),
        "record_startup_p0": timing.get("startup"),
    }


def cores_used(per_process: dict[int, dict], processes: int, startup_s: float | None):
    """Cores the job kept busy during its start-up: every process's CPU seconds until its first
    training line over the start-up's wall time. Near min(processes, cores) the start-up is the
    CPU work queued on too few cores (16 processes on 2 here); below it, the job waited (on its
    peers, on I/O) or other users' load took the cores."""
    spent = [p.get("cpu_to_step_s") for p in per_process.values()]
    if len(spent) < processes or None in spent or not startup_s:
        return None
    return sum(spent) / startup_s


def measure(args, processes: int, p_degree: int, workdir: Path, gnu_time: bool) -> dict:
    """One job: its row of figures (None where not measured; `error` says why)."""
    results = workdir / f"n{processes}-p{p_degree}-{time.time_ns()}"
    launched, wall, code, lines = launch(args, processes, p_degree, results, gnu_time)
    if args.keep:
        results.mkdir(parents=True, exist_ok=True)
        (results / "launcher.log").write_text("\n".join(lines) + "\n")
    per = parse_log(lines, launched)
    record, size = read_record(results)
    starts = [p["at"].get("to_step") for p in per.values()]
    measured = [p.get("held_out_bytes") for p in per.values()]
    counted = None if not measured or None in measured or -1 in measured else max(measured)
    rows = held_out_rows_per_process(
        args.eval_examples, args.eval_examples, p_degree, processes // p_degree
    )
    row = {
        "processes": processes,
        "p_degree": p_degree,
        "members": processes // p_degree,
        "exit_code": code,
        "wall_s": wall,
        "startup_max_s": None if None in starts or len(per) < processes else max(starts),
        "startup_median_s": _median(starts),
        "startup_cpu_s": _median(p.get("cpu_to_step_s") for p in per.values()),
        "phases": critical_path(per),
        "rss_max_mb": _max(p.get("rss_kb") for p in per.values()),
        "rss_median_mb": _median(p.get("rss_kb") for p in per.values()),
        "cpu_median_s": _median(p.get("cpu_s") for p in per.values()),
        "held_out_bytes": counted,
        "held_out_bytes_each": sorted(v for v in measured if v is not None),
        "held_out_bytes_estimated": rows * bytes_per_example(),
        "record_bytes": size,
        **record_figures(record),
    }
    for key in ("rss_max_mb", "rss_median_mb"):
        row[key] = None if row[key] is None else row[key] / 1024
    row["cores_used"] = cores_used(per, processes, row["startup_max_s"])
    if code != 0:
        row["error"] = f"launcher exited {code}: " + " | ".join(lines[-3:])
    return row


def mem_available_mb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def plan(counts: list[int]) -> list[tuple[int, int]]:
    """The runs in order: the 1-process baseline, then each count's two layouts back to back (a
    load change hits both alike), then the baseline again."""
    runs = [(1, 1)]
    for n in counts:
        if n > 1:
            runs.append((n, 1))
            if n % 2 == 0:
                runs.append((n, 2))
    return [*runs, (1, 1)]


def r_squared(y: np.ndarray, predicted: np.ndarray) -> float | None:
    total = float(((y - y.mean()) ** 2).sum())
    return None if total == 0 else 1 - float(((y - predicted) ** 2).sum()) / total


# Below this R² neither model explains the scatter: the figure shows no trend with N, and its
# mean is what is extrapolated (a slope fitted to noise would be extrapolated 1,000-fold).
TREND_R2 = 0.5


def fit(x, y) -> dict | None:
    """A least-squares line y = a + b x (numpy.polyfit, degree 1) and a power law y = c x^k (a
    line in log-log), each with its R² on y itself, so the two compare on what is extrapolated;
    "flat" where neither reaches TREND_R2."""
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if a is not None and b is not None]
    if len({a for a, _ in pairs}) < 2:
        return None
    x, y = (np.asarray(v, dtype=float) for v in zip(*pairs, strict=True))
    slope, intercept = np.polyfit(x, y, 1)
    out = {
        "points": len(x),
        "slope": float(slope),
        "intercept": float(intercept),
        "r2_linear": r_squared(y, intercept + slope * x),
        "exponent": None,
        "coefficient": None,
        "r2_power": None,
        "mean": float(y.mean()),
    }
    if (x > 0).all() and (y > 0).all():
        exponent, log_c = np.polyfit(np.log(x), np.log(y), 1)
        out.update(exponent=float(exponent), coefficient=float(np.exp(log_c)))
        out["r2_power"] = r_squared(y, np.exp(log_c) * x**exponent)
    lin, power = out["r2_linear"] or 0.0, out["r2_power"] or 0.0
    out["better"] = "log-log" if power > lin else "linear"
    if max(lin, power) < TREND_R2:
        out["better"] = "flat"
    return out


def predict(f: dict, x: float, model: str | None = None) -> float:
    model = model or f["better"]
    if model == "flat":
        return f["mean"]
    if model == "log-log":
        return f["coefficient"] * x ** f["exponent"]
    return f["intercept"] + f["slope"] * x


def baseline(rows: list[dict]) -> dict:
    """The 1-process runs' figures, averaged (first and last run of the benchmark)."""
    ones = [r for r in rows if r["processes"] == 1 and "error" not in r]
    keys = [k for k, _, _ in FIGURES] + ["startup_median_s", "cpu_median_s", "wall_s"]
    out = {}
    for key in keys:
        values = [r[key] for r in ones if r.get(key) is not None]
        out[key] = statistics.fmean(values) if values else None
    return out


def ratio(value, base) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}"


def num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e5:
        return f"{value:.3g}"
    return f"{value:,.{digits}f}"


def startup_table(rows: list[dict], base: dict) -> list[str]:
    """Start-up, one row per run: the slowest process's and the median's, and the critical path's
    phases (docs/scale_sim.md)."""
    out = [
        "| processes | P_degree | M | start-up s (slowest) | x1 | median s | import s | join s | "
        "setup s | compile s | to step s | CPU s to step | x1 | cores used | record's slowest s | "
        "job wall s |",
        "|" + " --- |" * 16,
    ]
    for r in rows:
        ph = r["phases"]
        cells = [
            str(r["processes"]),
            str(r["p_degree"]),
            str(r["members"]),
            num(r["startup_max_s"]),
            ratio(r["startup_max_s"], base["startup_max_s"]),
            num(r["startup_median_s"]),
            *(num(ph.get(name)) for name, _ in MILESTONES),
            num(r["startup_cpu_s"]),
            ratio(r["startup_cpu_s"], base["startup_cpu_s"]),
            num(r["cores_used"]),
            num(r.get("record_startup_max_s")),
            num(r["wall_s"], 1),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def process_table(rows: list[dict], base: dict) -> list[str]:
    """What each process costs, one row per run, each figure with its ratio to 1 process's."""
    out = [
        "| processes | P_degree | M | peak RSS MB | x1 | CPU s | x1 | step ms (median) | x1 | "
        "step ms (max) | train wall s | x1 | agree s (max) | held-out B/process | estimate | "
        "record B | x1 |",
        "|" + " --- |" * 17,
    ]
    for r in rows:
        ms = {k: None if r.get(k) is None else r[k] * 1e3 for k in ("step_median_s", "step_max_s")}
        cells = [
            str(r["processes"]),
            str(r["p_degree"]),
            str(r["members"]),
            num(r["rss_max_mb"], 0),
            ratio(r["rss_max_mb"], base["rss_max_mb"]),
            num(r["cpu_median_s"], 1),
            ratio(r["cpu_median_s"], base["cpu_median_s"]),
            num(ms["step_median_s"], 3),
            ratio(r.get("step_median_s"), base["step_median_s"]),
            num(ms["step_max_s"], 1),
            num(r.get("train_wall_s"), 3),
            ratio(r.get("train_wall_s"), base["train_wall_s"]),
            num(r.get("agree_max_s"), 3),
            num(r["held_out_bytes"], 0),
            num(r["held_out_bytes_estimated"], 0),
            num(r["record_bytes"], 0),
            ratio(r["record_bytes"], base["record_bytes"]),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def fits(rows: list[dict]) -> dict:
    """Per figure: a fit against processes for each layout, and one over both layouts against
    processes and against M (which of the two explains a figure says what it scales with)."""
    good = [r for r in rows if "error" not in r]
    out = {}
    for key, _, _ in FIGURES:
        per_layout = {
            p: fit(
                [r["processes"] for r in good if r["p_degree"] == p],
                [r[key] for r in good if r["p_degree"] == p],
            )
            for p in (1, 2)
        }
        out[key] = {
            "layouts": per_layout,
            "pooled_vs_processes": fit([r["processes"] for r in good], [r[key] for r in good]),
            "pooled_vs_members": fit([r["members"] for r in good], [r[key] for r in good]),
        }
    return out


def extrapolated(value: float | None, unit: str) -> str:
    """A line extrapolated below zero says nothing but that the figure falls: shown as such."""
    if value is None:
        return "-"
    return "< 0 (falls)" if value < 0 else f"{num(value, 3)} {unit}"


def _fit_text(f: dict | None) -> str:
    if f is None:
        return "too few points"
    lin = f"{f['intercept']:.4g} + {f['slope']:.4g} n (R² {num(f['r2_linear'], 3)})"
    power = "no log-log (a value <= 0)"
    if f["exponent"] is not None:
        power = f"{f['coefficient']:.4g} n^{f['exponent']:.3f} (R² {num(f['r2_power'], 3)})"
    if f["better"] == "flat":
        return f"{lin}; {power}; flat: neither R² reaches {TREND_R2}, the mean {f['mean']:.4g}"
    return f"{lin}; {power}; better: {f['better']}"


def fit_report(all_fits: dict, base: dict) -> list[str]:
    """The fits and, per layout, the extrapolation to TARGETS by the better-fitting model (the
    other model's value after it), each with its ratio to the 1-process figure."""
    out = []
    for key, label, unit in FIGURES:
        entry = all_fits[key]
        out.append(f"{label} [{unit}], 1 process: {num(base[key], 4)}")
        for p, f in entry["layouts"].items():
            out.append(f"  P_degree={p} vs processes: {_fit_text(f)}")
            if f is None:
                continue
            other = {"log-log": "linear", "linear": "log-log", "flat": "linear"}[f["better"]]
            if other == "log-log" and f["exponent"] is None:
                other = "flat"
            for name, n in TARGETS:
                best = predict(f, n)
                alt = predict(f, n, other)
                out.append(
                    f"    {name:<24} n={n:>6,}  M={n // p:>6,}: {extrapolated(best, unit)} "
                    f"(x{ratio(max(best, 0.0), base[key])} of 1 process; {other}: "
                    f"{extrapolated(alt, unit)})"
                )
        for against in ("processes", "members"):
            f = entry[f"pooled_vs_{against}"]
            r2 = "-" if f is None else num(f["r2_linear"], 3)
            out.append(f"  both layouts vs {against}: linear R² {r2}")
    return out


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def context() -> dict:
    """Where the figures came from: commit, cores, load and memory when the run started."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "commit": head or None,
        "cpus": cores(),
        "loadavg": os.getloadavg(),
        "mem_available_mb": mem_available_mb(),
        "python": sys.version.split()[0],
        "gnu_time": has_gnu_time(),
    }


def run_all(args, workdir: Path, gnu_time: bool) -> list[dict]:
    """Every planned run, each printed as it ends; a run that would not fit in the memory now
    available (its process count times the largest peak RSS seen, plus a margin) is skipped."""
    rows, largest_mb = [], 1024.0
    for processes, p_degree in plan(args.counts) * args.repeats:
        available = mem_available_mb()
        needed = processes * largest_mb * 1.15 + 512
        if available is not None and needed > available:
            print(f"skipped {processes} x P{p_degree}: needs ~{needed:,.0f} MB, {available:,.0f}")
            continue
        load = os.getloadavg()[0]
        row = measure(args, processes, p_degree, workdir, gnu_time)
        row["load_before"] = load
        rows.append(row)
        largest_mb = max(largest_mb, row["rss_max_mb"] or 0)
        print(
            f"n={processes:>3} P={p_degree} M={row['members']:>3}: start-up "
            f"{num(row['startup_max_s'])} s (CPU {num(row['startup_cpu_s'])} s each, "
            f"{num(row['cores_used'])} cores used), RSS {num(row['rss_max_mb'], 0)} MB, step "
            f"{num((row.get('step_median_s') or math.nan) * 1e3, 3)} ms, held-out "
            f"{row['held_out_bytes']} B, record {row['record_bytes']} B, wall "
            f"{row['wall_s']:.1f} s, load before {load:.1f}"
            + (f"  ERROR {row['error']}" if "error" in row else ""),
            flush=True,
        )
    return rows


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    info = context()
    print(f"scale_sim: {json.dumps(info)}", flush=True)
    begun = time.perf_counter()
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="scale_sim_"))
    try:
        args.stream_record = None if args.stream_at_start else str(stream_record(workdir))
        rows = run_all(args, workdir, info["gnu_time"])
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    base = baseline(rows)
    ones = [r for r in rows if r["processes"] == 1]
    drift = [ratio(r["startup_max_s"], ones[0]["startup_max_s"]) for r in ones[1:]]
    info["loadavg_end"] = os.getloadavg()
    info["seconds"] = time.perf_counter() - begun
    all_fits = fits(rows)
    report = [
        "",
        *startup_table(rows, base),
        "",
        *process_table(rows, base),
        "",
        f"1-process baseline, last run / first run start-up: {', '.join(drift) or '-'}",
        f"held-out bytes per example: {bytes_per_example()}",
        "",
        *fit_report(all_fits, base),
        "",
        f"benchmark wall time: {info['seconds']:.0f} s; load average (1, 5, 15 min) at the start "
        f"{info['loadavg']}, at the end {info['loadavg_end']}",
    ]
    print("\n".join(report))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"context": info, "args": vars(args), "rows": rows, "fits": all_fits}, indent=1
            )
        )
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
