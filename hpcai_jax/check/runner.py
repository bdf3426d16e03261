"""`--mode=check`: every item in turn within --check_budget_s, one row each, the collective
tables, the record, and the exit code (0 when no row FAILs, 1 otherwise).

Order: the cheap facts first (devices, host, energy counters), then the device's own speed
(STREAM, matmuls), the links (collectives), the flagship training step, the input pipeline
(which needs the step's rate), and last the items that compile the most (member strategy,
dtypes), so that a short budget loses those first.
"""

from __future__ import annotations

import dataclasses
import time

import jax

from hpcai_jax import results
from hpcai_jax.check import collectives, compute, expectations, inputs, system, training
from hpcai_jax.check.budget import Budget
from hpcai_jax.check.rows import FAIL, WARN, Row, exit_code, judge, skipped, table
from hpcai_jax.config import RunConfig
from hpcai_jax.records import check as checks

# Shares of the budget (of what is left when an item starts; see budget.py).
WEIGHTS = {
    "stream": 0.06,
    "matmul": 0.10,
    "collectives": 0.20,
    "train": 0.18,
    "input": 0.04,
    "strategy": 0.28,
    "dtypes": 0.14,
}
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


def run_check(config: RunConfig) -> int:
    """Runs the check; prints the tables and rows (process 0), writes the record; the exit code."""
    wall_start = time.perf_counter()
    run_id = results.run_id(config, "check")
    results.claim(config.results.results_dir, run_id, config.results.overwrite)
    budget = Budget(config.check.budget_s, WEIGHTS)
    info = system.describe()
    backend, kind = info["backend"], info["device_kind"]
    rows = system.device_rows(info) + system.host_rows(info) + system.energy_rows()
    section: dict = {"system": info}

    a = budget.start("stream")
    rows += compute.stream_rows(backend, a)
    budget.finish(a)

    a = budget.start("matmul")
    rows += compute.matmul_rows(backend, a, size=512 if backend == "cpu" else None)
    budget.finish(a)

    a = budget.start("collectives")
    collective, points = measure_collectives(a, kind, backend)
    rows += collective
    section["collectives"] = [dataclasses.asdict(p) for p in points]
    budget.finish(a)

    estimate = COMPILE_GUESS_S.get(backend, 60.0)
    a = budget.start("train")
    train_rows, section["train_step"] = training.train_rows(config, a, estimate)
    rows += train_rows
    budget.finish(a)
    step = section["train_step"]
    if step:
        estimate = step["build_s"] + 3 * (max(step["step_s"]) if step["step_s"] else 0.0)

    a = budget.start("input")
    rate = step.get("examples_per_s_per_device") if step else None
    rows += inputs.input_rows(
        config.model.workload,
        config.data.square_image_size,
        a,
        rate,
        info["host_cores"],
        info["local_device_count"],
    )
    budget.finish(a)

    a = budget.start("strategy")
    strategy_rows, section["member_strategy"] = training.strategy_rows(config, a, estimate)
    rows += strategy_rows
    budget.finish(a)

    a = budget.start("dtypes")
    rows += training.dtype_rows(config, a, estimate)
    budget.finish(a)

    wall_s = time.perf_counter() - wall_start
    failed = [r.item for r in rows if r.status == FAIL]
    section["rows"] = [r.to_dict() for r in rows]
    section["verdict"] = (
        "FAIL" if failed else "WARN" if any(r.status == WARN for r in rows) else "PASS"
    )
    section["budget"] = {
        "budget_s": config.check.budget_s,
        "used_s": budget.used_s,
        "wall_s": wall_s,
    }
    record = results.envelope(
        "check",
        run_id,
        "complete",
        config,
        f"FAIL: {', '.join(failed)}" if failed else "",
        check=check_section(section),
    )
    path = results.write_record(config.results.results_dir, run_id, record)
    if jax.process_index() == 0:
        nodes = ", ".join(info["nodes"])
        print(
            f"node check: {info['device_count']} x {kind} ({backend}), {info['process_count']} "
            f"process(es) on {len(info['nodes'])} node(s) [{nodes}], host {info['host_cores']} "
            f"cores; budget {config.check.budget_s:g} s"
        )
        if points:
            print()
            print(collectives.tables(points))
        print()
        print(table(rows))
        print()
        print(f"verdict: {section['verdict']} ({len(failed)} FAIL) in {wall_s:.1f} s")
        if path:
            print(f"record: {path}")
    return exit_code(rows)
