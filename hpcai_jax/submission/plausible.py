"""Whether a packed run's schedule is the one its configuration describes, from the package
alone (docs/submission.md §3, "What check proves"): steps per epoch by the sampler's rule
(hpcai_jax/data/sampler.py), every epoch the configuration asks for (or the stop at the target),
the evaluations --eval_every_epochs schedules (hpcai_jax/run/hooks.py), and M members wherever
the record and the MLLOG count them. Each function adds one line per field that breaks a rule.
"""

from __future__ import annotations

import math

from hpcai_jax.config import RunConfig
from hpcai_jax.records import TrainRecord
from hpcai_jax.submission.derive import Findings
from hpcai_jax.submission.logfile import metadata


def check(f: Findings, run, config: RunConfig, rec: str, lg: str) -> None:
    """Every rule of this module on one run (`run`: check.Run). Steps per epoch other than
    the sampler's are the one line: every epoch and evaluation would restate it."""
    record = run.record
    spe = _steps_per_epoch(f, record, config, rec)
    if spe:
        done = _steps(f, record, config, spe, rec)
        _epochs(f, record, config, spe, done, rec)
        _evaluations(f, run, config, spe, done, rec, lg)
    _members(f, run, config, rec, lg)


def _sampler_rule(record: TrainRecord, config: RunConfig) -> str:
    n, b = record.data.train_examples, config.train.batch_size
    return f"data.train_examples {n} // --batch_size={b}: the sampler's steps per epoch"


