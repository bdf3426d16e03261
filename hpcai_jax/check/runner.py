"""`--mode=check`: every item in turn within --check_budget_s, one row each, the collective
tables, the record, and the exit code (0 when no row FAILs, 1 otherwise).

Order: the cheap facts first (devices, host, energy counters), then the device's own speed
(STREAM, matmuls), the links (collectives), the flagship training step, the input pipeline
(which needs the step's rate), and last the items that compile the most (member strategy,
dtypes), so that a short budget loses those first.

The items are one table, `ITEMS`, of (name, share of the budget, function), run by one loop
within the budget (`measure_check`); the text (`render_check`) and the record (`check_record`)
are functions of what it measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax

from hpcai_jax import results
from hpcai_jax.check import collectives, compute, expectations, inputs, system, training
from hpcai_jax.check.budget import Allotment, Budget
from hpcai_jax.check.rows import FAIL, WARN, Row, exit_code, judge, skipped, table
from hpcai_jax.config import RunConfig
from hpcai_jax.records import check as checks

# A first guess of building the flagship step (set-up, initial state, compile), before one is
# timed in this run; later items estimate from that one.
COMPILE_GUESS_S = {"cpu": 10.0, "gpu": 60.0, "tpu": 60.0}
# Collectives judged against a datasheet link; on a CPU against the machine-class figures.
LINK_PASS, LINK_WARN = 0.5, 0.1


def collective_rows(
    points: list[collectives.Point], kind: str, backend: str, cut: dict[str, str]
) -> list[Row]:
    """One row per (axis, collective): busbw at the largest size measured."""
    rows = []
    for axis in dict.fromkeys(p.axis for p in points):
        for op in collectives.OPS:
            at = [p for p in points if p.axis == axis and p.op == op]
            if not at:
                continue
            last = at[-1]
            item = f"{op} busbw {axis}"
            note = f"S = {collectives.human_size(last.size_bytes)}, n = {last.n}" + (
                f"; {cut[axis]}" if axis in cut else ""
            )
            if backend == "cpu":
                expected = expectations.cpu_busbw(axis, op, last.size_bytes, jax.process_count())
                source = expectations.CPU_SOURCE if expected else "no CPU figure for this axis"
                thresholds = {"pass_at": compute.CPU_PASS, "warn_at": compute.CPU_WARN}
            elif axis == "intra_node":
                link = expectations.link_bandwidth(kind)
                expected, source = link if link else (None, f"no link datasheet for {kind!r}")
                thresholds = {"pass_at": LINK_PASS, "warn_at": LINK_WARN}
            else:
                expected, source = None, "the network between nodes has no datasheet here"
                thresholds = {}
            rows.append(
                judge(
                    item, last.busbw, expected, unit="B/s", source=source, note=note, **thresholds
                )
            )
    return rows


def measure_collectives(
    allotment, kind: str, backend: str
) -> tuple[list[Row], list[collectives.Point]]:
    """The collective rows and the points measured (none, and a WARN row, on one device)."""
    if jax.device_count() == 1:
        return [skipped("collectives", "one device: nothing to communicate with")], []
    layout = collectives.node_layout()
    points, cut = collectives.measure(
        layout, allotment, collectives.max_message_bytes(jax.devices()[0])
    )
    return collective_rows(points, kind, backend, cut), points


def check_section(section: dict) -> checks.CheckSection:
    """The record's `check` section (docs/record.md) from the items' own sections, each a dict of
    the fields its definition names (a field missing or unknown fails here, not in a reader)."""
    step, strategy = section["train_step"], section["member_strategy"]
    if step:
        step = checks.TrainStep(
            **{
                **step,
                "config": checks.StepConfig(**step["config"]),
                "memory": checks.Memory(**step["memory"]) if step["memory"] else None,
            }
        )
    return checks.CheckSection(
        system=checks.System(**section["system"]),
        collectives=[checks.CollectivePoint(**p) for p in section["collectives"]],
        train_step=step or None,
        member_strategy=checks.MemberStrategy(**strategy) if strategy else None,
        rows=[checks.CheckRow(**row) for row in section["rows"]],
        verdict=section["verdict"],
        budget=checks.Budget(**section["budget"]),
    )


@dataclasses.dataclass
class Context:
    """What the items share: the configuration, the system's facts, and what earlier items
    measured that later ones need (the step's section: its rate and its build time)."""

    config: RunConfig
    info: dict
    estimate_s: float  # a build of a step and a few steps: guessed, then the flagship step's
    points: list[collectives.Point] = dataclasses.field(default_factory=list)
    train_step: dict | None = None
    member_strategy: dict | None = None

    @property
    def backend(self) -> str:
        return self.info["backend"]


@dataclasses.dataclass(frozen=True)
class Item:
    name: str
    share: float  # of the budget left when it starts, over the shares of the items after it
    measure: Callable[[Context, Allotment], list[Row]]


def _stream(ctx: Context, allotment: Allotment) -> list[Row]:
    return compute.stream_rows(ctx.backend, allotment)


def _matmul(ctx: Context, allotment: Allotment) -> list[Row]:
    return compute.matmul_rows(ctx.backend, allotment, size=512 if ctx.backend == "cpu" else None)


def _collectives(ctx: Context, allotment: Allotment) -> list[Row]:
    rows, ctx.points = measure_collectives(allotment, ctx.info["device_kind"], ctx.backend)
    return rows


def _train(ctx: Context, allotment: Allotment) -> list[Row]:
    """The flagship step; its build and step times become the later items' estimate."""
    rows, step = training.train_rows(ctx.config, allotment, ctx.estimate_s)
    ctx.train_step = step
    if step:
        ctx.estimate_s = step["build_s"] + 3 * (max(step["step_s"]) if step["step_s"] else 0.0)
    return rows


def _input(ctx: Context, allotment: Allotment) -> list[Row]:
    step = ctx.train_step
    return inputs.input_rows(
        ctx.config.model.workload,
        ctx.config.data.square_image_size,
        allotment,
        step.get("examples_per_s_per_device") if step else None,
        ctx.info["host_cores"],
        ctx.info["local_device_count"],
    )


def _strategy(ctx: Context, allotment: Allotment) -> list[Row]:
    rows, ctx.member_strategy = training.strategy_rows(ctx.config, allotment, ctx.estimate_s)
    return rows


def _dtypes(ctx: Context, allotment: Allotment) -> list[Row]:
    return training.dtype_rows(ctx.config, allotment, ctx.estimate_s)


ITEMS: tuple[Item, ...] = (
    Item("stream", 0.06, _stream),
    Item("matmul", 0.10, _matmul),
    Item("collectives", 0.20, _collectives),
    Item("train", 0.18, _train),
    Item("input", 0.04, _input),
    Item("strategy", 0.28, _strategy),
    Item("dtypes", 0.14, _dtypes),
)


def run_items(ctx: Context, budget: Budget, items: tuple[Item, ...] = ITEMS) -> list[Row]:
    """Every item in order, each within its allotment of `budget`; their rows."""
    rows = []
    for item in items:
        allotment = budget.start(item.name)
        rows += item.measure(ctx, allotment)
        budget.finish(allotment)
    return rows


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What the check measured: the system's facts, every row, and the items' own figures."""

    info: dict
    rows: tuple[Row, ...]
    points: tuple[collectives.Point, ...]
    train_step: dict | None
    member_strategy: dict | None
    budget_s: float
    used_s: dict[str, float]  # per item
    wall_s: float

    @property
    def failed(self) -> list[str]:
        return [r.item for r in self.rows if r.status == FAIL]

    @property
    def verdict(self) -> str:
        if self.failed:
            return "FAIL"
        return "WARN" if any(r.status == WARN for r in self.rows) else "PASS"


def measure_check(config: RunConfig, started: float) -> CheckResult:
    """The system's facts and rows, then `ITEMS` within --check_budget_s; prints nothing.
    `started`: the command's start (perf_counter), from which its wall time counts."""
    budget = Budget(config.check.budget_s, {item.name: item.share for item in ITEMS})
    info = system.describe()
    ctx = Context(config, info, COMPILE_GUESS_S.get(info["backend"], 60.0))
    rows = system.device_rows(info) + system.host_rows(info) + system.energy_rows()
    rows += run_items(ctx, budget)
    return CheckResult(
        info=info,
        rows=tuple(rows),
        points=tuple(ctx.points),
        train_step=ctx.train_step,
        member_strategy=ctx.member_strategy,
        budget_s=config.check.budget_s,
        used_s=dict(budget.used_s),
        wall_s=time.perf_counter() - started,
    )


def render_check(result: CheckResult) -> str:
    """What the command prints, from the measured value alone: the system, the collective
    tables, one row per item, the verdict."""
    info = result.info
    lines = [
        f"node check: {info['device_count']} x {info['device_kind']} ({info['backend']}), "
        f"{info['process_count']} process(es) on {len(info['nodes'])} node(s) "
        f"[{', '.join(info['nodes'])}], host {info['host_cores']} cores; "
        f"budget {result.budget_s:g} s"
    ]
    if result.points:
        lines += ["", collectives.tables(list(result.points))]
    lines += [
        "",
        table(list(result.rows)),
        "",
        f"verdict: {result.verdict} ({len(result.failed)} FAIL) in {result.wall_s:.1f} s",
    ]
    return "\n".join(lines)


def check_record(config: RunConfig, run_id: str, result: CheckResult) -> checks.CheckRecord:
    """The record (`records.CheckRecord`, docs/record.md) of the measured value; every process
    must call it (the envelope gathers host names)."""
    failed = result.failed
    section = {
        "system": result.info,
        "collectives": [dataclasses.asdict(p) for p in result.points],
        "train_step": result.train_step,
        "member_strategy": result.member_strategy,
        "rows": [r.to_dict() for r in result.rows],
        "verdict": result.verdict,
        "budget": {"budget_s": result.budget_s, "used_s": result.used_s, "wall_s": result.wall_s},
    }
    return results.envelope(
        "check",
        run_id,
        "complete",
        config,
        f"FAIL: {', '.join(failed)}" if failed else "",
        check=check_section(section),
    )


def run_check(config: RunConfig) -> int:
    """Runs the check; prints the tables and rows (process 0), writes the record; the exit code."""
    started = time.perf_counter()
    run_id = results.run_id(config, "check")
    results.claim(config.results.results_dir, run_id, config.results.overwrite)
    result = measure_check(config, started)
    record = check_record(config, run_id, result)
    path = results.write_record(config.results.results_dir, run_id, record)
    if jax.process_index() == 0:
        print(render_check(result))
        if path:
            print(f"record: {path}")
    return exit_code(list(result.rows))
