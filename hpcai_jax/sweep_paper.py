"""`python -m hpcai_jax.sweep --experiment=paper`: HPC AI500 V3.0's experiments at the scale of
one machine, on Fashion-MNIST with up to 8 devices forced on the host CPU, each run exactly its
Sys_scale = M × P_degree (launch/README.md, Sweeps): devices simulated on shared cores.

The plan is a table of points, each run once per seed as `python -m hpcai_jax.main` with a
record named for its point and seed and stamped with both (--sweep_plan), so the report never
reads run ids. What each point stands for (Fig. 5, Fig. 7, the compute-matched single model,
the bagging pairs), why the plan has this size and how `estimate_s` was calibrated:
docs/paper.md, "The plan" and "How the plan was sized".
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from hpcai_jax import records, sweep_plan

FORCE = "--xla_force_host_platform_device_count"
SEEDS = 3  # seeds per point
PAIRS = 5  # seed pairs of the bagging test: bagged and unbagged M = 8 runs on the same seeds
SEED_SPACING = 1000  # run k's seed: SEED_SPACING × (k + 1), one per run of the plan
# The runs' shared flags: resnet_mini on a Fashion-MNIST subset, evaluated on the whole test
# set at the end; 12,800 images, so that Fig. 7's (1, 8) member takes exactly 200 steps of 128
# (docs/paper.md, How the plan was sized).
FLAGS = (
    "--mode=train",
    "--workload=image_classification",
    "--model=resnet_mini",
    "--dataset=fashion_mnist",
    "--batch_size=128",
    "--train_examples=12800",
    "--epochs=2",
    "--learning_rate=0.4",
    "--lr_schedule=warmup_cosine",
    "--warmup_epochs=0.2",
    "--target_quality=0.8",
    "--log_every=100",
)
# --smoke: the same plan at toy size, one seed (a test runs it end to end); after the point's
# flags, so a FLOPS-only point's subset is toy-sized too. Its runs are named smoke-paper-…: a
# smoke record never has a full run's name, and its plan's fingerprint differs too.
SMOKE = (
    "--batch_size=16",
    "--train_examples=128",
    "--eval_examples=64",
    "--eval_batch_size=64",
    "--steps=2",
)


@dataclasses.dataclass(frozen=True)
class PaperPoint:
    label: str  # the run's name before its seed: fig5-M8, fig7-M2-P4, control-M8-nobag
    ensemble_size: int
    parallel_degree: int = 1
    flags: tuple[str, ...] = ()
    seeds: int = SEEDS
    seeds_of: str = ""  # another point's label: its k-th run takes that point's k-th seed


# Fig. 5's M = 1, 2, 4 stand for FLOPS only (Eq. 6 needs one whole epoch, docs/score.md §5):
# one epoch of a small subset, the step the same program as fig5-M8's per member.
# Their quality is the M = 8 runs' quality.sub_ensembles (random k-subsets).
FLOPS_ONLY = ("--train_examples=4096", "--epochs=1", "--eval_examples=1000")
# Fig. 7 at a per-device batch of 16: members of 16 × P_degree images, 1,600/800/400/200 steps
# at P_degree 1/2/4/8 over 2 epochs of 12,800 images; the linear rule scales the learning rate.
FIG7 = ("--batch_policy=per_device", "--batch_size=16")
NOBAG = ("--bootstrap=none",)
MATCHED_EPOCHS = 16  # 8 × the 2 epochs of one M = 8 member: the M = 8 ensemble's training
POINTS = (
    *(PaperPoint(f"fig5-M{m}-flops", m, 1, FLOPS_ONLY) for m in (1, 2, 4)),
    PaperPoint("fig5-M8", 8, seeds=PAIRS),
    *(PaperPoint(f"fig7-M{m}-P{8 // m}", m, 8 // m, FIG7) for m in (8, 4, 2, 1)),
    PaperPoint("control-M8-nobag", 8, 1, NOBAG, PAIRS, seeds_of="fig5-M8"),
    PaperPoint("control-M1-matched", 1, 1, (*NOBAG, f"--epochs={MATCHED_EPOCHS}")),
)


@dataclasses.dataclass(frozen=True)
class PaperRun:
    point: PaperPoint
    seed: int
    smoke: bool = False
    index: int = 0  # which of its point's seeds: its record's sweep_plan.seed_index

    @property
    def name(self) -> str:
        return f"{'smoke-' if self.smoke else ''}paper-{self.point.label}-s{self.seed}"


def paper_runs(smoke: bool = False, only: tuple[str, ...] = ()) -> list[PaperRun]:
    """Every run, seed index by seed index (a machine that drifts touches every point alike);
    each run its own seed, SEED_SPACING apart, the same with or without `only` (the points of
    these labels), but a point `seeds_of` another, whose k-th run takes that point's k-th seed.
    A point of fewer seeds runs in the first rounds."""
    runs, seeds, k = [], {}, 0
    for s in range(1 if smoke else max(p.seeds for p in POINTS)):
        for point in POINTS:
            k += 1
            seeds[point.label, s] = seeds.get((point.seeds_of, s), SEED_SPACING * k)
            if s < point.seeds and (not only or point.label in only):
                runs.append(PaperRun(point, seeds[point.label, s], smoke, s))
    return runs


def plan_of(smoke: bool, main_args: list[str]) -> str:
    """The plan's fingerprint (sweep_plan.py): the shared flags, --smoke's and the caller's.
    Neither --only nor --results_dir changes it: a rerun of some points finds their records."""
    return sweep_plan.fingerprint("paper", smoke, [*FLAGS, *(SMOKE if smoke else ()), *main_args])


def paper_command(run: PaperRun, results_dir: str, main_args: list[str], plan: str = "") -> list:
    """The run's command line: the shared flags, the point's, --smoke's, then the caller's
    (absl: the last one wins), and the plan's fingerprint after them (no flag replaces it)."""
    p = run.point
    return [
        sys.executable,
        "-m",
        "hpcai_jax.main",
        *FLAGS,
        *p.flags,
        *(SMOKE if run.smoke else ()),
        f"--ensemble_size={p.ensemble_size}",
        f"--parallel_degree={p.parallel_degree}",
        "--members_per_device=1",
        f"--seed={run.seed}",
        f"--run_name={run.name}",
        f"--results_dir={results_dir}",
        *main_args,
        *([f"--sweep_plan={sweep_plan.placed(plan, p.label, run.index)}"] if plan else []),
    ]


