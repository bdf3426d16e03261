"""`python -m hpcai_jax.sweep --experiment=paper`: HPC AI500 V3.0's experiments at the scale of
one machine, on Fashion-MNIST with up to 8 devices forced on the host CPU, each run exactly its
Sys_scale = M × P_degree (launch/README.md, Sweeps): devices simulated on shared cores.

The plan is a list of runs of `python -m hpcai_jax.main`, each a (point, seed index) with a
record named for its point and seed and stamped with both (--sweep_plan). Fig. 5's shape
(§4.3): P_degree 1; its quality per M = 1…8 is the M = 8 runs' `quality.sub_ensembles`; M = 1,
2, 4 run for FLOPS only (Eq. 6 needs one whole epoch: one epoch of 4,096 images). Fig. 7's shape
(§4.4.1): Sys_scale 8, (M, P_degree) = (8, 1), (4, 2), (2, 4), (1, 8) under
--batch_policy=per_device at a batch of 16 per device, small enough that every member of every
point takes at least 200 steps (the paper's runs take thousands at any split). The controls: a
compute-matched single model (one member on all the data for 8 × the epochs of one M = 8
member), and M = 8 with --bootstrap=none on the very seeds of the M = 8 runs, so that each pair
shares its members' initialisations and data-order streams (data/sampler.py) and differs only
by the bootstrap. Every other run has a seed of its own, so no two runs share a member (a member
is (seed, m): engine/state.member_keys, data/sampler.member_counts).

The size (resnet_mini, 15,000 images × 2 epochs, so that each member reaches 0.80 on the whole
test set) and the rates of `estimate_s` were measured on 2 quiet cores: docs/paper.md, "How the
plan was sized".
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time

from hpcai_jax import records, sweep_plan  # noqa: F401 - sweep_paper.records, as before

FORCE = "--xla_force_host_platform_device_count"
SEEDS = 3  # seeds per point
PAIRS = 5  # seed pairs of the bagging test: bagged and unbagged M = 8 runs on the same seeds
SEED_SPACING = 1000  # run k's seed: SEED_SPACING × (k + 1), one per run of the plan
# The runs' shared flags: resnet_mini on a Fashion-MNIST subset, evaluated on the whole test
# set at the end (Fig. 7's points each epoch too: time to target). Sized so that each member
# reaches 0.80 (the size and the estimate: the module's docstring).
FLAGS = (
    "--mode=train",
    "--workload=image_classification",
    "--model=resnet_mini",
    "--dataset=fashion_mnist",
    "--batch_size=128",
    "--train_examples=15000",
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
# Fig. 7 at a per-device batch of 16: members of 16 × P_degree images, 1,875/938/469/235 steps
# at P_degree 1/2/4/8 over 2 epochs of 15,000 images; the linear rule scales the learning rate.
FIG7 = ("--batch_policy=per_device", "--batch_size=16", "--eval_every_epochs=1")
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


# The estimate's rates, on 2 quiet cores (how they were measured: the module's docstring).
TRAIN_S_PER_MEMBER_IMAGE = 0.25e-3  # one member's training on one image (resnet_mini, quiet)
EVAL_SHARE = 1 / 3  # an evaluated image, as a share of a trained one
START_S = 20.0  # per run: start-up, initialisation, compilation
TEST_IMAGES = 10_000  # Fashion-MNIST's test set: --eval_examples=0


def _flag(cmd: list, name: str, default: float) -> float:
    """The value absl would take for --name in cmd (the last one wins), or `default`."""
    return _value(sweep_plan.caller_flags(cmd), name, default)


def _value(values, name: str, default: float) -> float:
    """A parsed flag's value where the command sets it, else `default`."""
    return float(values[name].value) if values[name].present else default


def _epochs(values, n: float) -> float:
    """The epochs a run trains: --epochs, or --steps' batches (a member's, --batch_policy's)."""
    steps = _value(values, "steps", 0)
    if not steps:
        return _value(values, "epochs", 1)
    per_device = values["batch_policy"].present and values.batch_policy == "per_device"
    batch = _value(values, "batch_size", 32) * (
        _value(values, "parallel_degree", 1) if per_device else 1
    )
    return steps * batch / n


def estimate_s(runs: list[sweep_plan.Run], main_args: tuple[str, ...] | list[str] = ()) -> float:
    """The plan's wall time on 2 quiet cores, estimated (the caller's flags counted): images
    trained and evaluated per member at the quickstart's rates, plus a start-up per run. A
    model for sizing, not a measurement."""
    total = 0.0
    for run in runs:
        values = sweep_plan.caller_flags(paper_command(run, "", list(main_args)))
        n = _value(values, "train_examples", 60_000)
        epochs = _epochs(values, n)
        every, evals = _value(values, "eval_every_epochs", 0), 1
        if every:  # each K epochs, then the final one unless the last was at the end
            evals = int(epochs // every) + (epochs % every > 0)
        tested = _value(values, "eval_examples", 0) or TEST_IMAGES
        work = n * epochs + evals * tested * EVAL_SHARE
        total += START_S + run.point.ensemble_size * work * TRAIN_S_PER_MEMBER_IMAGE
    return total


def child_env(devices: int, environ: dict | None = None) -> dict:
    """A run's environment: exactly its point's Sys_scale forced as host devices (Eq. 5 must
    hold as given), replacing any count XLA_FLAGS already forces; its other flags kept."""
    env = dict(os.environ if environ is None else environ)
    kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(FORCE)]
    env["XLA_FLAGS"] = " ".join([*kept, f"{FORCE}={devices}"])
    return env


def paper_plan(results_dir: str, main_args: list[str], fingerprint: str) -> sweep_plan.Plan:
    """The paper plan in the engine: its commands, each run on exactly its Sys_scale of host
    devices (`child_env`), printed as a shell runs them under --dry_run only (a progress line
    per run instead)."""
    return sweep_plan.Plan(
        fingerprint,
        results_dir,
        lambda run, plan: paper_command(run, results_dir, main_args, plan),
        env=lambda run: child_env(run.point.devices),
        shown=shown,
        echo=False,
    )


def run_plan(
    runs: list[sweep_plan.Run], results_dir: str, main_args: list[str], clock=time, dry_run=False
):
    """The plan's runs through the engine's one loop (sweep_plan.run_all: resumed, another
    plan's record refused, a failed run stopping none): (records written, failed runs)."""
    smoke = bool(runs) and runs[0].name.startswith("smoke-")
    plan = paper_plan(results_dir, main_args, plan_of(smoke, main_args))
    return sweep_plan.run_all(runs, plan, dry_run, clock)
