"""The acceptance's plan, a table of (group, share of the budget, function), and the loop that
runs it within the budget, journalling every group as it finishes.

Order: the cheap facts first, then the device's own speed, then the flagship step (whose rate
and build time the later groups use), then the items that compile the most, so that a short
budget loses those first. A group that raises becomes an item saying so (WARN for a missing
package or an operation the backend lacks, FAIL otherwise), never the end of the command.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from hpcai_jax.acceptance import babelstream_cuda, environment, measure, members
from hpcai_jax.acceptance.items import Item, failure_item, interrupted_item
from hpcai_jax.acceptance.journal import Journal
from hpcai_jax.acceptance.sizes import Sizes
from hpcai_jax.nodecheck.budget import Allotment, Budget


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    share: float  # of the budget left when it starts, over the shares of the groups after it
    measure: Callable[[measure.Context, Allotment], list[Item]]


def _environment(ctx: measure.Context, allotment: Allotment) -> list[Item]:
    return (
        environment.version_items(ctx.accelerator)
        + environment.import_items()
        + environment.device_items(ctx.accelerator)
    )


GROUPS: tuple[Group, ...] = (
    Group("environment", 0.01, _environment),
    Group("stream", 0.05, measure.stream_items),
    Group("babelstream", 0.04, babelstream_cuda.babelstream_items),
    Group("matmul", 0.06, measure.matmul_items),
    Group("node", 0.05, measure.node_items),
    Group("train", 0.14, measure.train_items),
    Group("input", 0.05, measure.input_items),
    Group("detector", 0.15, measure.detector_items),
    Group("members", 0.26, members.member_items),
    Group("dtypes", 0.13, measure.dtype_items),
    Group("settings", 0.10, measure.settings_items),
)


def select(names: tuple[str, ...]) -> tuple[Group, ...]:
    """The named groups, in the plan's order (a rerun of some groups: `--groups`)."""
    return tuple(g for g in GROUPS if g.name in names)


def _restore(ctx: measure.Context, journal: Journal) -> None:
    """What earlier groups measured, from the journal of a process that died."""
    for note in journal.notes():
        if "context" in note:
            ctx.step_rate = note["context"].get("step_rate")
            ctx.build_s = note["context"].get("build_s")


def run(
    out_dir: Path,
    sizes: Sizes,
    budget_s: float,
    accelerator: bool,
    groups: tuple[Group, ...] | None = None,
    after_exit: int | None = None,
    echo: Callable[[Item], None] = lambda item: None,
) -> list[Item]:
    """Runs the groups the journal has not finished within `budget_s`; returns every item of the
    run, earlier processes' included. `after_exit`: the exit code of the process this one
    resumes after (its unfinished group is reported, not rerun)."""
    import jax

    journal = Journal(out_dir)
    ctx = measure.Context(
        sizes,
        measure.base_config(sizes, str(out_dir / "records")),
        accelerator,
        jax.default_backend(),
        out_dir=out_dir,
    )
    # The backend its items were measured on: a training run given this acceptance.json
    # (--acceptance) takes its decision on that backend only.
    journal.note(backend=ctx.backend)
    done = set(journal.finished())
    if after_exit is not None:
        _restore(ctx, journal)
        if (cut := journal.interrupted()) is not None:
            item = interrupted_item(cut, after_exit)
            journal.finish(cut, [item])
            echo(item)
            done.add(cut)
        journal.note(resumed_after_exit=after_exit, at_unix_s=time.time())
    todo = [g for g in (GROUPS if groups is None else groups) if g.name not in done]
    budget = Budget(budget_s, {g.name: g.share for g in todo})
    started = time.perf_counter()
    for group in todo:
        journal.start(group.name, time.perf_counter() - started)
        allotment = budget.start(group.name)
        try:
            items = group.measure(ctx, allotment)
        except Exception as e:  # noqa: BLE001 - one group's failure is an item, not the end
            traceback.print_exc(file=sys.stderr)
            items = [failure_item(group.name, e)]
        budget.finish(allotment)
        journal.finish(group.name, items)
        journal.note(context={"step_rate": ctx.step_rate, "build_s": ctx.build_s})
        for item in items:
            echo(item)
    return journal.items()