def shown(run: PaperRun, cmd: list[str]) -> str:
    """The command as a shell runs it, its XLA_FLAGS (the point's device count) in front."""
    flags = child_env(run.point.ensemble_size * run.point.parallel_degree)["XLA_FLAGS"]
    return f"XLA_FLAGS={shlex.quote(flags)} {shlex.join(cmd)}"


# The estimate's rates, fitted to M = 8 runs at batch 128 and 16 on 2 quiet cores (docs/paper.md,
# How the plan was sized).
TRAIN_S_PER_MEMBER_IMAGE = 0.22e-3  # one member's training on one image (resnet_mini)
STEP_S = 0.010  # per step, over and above its images: what makes small batches dearer
EVAL_S_PER_MEMBER_IMAGE = 0.16e-3  # one member's evaluation of one test image
START_S = 8.0  # per run: the process, start-up and compiles, the plan's caches shared
TEST_IMAGES = 10_000  # Fashion-MNIST's test set: --eval_examples=0


def _flag(cmd: list, name: str, default: float) -> float:
    """The value absl would take for --name in cmd (the last one wins)."""
    values = [a.split("=", 1)[1] for a in cmd if str(a).startswith(f"--{name}=")]
    return float(values[-1]) if values else default


def _member_batch(cmd: list) -> float:
    """A member's batch: --batch_size, times P_degree under --batch_policy=per_device."""
    per_device = "--batch_policy=per_device" in cmd
    return _flag(cmd, "batch_size", 32) * (_flag(cmd, "parallel_degree", 1) if per_device else 1)


