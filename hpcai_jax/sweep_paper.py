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
import tempfile
import time
from pathlib import Path

from hpcai_jax import records, sweep_plan  # noqa: F401 - sweep_paper.records, as before

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


def _point(row: PaperPoint, smoke: bool) -> sweep_plan.Point:
    """A row of the table as the engine's point: one member per device, --smoke's flags after
    the point's own (so a FLOPS-only point's subset is toy-sized too)."""
    extra = (*row.flags, *(SMOKE if smoke else ()))
    return sweep_plan.Point(
        row.ensemble_size, row.parallel_degree, 1, extra, row.seeds, row.seeds_of, row.label
    )


def paper_runs(smoke: bool = False, only: tuple[str, ...] = ()) -> list[sweep_plan.Run]:
    """Every run, seed index by seed index (a machine that drifts touches every point alike);
    each run its own seed, SEED_SPACING apart, the same with or without `only` (the points of
    these labels), but a point `seeds_of` another, whose k-th run takes that point's k-th seed.
    A point of fewer seeds runs in the first rounds; a label twice in the table is one line."""
    sweep_plan.check_labels([row.label for row in POINTS], "sweep_paper.POINTS")
    runs, seeds, k = [], {}, 0
    for s in range(1 if smoke else max(row.seeds for row in POINTS)):
        for row in POINTS:
            k += 1
            seeds[row.label, s] = seed = seeds.get((row.seeds_of, s), SEED_SPACING * k)
            if s < row.seeds and (not only or row.label in only):
                name = f"{'smoke-' if smoke else ''}paper-{row.label}-s{seed}"
                runs.append(sweep_plan.Run(_point(row, smoke), name, seed, s))
    return runs


def plan_of(smoke: bool, main_args: list[str]) -> str:
    """The plan's fingerprint (sweep_plan.py): the shared flags, --smoke's and the caller's.
    Neither --only nor --results_dir changes it: a rerun of some points finds their records."""
    return sweep_plan.fingerprint("paper", smoke, [*FLAGS, *(SMOKE if smoke else ()), *main_args])


def paper_command(
    run: sweep_plan.Run, results_dir: str, main_args: list[str], plan: str = ""
) -> list[str]:
    """The run's command line (sweep_plan.command): the shared flags, the point's (--smoke's
    among them), then the caller's (absl: the last one wins), and the plan's fingerprint after
    them (no flag replaces it)."""
    return sweep_plan.command(run, FLAGS, [f"--results_dir={results_dir}", *main_args], plan=plan)


def shown(run: sweep_plan.Run, cmd: list[str]) -> str:
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
    """The value absl would take for --name in cmd (the last one wins), or `default`."""
    return _value(sweep_plan.caller_flags(cmd), name, default)


def _member_batch(values) -> float:
    """A member's batch: --batch_size, times P_degree under --batch_policy=per_device."""
    per_device = values["batch_policy"].present and values.batch_policy == "per_device"
    parallel = _value(values, "parallel_degree", 1) if per_device else 1
    return _value(values, "batch_size", 32) * parallel


def _value(values, name: str, default: float) -> float:
    """A parsed flag's value where the command sets it, else `default`."""
    return float(values[name].value) if values[name].present else default


def _epochs(values, n: float) -> float:
    """The epochs a run trains: --epochs, or --steps' member batches."""
    steps = _value(values, "steps", 0)
    return steps * _member_batch(values) / n if steps else _value(values, "epochs", 1)


def estimate_s(runs: list[sweep_plan.Run], main_args: tuple[str, ...] | list[str] = ()) -> float:
    """The plan's wall time on 2 quiet cores, estimated (the caller's flags counted): images
    trained and evaluated per member and steps taken at the fitted rates, plus a start-up per
    run. A model for sizing, not a measurement."""
    total = 0.0
    for run in runs:
        values = sweep_plan.caller_flags(paper_command(run, "", list(main_args)))
        n = _value(values, "train_examples", 60_000)
        epochs = _epochs(values, n)
        every, evals = _value(values, "eval_every_epochs", 0), 1
        if every:  # each K epochs, then the final one unless the last was at the end
            evals = int(epochs // every) + (epochs % every > 0)
        tested = _value(values, "eval_examples", 0) or TEST_IMAGES
        trained = n * epochs * TRAIN_S_PER_MEMBER_IMAGE + evals * tested * EVAL_S_PER_MEMBER_IMAGE
        steps = n * epochs / _member_batch(values)
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


def paper_plan(
    results_dir: str, main_args: list[str], fingerprint: str, environ: dict | None = None
) -> sweep_plan.Plan:
    """The paper plan in the engine: its commands, each run on exactly its Sys_scale of host
    devices (`child_env`), printed as a shell runs them under --dry_run only (a progress line
    per run instead)."""
    return sweep_plan.Plan(
        fingerprint,
        results_dir,
        lambda run, plan: paper_command(run, results_dir, main_args, plan),
        env=lambda run: child_env(run.point.devices, environ),
        shown=shown,
        echo=False,
    )


def run_plan(
    runs: list[sweep_plan.Run], results_dir: str, main_args: list[str], clock=time, dry_run=False
):
    """The plan's runs through the engine's one loop (sweep_plan.run_all: resumed, another
    plan's record refused, a failed run stopping none), sharing one set of caches unless the
    caller names their own (CACHES): (records written, failed runs)."""
    smoke = bool(runs) and runs[0].name.startswith("smoke-")
    with tempfile.TemporaryDirectory(prefix="hpcai_jax_paper_caches_") as caches:
        environ = shared_caches(caches)
        plan = paper_plan(results_dir, main_args, plan_of(smoke, main_args), environ)
        return sweep_plan.run_all(runs, plan, dry_run, clock)
