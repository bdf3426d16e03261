"""The closed division's rules: which runs a ranking may compare with each other.

A run is closed when it trains an official workload (quality_targets.py) as the benchmark defines it:
the full training and held-out splits at the official input size, at least one epoch and at
most the official budget, bagged, on a mesh that satisfies Eq. 5, scored against the official
target and exponent, changing only what Table 2 lets a submitter change. Any other run is open,
and its record says why: one line per broken rule, naming the flag (docs/score.md, "Divisions").

The rules read the configuration, plus two things only a started run knows: the mesh layout
(Eq. 5) and the sizes of the splits it loaded (ExtremeWeather's size is whatever years are
under --data_dir; an ImageNet prepared in part loads fewer examples than it should).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from hpcai_jax.config import BUILTIN_DATASETS, RunConfig
from hpcai_jax.data.bad_examples import CLOSED_FRACTION
from hpcai_jax.quality_targets import (
    OFFICIAL_TARGETS,
    QUALITY_EXPONENTS,
    OfficialTarget,
    dataset_name,
    official_target,
)

CLOSED, OPEN = "closed", "open"
BAGGING = ("with_replacement", "poisson")
GENERATED = ("synthetic", "synthetic_climate")  # data made up on the fly: no real quality


@dataclasses.dataclass(frozen=True)
class OfficialData:
    """What the closed division trains on, per official data set."""

    train_examples: int | None  # the training split's size; None: known only once loaded
    eval_examples: int | None  # the held-out split's
    image_size: int  # --image_size: the square side of ImageNet images, the climate grid's height
    input: str  # the input as a violation names it


OFFICIAL_DATA = {
    "imagenet2012": OfficialData(1_281_167, 50_000, 224, "224×224 images"),
    "extremeweather": OfficialData(None, None, 768, "the full 768×1152 grid"),
}


class SplitSizes(NamedTuple):
    """Examples in the training and held-out sets a run loaded (after --train_examples and
    --eval_examples); None where nothing was loaded."""

    train: int | None = None
    eval: int | None = None


NOT_LOADED = SplitSizes()


@dataclasses.dataclass(frozen=True)
class Submission:
    """The run's division: closed when no rule is broken."""

    violations: tuple[str, ...]

    @property
    def division(self) -> str:
        return OPEN if self.violations else CLOSED

    def to_dict(self) -> dict:
        return {"division": self.division, "violations": list(self.violations)}


class _Run(NamedTuple):
    config: RunConfig
    target: OfficialTarget | None
    data: OfficialData | None
    layout: object  # an engine.mesh.MeshLayout, or None: Eq. 5 unchecked
    sizes: SplitSizes
    skipped: dict[str, list[int]]  # split → records replaced (--bad_example_policy=skip)
    dropped: int = 0  # members a --resume_members=fit resume left behind


def _official_target(run: _Run) -> str | None:
    if run.target is None:
        c = run.config
        return f"no official target for {c.model.workload}/{c.model.model}/{c.data.dataset}"
    return None


def _target(run: _Run) -> str | None:
    given, target = run.config.results.target_quality, run.target
    if target is not None and given is not None and given != target.quality:
        return (
            f"--target_quality={given:g}: the closed division scores against the official "
            f"target ({target.quality:g} {target.metric})"
        )
    return None


def _exponent(run: _Run) -> str | None:
    given, n = run.config.results.quality_exponent, QUALITY_EXPONENTS[run.config.model.workload]
    if given is not None and given != n:
        return f"--quality_exponent={given:g}: the closed division uses the workload's n ({n:g})"
    return None


def _real_data(run: _Run) -> str | None:
    dataset, workload = run.config.data.dataset, run.config.model.workload
    if dataset in GENERATED:
        real = [d for (w, _, d) in OFFICIAL_TARGETS if w == workload]
        return (
            f"--dataset={dataset}: generated data; the closed division trains on "
            f"{' or '.join(real) or 'the real data set'}"
        )
    return None


