"""`--mode=check`: every item in turn within --check_budget_s, one row each, the collective
tables, the record, and the exit code (0 when no row FAILs, 1 otherwise). docs/node_check.md.

Order: the cheap facts first (devices, host, energy counters), then the device's own speed
(STREAM, matmuls), the links (collectives), the flagship training step, the input pipeline and
the data directory (which need the step's rate), and last the items that compile the most
(member strategy, dtypes), so that a short budget loses those first.

The items are one table, `ITEMS`, of (name, share of the budget, function), run by one loop
within the budget (`run_items`). Each item measures its memory room when it starts
(memory.py) and cuts its sizes to fit it. Its rows are printed, and the record rewritten (a
`partial` record, atomically), as soon as it finishes: a check killed in an item leaves every
row before it. The text (`render_check`) and the record (`check_record`) are functions of what
was measured, and the text printed item by item is `render_check`'s, piece by piece.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable

import jax

from hpcai_jax import results
from hpcai_jax.flops.peaks import peak_flops_per_device
from hpcai_jax.nodecheck import (
    acceptance,
    collective_rows,
    collectives,
    compute,
    data,
    expectations,
    inputs,
    memory,
    nccl_table,
    system,
    training,
)
from hpcai_jax.nodecheck.budget import Allotment, Budget
from hpcai_jax.nodecheck.rows import FAIL, WARN, Row, exit_code, not_judged, table
from hpcai_jax.nodecheck.step_fit import Sizing
from hpcai_jax.records import nodecheck as checks
from hpcai_jax.records import write as record_write
from hpcai_jax.run import interrupt
from hpcai_jax.settings import Settings

# A first guess of building the flagship step (set-up, initial state, compile), before one is
# timed in this run; later items estimate from that one.
COMPILE_GUESS_S = {"cpu": 10.0, "gpu": 60.0, "tpu": 60.0}
SYSTEM = "system"  # the rows before the items: devices, host, energy counters


def measure_collectives(
    allotment, kind: str, backend: str, room: memory.Room | None = None
) -> tuple[list[Row], list[collectives.Point], collectives.Run | None]:
    """The collective rows, the points measured and nccl-tests' header of the measurement (none,
    and an n/a row, on one device). The largest message is cut so that its buffers fit `room`
    (None: not checked)."""
    if jax.device_count() == 1:
        row = not_judged("collectives", None, "", "not judged: one device, nothing to talk to")
        return [row], [], None
    layout = collectives.node_layout()
    largest = collectives.max_message_bytes(jax.devices()[0])
    sizes = collectives.message_sizes(largest)
    cap = ""
    if room is not None:
        fitting = (
            memory.largest_fitting(sizes, lambda s: collectives.MEMORY_PER_BYTE * s, room)
            or sizes[:1]
        )
        if fitting[-1] < largest:
            cap = memory.capped_note(
                "largest size",
                collectives.human_size(largest),
                collectives.human_size(fitting[-1]),
                collectives.MEMORY_PER_BYTE * largest,
                room,
            )
            largest = fitting[-1]
    run = collectives.describe_run(layout, largest)
    points, cut = collectives.measure(layout, allotment, largest)
    if cap:
        cut = {a: "; ".join(n for n in (cut.get(a, ""), cap) if n) for a in layout.axes}
    return collective_rows.collective_rows(points, kind, backend, cut), points, run


def check_section(section: dict) -> checks.CheckSection:
    """The record's `check` section (docs/record.md) from the items' own sections, each a dict of
    the fields its definition names (a field missing or unknown fails here, not in a reader).
    A collective point keeps the fields the record defines."""
    step, strategy = section["train_step"], section["member_strategy"]
    if step:
        step = checks.TrainStep(
            **{
                **step,
                "config": checks.StepConfig(**step["config"]),
                "memory": checks.Memory(**step["memory"]) if step["memory"] else None,
            }
        )
    kept = {f.name for f in dataclasses.fields(checks.CollectivePoint)}
    return checks.CheckSection(
        system=checks.System(**section["system"]),
        collectives=[
            checks.CollectivePoint(**{k: v for k, v in p.items() if k in kept})
            for p in section["collectives"]
        ],
        train_step=step or None,
        member_strategy=checks.MemberStrategy(**strategy) if strategy else None,
        rows=[checks.CheckRow(**row) for row in section["rows"]],
        verdict=section["verdict"],
        budget=checks.Budget(**section["budget"]),
    )


@dataclasses.dataclass
class Context:
    """What the items share: the configuration, the system's facts, and what earlier items
    measured that later ones need (the step's section: its rate and its build time; the matmul
    rates and the step's seconds per example, which size the later steps)."""

    config: Settings
    info: dict
    estimate_s: float  # a build of a step and a few steps: guessed, then the flagship step's
    points: list[collectives.Point] = dataclasses.field(default_factory=list)
    nccl_run: collectives.Run | None = None  # the collectives' nccl-tests header
    train_step: dict | None = None
    member_strategy: dict | None = None
    sizing: Sizing = dataclasses.field(default_factory=Sizing)
    matmul: dict[str, float] = dataclasses.field(default_factory=dict)  # measured FLOP/s by dtype

    @property
    def backend(self) -> str:
        return self.info["backend"]

    @property
    def room(self) -> memory.Room | None:
        return self.sizing.room

    def processes_on_node(self) -> int:
        names = self.info["node_of_process"]
        return max(1, names.count(names[jax.process_index()])) if names else 1


@dataclasses.dataclass(frozen=True)
class Item:
    name: str
    share: float  # of the budget left when it starts, over the shares of the items after it
    measure: Callable[[Context, Allotment], list[Row]]


def _stream(ctx: Context, allotment: Allotment) -> list[Row]:
    return compute.stream_rows(ctx.backend, allotment, ctx.room)


def matmul_rates(ctx: Context, rows: list[Row]) -> dict[str, float]:
    """FLOP/s per device by dtype: the matmul rows' measured figures, else the expected ones."""
    rates = training.measured_matmul(rows)
    for dtype in compute.MATMUL_DTYPES:
        measured = rates.get(dtype)
        if measured is None and ctx.backend == "cpu":
            measured = expectations.CPU["matmul_host"][dtype] / jax.local_device_count()
        elif measured is None:
            measured = peak_flops_per_device(ctx.info["device_kind"], dtype)
        if measured:
            rates[dtype] = measured
    return rates


def _matmul(ctx: Context, allotment: Allotment) -> list[Row]:
    size = 512 if ctx.backend == "cpu" else None
    rows = compute.matmul_rows(ctx.backend, allotment, size=size, room=ctx.room)
    ctx.sizing.rates = matmul_rates(ctx, rows)
    ctx.matmul = training.measured_matmul(rows)
    return rows


def _collectives(ctx: Context, allotment: Allotment) -> list[Row]:
    kind = ctx.info["device_kind"]
    rows, ctx.points, ctx.nccl_run = measure_collectives(allotment, kind, ctx.backend, ctx.room)
    return rows


def _train(ctx: Context, allotment: Allotment) -> list[Row]:
    """The flagship step; its build and step times become the later items' estimate."""
    if not ctx.sizing.rates:
        ctx.sizing.rates = matmul_rates(ctx, [])
    rows, step = training.train_rows(
        ctx.config, allotment, ctx.estimate_s, sizing=ctx.sizing, matmul=ctx.matmul
    )
    ctx.train_step = step
    if step:
        slowest = max(step["step_s"]) if step["step_s"] else 0.0
        ctx.estimate_s = step["build_s"] + 3 * slowest
        if step["step_s"]:
            examples = step["config"]["batch_size"]  # one member per device
            ctx.sizing.example_s[step["config"]["dtype"]] = min(step["step_s"]) / examples
    return rows


def _step_rate(ctx: Context) -> float | None:
    step = ctx.train_step
    return step.get("examples_per_s_per_device") if step else None


def _input(ctx: Context, allotment: Allotment) -> list[Row]:
    return inputs.input_rows(
        ctx.config.model.workload,
        ctx.config.data.square_image_size,
        allotment,
        _step_rate(ctx),
        ctx.info["host_cores"],
        ctx.info["local_device_count"],
    )


def _data(ctx: Context, allotment: Allotment) -> list[Row]:
    rate = _step_rate(ctx)
    d = ctx.config.data
    host_rate = rate * ctx.info["local_device_count"] if rate else None
    return data.data_rows(d.dataset, d.data_dir, d.data_workers, allotment, host_rate)


def _strategy(ctx: Context, allotment: Allotment) -> list[Row]:
    rows, ctx.member_strategy = training.strategy_rows(
        ctx.config, allotment, ctx.estimate_s, ctx.sizing
    )
    return rows


def _dtypes(ctx: Context, allotment: Allotment) -> list[Row]:
    return training.dtype_rows(ctx.config, allotment, ctx.estimate_s, ctx.sizing)


ITEMS: tuple[Item, ...] = (
    Item("stream", 0.06, _stream),
    Item("matmul", 0.10, _matmul),
    Item("collectives", 0.20, _collectives),
    Item("train", 0.18, _train),
    Item("input", 0.03, _input),
    Item("data", 0.02, _data),
    Item("strategy", 0.28, _strategy),
    Item("dtypes", 0.13, _dtypes),
)


def run_items(
    ctx: Context,
    budget: Budget,
    items: tuple[Item, ...] | None = None,
    done: Callable[[str, list[Row]], None] = lambda name, rows: None,
) -> list[tuple[str, list[Row]]]:
    """Every item in order (default `ITEMS`), each within its allotment of `budget` and the
    memory room measured as it starts; `done(name, rows)` as each finishes. Their rows."""
    out = []
    for item in ITEMS if items is None else items:
        allotment = budget.start(item.name)
        ctx.sizing.room = memory.room(ctx.processes_on_node())
        rows = item.measure(ctx, allotment)
        budget.finish(allotment)
        out.append((item.name, rows))
        done(item.name, rows)
    return out


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What the check measured: the system's facts, every item's rows (the system's first), and
    the items' own figures."""

    info: dict
    items: tuple[tuple[str, tuple[Row, ...]], ...]  # (item name, its rows), in the order run
    points: tuple[collectives.Point, ...]
    train_step: dict | None
    member_strategy: dict | None
    budget_s: float
    used_s: dict[str, float]  # per item
    wall_s: float
    nccl_run: collectives.Run | None = None  # the collectives' nccl-tests header

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(r for _, rows in self.items for r in rows)

    @property
    def failed(self) -> list[str]:
        return [r.item for r in self.rows if r.status == FAIL]

    @property
    def verdict(self) -> str:
        if self.failed:
            return "FAIL"
        return "WARN" if any(r.status == WARN for r in self.rows) else "PASS"


def render_header(info: dict, budget_s: float) -> str:
    """The command's first line: the devices, processes, nodes and host, and the budget."""
    return (
        f"node check: {info['device_count']} x {info['device_kind']} ({info['backend']}), "
        f"{info['process_count']} process(es) on {len(info['nodes'])} node(s) "
        f"[{', '.join(info['nodes'])}], host {info['host_cores']} cores; "
        f"budget {budget_s:g} s"
    )


def render_item(
    name: str,
    rows: list[Row],
    points: list[collectives.Point],
    run: collectives.Run | None = None,
) -> str | None:
    """One item's text as it finishes: the system's rows under the rows' header; the
    collectives' nccl-tests header and tables, then the rows' header again and their rows; other
    items' rows alone. None when an item has nothing to print."""
    if name == SYSTEM:
        return "\n" + table(rows)
    if name == "collectives" and points:
        return "\n" + nccl_table.tables(points, run) + "\n\n" + table(rows)
    return table(rows, header=False) if rows else None


def render_verdict(result: CheckResult) -> str:
    return f"\nverdict: {result.verdict} ({len(result.failed)} FAIL) in {result.wall_s:.1f} s"


def render_check(result: CheckResult) -> str:
    """What the command prints, from the measured value alone: the system, each item's rows as
    it finished (the collective tables with theirs), the verdict."""
    pieces = [render_header(result.info, result.budget_s)]
    for name, rows in result.items:
        text = render_item(name, list(rows), list(result.points), result.nccl_run)
        if text is not None:
            pieces.append(text)
    pieces.append(render_verdict(result))
    return "\n".join(pieces)


def check_record(
    config: Settings,
    run_id: str,
    result: CheckResult,
    status: str = "complete",
    reason: str | None = None,
    base: checks.CheckRecord | None = None,
) -> checks.CheckRecord:
    """The record (`records.CheckRecord`, docs/record.md) of the measured value. Every process
    must call it (the envelope gathers host names) unless `base` is given, an earlier record
    whose envelope is kept (the partial records written as items finish)."""
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
    if reason is None:
        reason = f"FAIL: {', '.join(failed)}" if failed else ""
    if base is not None:
        return dataclasses.replace(base, status=status, reason=reason, check=check_section(section))
    return results.envelope("check", run_id, status, config, reason, check=check_section(section))


class Progress:
    """What the check leaves as it goes: each item's text printed (process 0) and the record
    rewritten, `partial`, as each item finishes, so that a check killed in an item (the kernel's
    out-of-memory killer, a scheduler's time limit) leaves every row before it. Writes are
    atomic (results.write_record: a temporary file renamed over the last one)."""

    def __init__(self, config: Settings, run_id: str):
        self.config, self.run_id = config, run_id
        self._base: checks.CheckRecord | None = None

    def _write(self, result: CheckResult, reason: str) -> None:
        # The envelope (provenance: a collective, and a git call) is made once, then reused.
        record = check_record(self.config, self.run_id, result, "partial", reason, self._base)
        self._base = self._base or record
        path = results.write_record(self.config.results.results_dir, self.run_id, record)
        # A signal now ends the check at once (run/interrupt.py): its line names this record.
        interrupt.keeping(f"kept the partial record {path} ({reason})" if path else "")

    def _print(self, text: str | None) -> None:
        if text is not None and jax.process_index() == 0:
            print(text, flush=True)

    def started(self, result: CheckResult, first: str) -> None:
        self._print(render_header(result.info, result.budget_s))
        name, rows = result.items[0]
        self._print(render_item(name, list(rows), []))
        self._write(result, f"running: item {first} started, none finished")

    def finished(self, result: CheckResult, following: str | None) -> None:
        name, rows = result.items[-1]
        self._print(render_item(name, list(rows), list(result.points), result.nccl_run))
        if following is not None:
            done = len(result.items) - 1
            self._write(result, f"running: {done} items finished, item {following} started")

    def stopped(self, result: CheckResult, item: str, error: BaseException) -> None:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        self._write(result, f"stopped in item {item}: {type(error).__name__}: {first}")


def measure_check(config: Settings, started: float, progress: Progress | None = None):
    """The system's facts and rows, then `ITEMS` within --check_budget_s; prints nothing itself
    (`progress` prints and writes as items finish). `started`: the command's start
    (perf_counter), from which its wall time counts. Returns a CheckResult."""
    items = ITEMS
    budget = Budget(config.check.budget_s, {item.name: item.share for item in items})
    info = system.describe()
    ctx = Context(config, info, COMPILE_GUESS_S.get(info["backend"], 60.0))
    done = [(SYSTEM, system.device_rows(info) + system.host_rows(info) + system.energy_rows())]

    def result() -> CheckResult:
        return CheckResult(
            info=info,
            items=tuple((name, tuple(rows)) for name, rows in done),
            points=tuple(ctx.points),
            train_step=ctx.train_step,
            member_strategy=ctx.member_strategy,
            budget_s=config.check.budget_s,
            used_s=dict(budget.used_s),
            wall_s=time.perf_counter() - started,
            nccl_run=ctx.nccl_run,
        )

    names = [item.name for item in items]

    def finished(name: str, rows: list[Row]) -> None:
        done.append((name, rows))
        if progress is not None:
            following = names.index(name) + 1
            progress.finished(result(), names[following] if following < len(names) else None)

    if progress is not None:
        progress.started(result(), names[0])
    try:
        run_items(ctx, budget, items, finished)
    except BaseException as error:
        if progress is not None:
            progress.stopped(result(), names[len(done) - 1], error)
        raise
    return result()


def run_check(config: Settings) -> int:
    """Runs the check, printing each item's rows as it finishes and rewriting the record
    (partial) each time; then the complete record, the verdict and the exit code."""
    started = time.perf_counter()
    wanted = acceptance.parse(config.check.expect)
    acceptance.check_json_path(config.check.json)
    run_id = record_write.run_id(config, "check")
    claim = results.claim(config.results.results_dir, run_id, config.results.overwrite)
    result = measure_check(config, started, Progress(config, run_id))
    if wanted:
        expected = ("expect", tuple(acceptance.rows(result.points, wanted)))
        result = dataclasses.replace(result, items=(*result.items, expected))
    record = check_record(config, run_id, result)
    path = results.write_record(config.results.results_dir, run_id, record)
    interrupt.keeping(f"kept the record {path} ({record.status})" if path else "")
    claim.release()
    if jax.process_index() == 0:
        if wanted:
            name, rows = result.items[-1]
            print(render_item(name, list(rows), []))
        if config.check.json:
            acceptance.write_json(config.check.json, record, sys.argv)
        print(render_verdict(result))
        if path:
            print(f"record: {path}")
        sys.stdout.flush()
    return exit_code(list(result.rows))
