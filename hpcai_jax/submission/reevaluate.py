"""`check --reevaluate [--data_dir=DIR]`: each run's packed weights (`<run_id>.weights`, from
`pack --with_weights`), tied to the run by the MLLOG's `weights_digest`, evaluated again on the
held-out split on this machine's devices (engine/evaluate.evaluate, the run's own evaluation),
against the log's final evaluation and the record's members (docs/submission.md, "What
--reevaluate proves").

Tolerance: a top-1 accuracy is a count of held-out examples; the same weights on other devices
sum in another order, which can turn a near tie between two classes, so a member or the ensemble
may be off by ±1 example (or 0.01 % of the examples, where that is more). Any other metric (a
detector's mAP, R²) within 0.001.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from hpcai_jax.errors import UsageError
from hpcai_jax.run import kept_weights
from hpcai_jax.submission import recount
from hpcai_jax.submission.layout import configure, fit

COUNT_SHARE = 1e-4  # of the held-out examples, at least one
OTHER_TOLERANCE = 1e-3


def tolerance(metric: str, examples: int) -> tuple[float, str]:
    """(absolute tolerance, how it reads) of a re-evaluated figure."""
    if metric == "top1_accuracy" and examples:
        k = max(1, math.ceil(examples * COUNT_SHARE))
        # Half an example more: float32 rounds each figure of the count.
        return (k + 0.5) / examples, f"± {k} of the {examples} held-out examples"
    return OTHER_TOLERANCE, f"± {OTHER_TOLERANCE:g}"


def weights_folder(run) -> Path:
    return run.flags.parent / f"{run.id}{kept_weights.SUFFIX}"


@dataclasses.dataclass(frozen=True)
class Measured:
    members: list
    ensemble: float | None
    examples: int
    where: str


_MEASURED: dict[tuple, Measured | str] = {}


def reevaluate(f, run, config, data_dir: str | None) -> str | None:
    """Adds a failure line per figure the weights do not give again; returns what was measured
    (a note line), or None where nothing was. UsageError where --data_dir holds no held-out
    split."""
    folder, lg, rec = weights_folder(run), run.log.path.name, f"{run.id}.json"
    logged = run.log.one(kept_weights.MLLOG_KEY)
    if logged is None:
        f.fail(
            f"{lg} has no {kept_weights.MLLOG_KEY} line: {folder.name} cannot be tied to the run"
        )
        return None
    try:
        tree = kept_weights.load(folder)
    except UsageError as e:
        f.fail(f"{folder.name} cannot be read: {e}")
        return None
    value, _ = kept_weights.digest(tree)
    if value != logged.get("value"):
        f.fail(
            f"{folder.name} sha256 {value} != {lg} {kept_weights.MLLOG_KEY} {logged.get('value')}: "
            "not the weights the run kept"
        )
        return None
    quality = run.record.quality
    if quality.ensemble is None:
        return None  # synthetic data: no held-out quality to measure again
    key = (value, recount.step_lines(run.flags), data_dir)
    if key not in _MEASURED:
        _MEASURED[key] = _measure(config, tree, run.record, data_dir)
    measured = _MEASURED[key]
    if isinstance(measured, str):
        f.fail(f"{folder.name} {measured}")
        return None
    _compare(f, run, measured, lg, rec, folder.name)
    return (
        f"run {run.id}: re-evaluated {folder.name} on {measured.where}: ensemble "
        f"{measured.ensemble:.6g} (the log's {_final(run)[0]:.6g}), members "
        f"{_figures(measured.members)} (the record's {_figures(quality.members)}), "
        f"{measured.examples} held-out examples"
    )


def _figures(values) -> str:
    return "[" + ", ".join("None" if v is None else f"{v:.6g}" for v in values or []) + "]"


def _final(run) -> tuple[float | None, float | None]:
    """(ensemble, member mean) of the log's last evaluation."""
    evaluations = run.log.evaluations()
    if not evaluations:
        return None, None
    line = evaluations[-1][1]
    return line.get("value"), (line.get("metadata") or {}).get("member_mean")