def _split(run: _Run, flag: str, given: int, official: int | None, loaded: int | None, what: str):
    """A split must be whole: --<flag> may not cut it, and what was loaded must be all of it."""
    dataset = run.config.data.dataset
    # The split's size: the official one, or the loaded one where the flag asked for more.
    full = official or (loaded if loaded is not None and given and loaded < given else None)
    if given > 0 and (full is None or given < full):
        of = f" ({official:,} examples of {dataset_name(dataset)})" if official else ""
        return f"--{flag}={given}: the closed division {what}{of}"
    if official is not None and loaded is not None and loaded != official:
        return (
            f"--dataset={dataset}: {loaded:,} examples loaded for the closed division, which "
            f"{what} ({official:,} examples; check --data_dir)"
        )
    return None


def _train_split(run: _Run) -> str | None:
    official = run.data.train_examples if run.data else None
    given = run.config.data.train_examples
    return _split(
        run, "train_examples", given, official, run.sizes.train, "trains on the full training split"
    )


def _held_out_split(run: _Run) -> str | None:
    official = run.data.eval_examples if run.data else None
    given = run.config.data.eval_examples
    what = "evaluates on the full held-out split"
    return _split(run, "eval_examples", given, official, run.sizes.eval, what)


def _input_size(run: _Run) -> str | None:
    size = run.config.data.image_size
    if run.data is not None and size not in (0, run.data.image_size):
        return f"--image_size={size}: the closed division's input is {run.data.input}"
    return None


def _augmentation(run: _Run) -> str | None:
    data = run.config.data
    if not data.augment and data.dataset not in BUILTIN_DATASETS:  # tfds sets augment
        return (
            "--noaugment: the closed division trains with the data set's augmentation "
            "(random-resized crop and flip)"
        )
    return None


def _train_size(run: _Run) -> int | None:
    """The training examples one epoch goes through: as loaded, else as the flags and the
    official size say; None when unknown."""
    if run.sizes.train is not None:
        return run.sizes.train
    given, full = run.config.data.train_examples, run.data.train_examples if run.data else None
    return given if given and (full is None or given < full) else full