def _steps_per_epoch(f: Findings, record: TrainRecord, config: RunConfig, rec: str) -> int:
    """The sampler's N // B (the remainder dropped); 0 where the split is under one batch or
    the record says otherwise."""
    n, b = record.data.train_examples, config.train.batch_size
    if not isinstance(n, int) or n < b:
        f.fail(f"{rec} data.train_examples {n!r}: not even one batch of --batch_size={b}")
        return 0
    rule = f"({_sampler_rule(record, config)}, the remainder dropped)"
    ok = f.same(f"{rec} data.steps_per_epoch", record.data.steps_per_epoch, n // b, rule)
    return n // b if ok else 0


def _planned(config: RunConfig, spe: int) -> tuple[int, str]:
    """The steps the configuration asks for, as engine/setup.py counts them, and the flag."""
    t = config.train
    if t.steps:
        return t.steps, f"--steps={t.steps}"
    return max(1, math.ceil(t.epochs * spe)), f"--epochs={t.epochs:g} × {spe} steps per epoch"


def _steps(f: Findings, record: TrainRecord, config: RunConfig, spe: int, rec: str) -> int:
    """The steps done (timing.steps): a complete run did all the configuration asks for, unless
    it stopped at the target (checked with the evaluations)."""
    planned, flag = _planned(config, spe)
    timing, stopped = record.timing, record.quality.stopped_at_target
    f.same(f"{rec} timing.planned_steps", timing.planned_steps, planned, f"({flag})")
    done = timing.steps
    if stopped and not config.train.stop_at_target:
        f.fail(
            f"{rec} quality.stopped_at_target true, but the configuration has no --stop_at_target"
        )
    if record.status == "complete" and not stopped:
        f.same(f"{rec} timing.steps", done, planned, f"(a complete run trains {flag})")
    elif done > planned:
        f.fail(f"{rec} timing.steps {done} > {planned} ({flag})")
    f.same(
        f"{rec} data.epochs_trained",
        record.data.epochs_trained,
        done / spe,
        f"(timing.steps {done} / {spe} steps per epoch)",
    )
    return done


def _epochs(f: Findings, record: TrainRecord, config: RunConfig, spe: int, done: int, rec: str):
    """Every completed epoch is listed, in order, each of the sampler's steps per epoch."""
    want = done // spe
    if len(record.epochs) != want:
        f.fail(
            f"{rec} epochs: {len(record.epochs)} listed != {want} completed "
            f"(timing.steps {done} // {spe} steps per epoch: every completed epoch is listed)"
        )
    for i, epoch in enumerate(record.epochs):
        at = f"{rec} epochs[{i}]"
        f.same(f"{at}.index", epoch.index, i + 1, "(epochs are listed from 1, none left out)")
        f.same(f"{at}.first_step", epoch.first_step, i * spe, f"((index − 1) × {spe} steps)")
        f.same(f"{at}.steps", epoch.steps, spe, f"({_sampler_rule(record, config)})")


def _schedule(every: int, done: int) -> list[int]:
    """The steps evaluated after: every `every` steps (0: none), and the final step."""
    steps = list(range(every, done + 1, every)) if every else []
    return steps if steps and steps[-1] == done else [*steps, done]


def _evaluations(f: Findings, run, config: RunConfig, spe: int, done: int, rec: str, lg: str):
    """The curve has the evaluations --eval_every_epochs schedules (and the final one), at the
    epochs the log says; a stop at the target is at the first evaluation that reached it."""
    record, q = run.record, run.record.quality
    if not config.scored or record.data.synthetic or record.status != "complete":
        return
    k = config.train.eval_every_epochs
    want, got = _schedule(k * spe, done), [p.step for p in q.curve]
    every = f"every {k * spe} steps and " if k else ""
    how = f"(--eval_every_epochs={k}: {every}once at the final step {done})"
    for step in (s for s in want if s not in got):
        f.fail(f"{rec} quality.curve has no evaluation at step {step} {how}")
    for step in (s for s in got if s not in want):
        f.fail(f"{rec} quality.curve has an evaluation at step {step} that is not scheduled {how}")
    for i, point in enumerate(q.curve):
        f.same(
            f"{rec} quality.curve[{i}].epoch",
            point.epoch,
            point.step / spe,
            f"(its step / {spe} steps per epoch)",
        )
    if not record.resumes:  # a resumed segment's evaluations count its epochs afresh
        for i, ((_, line), step) in enumerate(zip(run.log.evaluations(), got, strict=False)):
            f.same(
                f"{lg} eval_accuracy (evaluation {i + 1}) epoch_num",
                metadata(line, "epoch_num"),
                step // spe,
                f"(epochs completed by step {step}, {rec} quality.curve[{i}])",
            )
    target = config.quality_target().target
    first = next((i for i, p in enumerate(q.curve) if p.ensemble >= target), None)
    if q.stopped_at_target and first != len(q.curve) - 1:
        f.fail(
            f"{rec} quality.stopped_at_target true, but the last evaluation is not the first "
            f"to reach the target {target:g} (quality.curve)"
        )
    if config.train.stop_at_target and not q.stopped_at_target and first is not None:
        f.fail(
            f"{rec} quality.curve[{first}] reached the target {target:g}, so --stop_at_target "
            "ends the run there, but quality.stopped_at_target is not true"
        )


def _members(f: Findings, run, config: RunConfig, rec: str, lg: str) -> None:
    """M = mesh.ensemble_size everywhere the record and the log count members or batches."""
    record, q = run.record, run.record.quality
    m, b = record.mesh.ensemble_size, config.train.batch_size
    f.same(f"{rec} mesh.ensemble_size", m, config.mesh.ensemble_size, f"({run.flags.name})")
    dropped = record.members.dropped if record.members else []
    lists = [
        ("quality.members", q.members),
        *(
            (f"quality.curve[{i}].members", p.members[: len(p.members) - _left(dropped, p.step)])
            for i, p in enumerate(q.curve)
            if p.members is not None
        ),
        ("data.distinct_fraction", record.data.distinct_fraction),
        ("train.final_loss", record.train.final_loss if record.train else None),
    ]
    wrong = [(where, len(values)) for where, values in lists if values is not None]
    wrong = [(where, n) for where, n in wrong if n != m]
    if wrong:
        where = ", ".join(w for w, _ in wrong)
        f.fail(f"{rec} {where}: {wrong[0][1]} members' figures != M {m} (mesh.ensemble_size)")
    if q.kept_members is not None:
        pruned = set(record.divergence.pruned_members)
        kept = [i for i in range(m) if i not in pruned]
        f.same(f"{rec} quality.kept_members", q.kept_members, kept, "(range(M) less the pruned)")
        f.same(f"{rec} quality.ensemble_members", q.ensemble_members, len(kept), "(kept)")
    if record.flops.crosscheck is not None:
        check = record.flops.crosscheck
        f.same(f"{rec} flops.crosscheck.ensemble_size", check.ensemble_size, m, "(M)")
        f.same(f"{rec} flops.crosscheck.batch_size", check.batch_size, b, "(--batch_size)")
    f.same(f"{lg} per_model_batch_size", run.log.value("per_model_batch_size"), b, "(--batch_size)")
    f.same(f"{lg} global_batch_size", run.log.value("global_batch_size"), m * b, "(M × |B|)")


def _left(dropped: list, step: int) -> int:
    """Members a fit resume dropped at or after `step`: an evaluation then still had them."""
    return sum(d.step >= step for d in dropped)