def _compare(f, run, measured: Measured, lg: str, rec: str, name: str) -> None:
    tol, how = tolerance(run.record.quality.metric, measured.examples)
    where = f"re-evaluated from {name} on {measured.where} ({how})"
    ensemble, _ = _final(run)
    if not _close(ensemble, measured.ensemble, tol):
        f.fail(
            f"{lg} eval_accuracy {_g(ensemble)} (the final evaluation) != {_g(measured.ensemble)} {where}"
        )
    claimed = run.record.quality.members or []
    if len(claimed) != len(measured.members):
        f.fail(
            f"{rec} quality.members: {len(claimed)} figures != {len(measured.members)} members {where}"
        )
        return
    for i, (a, b) in enumerate(zip(claimed, measured.members, strict=True)):
        if not _close(a, b, tol):
            f.fail(f"{rec} quality.members[{i}] {_g(a)} != {_g(b)} {where}")


def _g(value) -> str:
    return "None" if value is None else f"{value:.6g}"


def _close(a, b, tol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol


def _measure(config, tree: dict, record, data_dir: str | None) -> Measured | str:
    """The held-out figures of `tree` under the run's configuration on this machine's devices
    (a mesh refitted to them), or why they cannot be measured (a failure's text)."""
    import jax

    from hpcai_jax.engine.evaluate import evaluate
    from hpcai_jax.engine.setup import build_setup

    devices = jax.devices()
    fitted = fit(record.mesh, len(devices))
    config = configure(config, fitted)
    data = dataclasses.replace(config.data, data_dir=data_dir or config.data.data_dir)
    config = dataclasses.replace(config, data=data)
    try:
        setup = build_setup(config, devices=devices[: fitted.num_devices])
    except UsageError as e:  # the data set's loader names the folder and the file it lacks
        raise UsageError(f"--reevaluate of run {record.run_id}: {e}") from None
    if setup.datasets is None or setup.datasets.eval is None:
        raise UsageError(
            f"--reevaluate of run {record.run_id}: --data_dir={data.data_dir} holds no "
            f"held-out split of --dataset={data.dataset}"
        )
    state = _state(setup, tree)
    if isinstance(state, str):
        return state
    m = setup.layout.ensemble_size
    kept = record.quality.kept_members
    pruned = frozenset(range(m)) - frozenset(range(m) if kept is None else kept)
    quality = evaluate(setup, state, pruned, oob=False)
    return Measured(
        quality.members,
        quality.ensemble,
        quality.examples,
        fitted.describe(devices[0].device_kind),
    )


def _state(setup, tree: dict):
    """The run's state with `tree`'s parameters and model state on this mesh (the optimizer's
    state zeros: evaluation reads none of it), or why `tree` does not fit the configuration."""
    import jax
    import jax.numpy as jnp

    abstract = setup.abstract_state
    want = kept_weights.named({"params": abstract.params, "model_state": abstract.model_state})
    got = kept_weights.named(tree)
    shapes = {n: (tuple(a.shape), np.dtype(a.dtype).name) for n, a in got}
    for name, leaf in want:
        if shapes.get(name) != (tuple(leaf.shape), np.dtype(leaf.dtype).name):
            found = shapes.get(name, "no such array")
            return (
                f"does not fit the packed configuration: {name} is {found}, the flagfile's "
                f"model has {(tuple(leaf.shape), np.dtype(leaf.dtype).name)}"
            )
    if len(got) != len(want):
        return f"does not fit the packed configuration: {len(got)} arrays, its model {len(want)}"

    def put(array, like):
        return jax.device_put(np.asarray(array), like.sharding)

    def zeros(like):
        return jnp.zeros(like.shape, like.dtype, device=like.sharding)

    return abstract.replace(
        step=zeros(abstract.step),
        params=jax.tree.map(put, tree["params"], abstract.params),
        model_state=jax.tree.map(put, tree["model_state"], abstract.model_state),
        opt_state=jax.tree.map(zeros, abstract.opt_state),
        loss_scale=jax.tree.map(zeros, abstract.loss_scale),
    )