def _epochs(run: _Run) -> str | None:
    t = run.config.train
    if t.steps:
        flag, size = f"--steps={t.steps}", _train_size(run)
        if size is None:
            return (
                f"{flag}: the training split's size is unknown, so the steps cannot be counted "
                "in epochs; the closed division trains by --epochs"
            )
        per_epoch = max(1, size // t.batch_size)
        epochs, detail = t.steps / per_epoch, f" ({per_epoch:,} steps per epoch)"
    else:
        flag, epochs, detail = f"--epochs={t.epochs:g}", t.epochs, ""
    if epochs < 1:
        return f"{flag}: shorter than one epoch{detail}"
    budget = run.target.epochs if run.target else None
    if budget is not None and epochs > budget:
        about = f"{epochs:.4g} epochs, " if t.steps else ""
        c = run.config
        return (
            f"{flag}: {about}over the closed division's budget of {budget} epochs "
            f"({c.model.model} on {dataset_name(c.data.dataset)})"
        )
    return None


def _bagging(run: _Run) -> str | None:
    method = run.config.train.bootstrap
    if method not in BAGGING:
        return (
            f"--bootstrap={method}: the closed division bags: each member trains on its own "
            "bootstrap sample (with_replacement or poisson)"
        )
    return None


def _eq5(run: _Run) -> str | None:
    layout = run.layout
    if layout is None:
        return None
    m, mpd = layout.ensemble_size, layout.members_per_device
    replicas = (m // mpd) * layout.parallel_degree * layout.model_parallel
    if m % mpd or replicas != layout.num_devices:
        return (
            f"--ensemble_size={m}: Eq. 5 fails: ({m} / {mpd}) × {layout.parallel_degree} × "
            f"{layout.model_parallel} = {replicas}, not the {layout.num_devices} devices"
        )
    return None


def _test_hooks(run: _Run) -> str | None:
    hook = run.config.reliability.inject_nan
    if hook:
        return f"--inject_nan={hook}: a test hook that poisons a member; not in the closed division"
    return None


def _bad_records(run: _Run) -> str | None:
    """At most CLOSED_FRACTION of a split may be replaced: a few corrupt files in a million are
    a fact of large data sets; more is another data set."""
    over = []
    for split, indices in sorted(run.skipped.items()):
        size = run.sizes.train if split == "train" else run.sizes.eval
        if size and len(indices) > CLOSED_FRACTION * size:
            over.append(
                f"{len(indices)} of the {size} records of split {split!r} "
                f"(at most {int(CLOSED_FRACTION * size)})"
            )
    if not over:
        return None
    return (
        f"--bad_example_policy=skip replaced {', '.join(over)}; the closed division allows at "
        f"most {CLOSED_FRACTION:g} of a split"
    )


# The most of its members a closed run may lose to --resume_members=fit resumes: a node or two
# of a thousand-node job; more is another ensemble than the one submitted.
MAX_DROPPED_FRACTION = 0.05


def _dropped_members(run: _Run) -> str | None:
    if not run.dropped or run.layout is None:
        return None
    asked = run.layout.ensemble_size + run.dropped
    if run.dropped <= MAX_DROPPED_FRACTION * asked:
        return None
    return (
        f"--resume_members=fit dropped {run.dropped} of {asked} members; the closed division "
        f"allows at most {MAX_DROPPED_FRACTION:g} of them"
    )


def _profiled(run: _Run) -> str | None:
    steps = run.config.results.profile_steps
    if steps:
        return (
            f"--profile_steps={steps}: traced steps run slower and are in Eq. 6's epochs; the "
            "closed division times unprofiled runs"
        )
    return None


def _flop_count(run: _Run) -> str | None:
    if run.config.results.flops_source == "xla":
        return (
            "--flops_source=xla: the closed division's FLOPS uses auto's or the analytic count "
            "(xla keeps a count that failed its cross-check)"
        )
    return None


# (name, check), in the order violations are listed; docs/score.md's table names each.
RULES: tuple[tuple[str, Callable[[_Run], str | None]], ...] = (
    ("official target", _official_target),
    ("target", _target),
    ("exponent", _exponent),
    ("real data", _real_data),
    ("training split", _train_split),
    ("held-out split", _held_out_split),
    ("input size", _input_size),
    ("augmentation", _augmentation),
    ("epochs", _epochs),
    ("bagging", _bagging),
    ("Eq. 5", _eq5),
    ("test hooks", _test_hooks),
    ("profiling", _profiled),
    ("FLOP count", _flop_count),
    ("bad records", _bad_records),
    ("dropped members", _dropped_members),
)


def judge(
    config: RunConfig,
    layout=None,
    sizes: SplitSizes = NOT_LOADED,
    skipped: dict[str, list[int]] | None = None,
    dropped: int = 0,
) -> Submission:
    """The division of a training run of `config`, with the rules it breaks (first: a missing
    official target). `layout` (engine.mesh.MeshLayout), `sizes` (the loaded splits) and
    `skipped` (split → records replaced, the record's data.skipped_examples; "train" is the
    training split, any other the held-out one) add the rules that need them; without them those
    are judged on the flags alone."""
    c = config
    target = official_target(c.model.workload, c.model.model, c.data.dataset)
    data = OFFICIAL_DATA[dataset_name(c.data.dataset)] if target else None
    run = _Run(config, target, data, layout, sizes, skipped or {}, dropped)
    violations = (check(run) for _, check in RULES)
    return Submission(tuple(v for v in violations if v))


def of_setup(setup, skipped: dict[str, list[int]] | None = None, dropped: int = 0) -> Submission:
    """The division of a built run (engine.setup.RunSetup): its layout and the splits it loaded,
    and the records it replaced so far (`skipped`)."""
    loaded = setup.datasets
    train, held_out = (loaded.train, loaded.eval) if loaded is not None else (None, None)
    sizes = SplitSizes(
        len(train) if train is not None else None, len(held_out) if held_out is not None else None
    )
    return judge(setup.config, setup.layout, sizes, skipped, dropped)
