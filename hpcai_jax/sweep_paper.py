"""`python -m hpcai_jax.sweep --experiment=paper`: HPC AI500 V3.0's experiments at the scale of
one machine, on Fashion-MNIST with up to 8 devices forced on the host CPU, each run exactly its
Sys_scale = M × P_degree (launch/README.md, Sweeps): devices simulated on shared cores.

The plan is a list of runs of `python -m hpcai_jax.main`, each a (point, seed) with a record
named for both. Fig. 5's shape (§4.3): P_degree 1, M = 1, 2, 4, 8, one member per device;
Fig. 7's shape (§4.4.1): Sys_scale 8, (M, P_degree) = (4, 2), (2, 4), (1, 8) under
--batch_policy=per_device ((8, 1) is Fig. 5's M = 8 run: at P_degree 1 both policies train the
same batch); the controls: M = 8 with --bootstrap=none, and one member on all the data. Every
run has a seed of its own, so no two runs share a member (a member is (seed, m):
engine/state.member_keys, data/sampler.member_counts).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from hpcai_jax import records

FORCE = "--xla_force_host_platform_device_count"
SEEDS = 3  # seeds per point
SEED_SPACING = 1000  # run k's seed: SEED_SPACING × (k + 1), one per run of the plan
# The runs' shared flags: resnet_small on a Fashion-MNIST subset, evaluated on the whole test
# set at the end (Fig. 7's points each epoch too: time to target). Sized for about 30 minutes
# on 2 quiet cores (the estimate and how it was made: launch/README.md, Sweeps).
FLAGS = (
    "--mode=train",
    "--workload=image_classification",
    "--model=resnet_small",
    "--dataset=fashion_mnist",
    "--batch_size=64",
    "--train_examples=3584",
    "--epochs=2",
    "--learning_rate=0.4",
    "--lr_schedule=warmup_cosine",
    "--warmup_epochs=0.2",
    "--target_quality=0.8",
    "--log_every=100",
)
# --smoke: the same plan at toy size, one seed (a test runs it end to end).
SMOKE_FLAGS = (
    *FLAGS,
    "--batch_size=16",
    "--train_examples=128",
    "--eval_examples=64",
    "--eval_batch_size=64",
    "--steps=2",
)


@dataclasses.dataclass(frozen=True)
class PaperPoint:
    label: str  # the run's name before its seed: fig5-M4, fig7-M2-P4, control-M8-nobag
    ensemble_size: int
    parallel_degree: int = 1
    flags: tuple[str, ...] = ()


POINTS = (
    *(PaperPoint(f"fig5-M{m}", m) for m in (1, 2, 4, 8)),
    *(
        PaperPoint(f"fig7-M{m}-P{p}", m, p, ("--batch_policy=per_device", "--eval_every_epochs=1"))
        for m, p in ((4, 2), (2, 4), (1, 8))
    ),
    PaperPoint("control-M8-nobag", 8, 1, ("--bootstrap=none",)),
    PaperPoint("control-M1-alldata", 1, 1, ("--bootstrap=none",)),
)


@dataclasses.dataclass(frozen=True)
class PaperRun:
    point: PaperPoint
    seed: int

    @property
    def name(self) -> str:
        return f"paper-{self.point.label}-s{self.seed}"


def paper_runs(smoke: bool = False, only: tuple[str, ...] = ()) -> list[PaperRun]:
    """Every run, seed by seed (a machine that drifts touches every point alike); each run its
    own seed, SEED_SPACING apart. `only`: the points of these labels."""
    seeds = 1 if smoke else SEEDS
    runs, k = [], 0
    for _ in range(seeds):
        for point in POINTS:
            k += 1
            if not only or point.label in only:
                runs.append(PaperRun(point, SEED_SPACING * k))
    return runs


def paper_command(run: PaperRun, results_dir: str, smoke: bool, main_args: list[str]) -> list:
    """The run's command line: the shared flags, the point's, then the caller's (absl: the last
    one wins)."""
    p = run.point
    return [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *(SMOKE_FLAGS if smoke else FLAGS),
        *p.flags,
        f"--ensemble_size={p.ensemble_size}",
        f"--parallel_degree={p.parallel_degree}",
        "--members_per_device=1",
        f"--seed={run.seed}",
        f"--run_name={run.name}",
        f"--results_dir={results_dir}",
        *main_args,
    ]


def child_env(devices: int, environ: dict | None = None) -> dict:
    """A run's environment: exactly its point's Sys_scale forced as host devices (Eq. 5 must
    hold as given), replacing any count XLA_FLAGS already forces; its other flags kept."""
    env = dict(os.environ if environ is None else environ)
    kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(FORCE)]
    env["XLA_FLAGS"] = " ".join([*kept, f"{FORCE}={devices}"])
    return env


def finished(path: Path) -> bool:
    """Whether a run's record exists and is complete: a rerun of the plan skips it."""
    try:
        return records.read(path).status == "complete"
    except Exception:  # absent, partial, unreadable: run it (again)
        return False


def run_plan(runs: list[PaperRun], results_dir: str, smoke: bool, main_args: list[str], clock=time):
    """Runs the plan in order, skipping finished runs; returns (records written, failed runs).
    A failed run ends neither the plan nor its summary."""
    written, failed = [], []
    for k, run in enumerate(runs, 1):
        path = Path(results_dir) / f"{run.name}.json"
        head = f"[{k}/{len(runs)}] {run.point.label} seed {run.seed}"
        if finished(path):
            print(f"{head}: done before, skipped", flush=True)
            written.append(str(path))
            continue
        cmd = paper_command(run, results_dir, smoke, main_args)
        start = clock.monotonic()
        devices = run.point.ensemble_size * run.point.parallel_degree
        returncode = subprocess.run(cmd, env=child_env(devices)).returncode
        took = clock.monotonic() - start
        if returncode == 0 and finished(path):
            print(f"{head} done in {took:.0f}s", flush=True)
            written.append(str(path))
        else:
            print(f"{head} FAILED (exit {returncode}) after {took:.0f}s", flush=True)
            failed.append(f"{run.name} (exit {returncode})")
    return written, failed