def _epochs(cmd: list, n: float) -> float:
    """The epochs a run trains: --epochs, or --steps' member batches."""
    steps = _flag(cmd, "steps", 0)
    return steps * _member_batch(cmd) / n if steps else _flag(cmd, "epochs", 1)


def estimate_s(runs: list[PaperRun], main_args: tuple[str, ...] | list[str] = ()) -> float:
    """The plan's wall time on 2 quiet cores, estimated (the caller's flags counted): images
    trained and evaluated per member and steps taken at the fitted rates, plus a start-up per
    run. A model for sizing, not a measurement."""
    total = 0.0
    for run in runs:
        cmd = paper_command(run, "", list(main_args))
        n = _flag(cmd, "train_examples", 60_000)
        epochs = _epochs(cmd, n)
        every, evals = _flag(cmd, "eval_every_epochs", 0), 1
        if every:  # each K epochs, then the final one unless the last was at the end
            evals = int(epochs // every) + (epochs % every > 0)
        tested = _flag(cmd, "eval_examples", 0) or TEST_IMAGES
        trained = n * epochs * TRAIN_S_PER_MEMBER_IMAGE + evals * tested * EVAL_S_PER_MEMBER_IMAGE
        steps = n * epochs / _member_batch(cmd)
        total += START_S + run.point.ensemble_size * trained + steps * STEP_S
    return total


# The caches the plan's runs share unless the caller names their own: XLA's compiled programs
# (seeds of one point compile the same step) and the start-up measurements (flops/host_cache.py;
# each record says which run measured what it read).
CACHES = {"JAX_COMPILATION_CACHE_DIR": "xla", "HPCAI_JAX_STARTUP_CACHE": "startup"}


def shared_caches(folder: str, environ: dict | None = None) -> dict:
    """The environment with each of CACHES the caller left unset placed under `folder`."""
    env = dict(os.environ if environ is None else environ)
    for name, sub in CACHES.items():
        env.setdefault(name, str(Path(folder) / sub))
    return env


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


def run_plan(runs: list[PaperRun], results_dir: str, main_args: list[str], clock=time):
    """Runs the plan in order, skipping the runs it finished before and running again, over
    their records, those it left partial or invalid (a record of another plan refuses it, in one
    line, before any run); returns (records written, failed runs). A failed run ends neither
    the plan nor its summary."""
    plan = plan_of(bool(runs) and runs[0].smoke, main_args)
    sweep_plan.refuse_others([Path(results_dir) / f"{r.name}.json" for r in runs], plan)
    with tempfile.TemporaryDirectory(prefix="hpcai_jax_paper_caches_") as caches:
        return _run_each(runs, results_dir, main_args, plan, shared_caches(caches), clock)


def _run_each(runs, results_dir, main_args, plan, environ, clock):
    """run_plan's loop, each run in `environ` with its own device count."""
    written, failed = [], []
    for k, run in enumerate(runs, 1):
        path = Path(results_dir) / f"{run.name}.json"
        head = f"[{k}/{len(runs)}] {run.point.label} seed {run.seed}"
        if finished(path):
            print(f"{head}: done before, skipped", flush=True)
            written.append(str(path))
            continue
        cmd = paper_command(run, results_dir, main_args, plan)
        if sweep_plan.stamp(path) == plan:  # its own partial or invalid record: replaced
            cmd.append("--overwrite")
        start = clock.monotonic()
        devices = run.point.ensemble_size * run.point.parallel_degree
        returncode = sweep_plan.run(cmd, env=child_env(devices, environ))
        took = clock.monotonic() - start
        if returncode == 0 and finished(path):
            print(f"{head} done in {took:.0f}s", flush=True)
            written.append(str(path))
        else:
            print(f"{head} FAILED (exit {returncode}) after {took:.0f}s", flush=True)
            failed.append(f"{run.name} (exit {returncode})")
    return written, failed
