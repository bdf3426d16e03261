"""`--mode=check` as measure → render → record: the items are one table of (name, share,
function) run by one loop within the budget, and the text and the record are functions of what
it measured. No item measures anything here: each is replaced by a fake that notes its call."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.nodecheck import collectives, compute, data, inputs, runner, training
from hpcai_jax.nodecheck.budget import Budget
from hpcai_jax.nodecheck.rows import FAIL, PASS, WARN, Row, judge
from hpcai_jax.nodecheck.step_fit import Sizing
from hpcai_jax.settings import Settings

# docs/node_check.md's shares, in the order the items run.
SHARES = {
    "stream": 0.06,
    "matmul": 0.10,
    "collectives": 0.20,
    "train": 0.18,
    "input": 0.03,
    "data": 0.02,
    "strategy": 0.28,
    "dtypes": 0.13,
}
INFO = {
    "backend": "cpu",
    "device_kind": "cpu",
    "device_count": 8,
    "local_device_count": 8,
    "process_count": 1,
    "nodes": ["n0"],
    "node_of_process": ["n0"],
    "peaks_row": None,
    "memory_bandwidth": None,
    "link": None,
    "host_cores": 2,
    "host_memory_bytes": None,
}
STEP = {
    "build_s": 2.0,
    "step_s": [0.5, 0.7, 0.6],
    "examples_per_s_per_device": 123.0,
    "config": {"batch_size": 4, "dtype": "float32"},
}


def _config() -> C.RunConfig:
    return Settings(
        mode="check",
        model=C.ModelConfig(workload="regression", model="mlp"),
        data=C.DataConfig(dataset="friedman1"),
        train=C.TrainConfig(batch_size=8),
    ).validate()


def test_the_items_are_one_table_with_the_documented_shares():
    assert {item.name: item.share for item in runner.ITEMS} == SHARES
    assert [item.name for item in runner.ITEMS] == list(SHARES)
    assert sum(SHARES.values()) == pytest.approx(1.0)


def test_the_loop_gives_each_item_its_share_and_hands_the_step_on(monkeypatch):
    calls = []

    def fake(name, rows=(), section=None):
        def measure(*args, **kwargs):
            allotment = next(a for a in args if hasattr(a, "claim"))
            others = [a for a in args if a is not allotment and not isinstance(a, C.RunConfig)]
            others += list(kwargs.values())
            others = [a for a in others if not isinstance(a, Sizing)]
            calls.append((name, allotment.seconds, others))
            out = [judge(f"{name} row", 1.0, None)]
            return out if section is None else (out, section)

        return measure

    monkeypatch.setattr(compute, "stream_rows", fake("stream"))
    monkeypatch.setattr(compute, "matmul_rows", fake("matmul"))
    monkeypatch.setattr(collectives, "measure", lambda layout, a, size: ([], {}))
    monkeypatch.setattr(training, "train_rows", fake("train", section=STEP))
    monkeypatch.setattr(inputs, "input_rows", fake("input"))
    monkeypatch.setattr(data, "data_rows", fake("data"))
    monkeypatch.setattr(training, "strategy_rows", fake("strategy", section={"winner": "vmap"}))
    monkeypatch.setattr(training, "dtype_rows", fake("dtypes"))
    now = [0.0]
    budget = Budget(100.0, SHARES, clock=lambda: now[0])  # nothing takes time: shares of 100 s
    ctx = runner.Context(_config(), INFO, estimate_s=10.0)
    finished = []
    items = runner.run_items(ctx, budget, done=lambda name, rows: finished.append(name))
    named = [name for name, _, _ in calls]
    assert named == ["stream", "matmul", "train", "input", "data", "strategy", "dtypes"]
    assert finished == [name for name, _ in items] == list(SHARES)  # as each finishes
    assert [r.item for _, rows in items for r in rows][:2] == ["stream row", "matmul row"]
    # Each a share of what is left (all of it: nothing took time) over the shares still to run.
    assert calls[0][1] == pytest.approx(6.0) and calls[1][1] == pytest.approx(100 * 0.10 / 0.94)
    assert list(budget.used_s) == list(SHARES)
    step_estimate = 2.0 + 3 * 0.7  # the step's build and three of its slowest steps
    args = {name: others for name, _, others in calls}
    assert args["matmul"][:2] == ["cpu", 512]  # a CPU's matmuls at n = 512 (and the room)
    # The guess, before a step is built; the fake matmul row measured no dtype's rate.
    assert args["train"] == [10.0, {}]
    assert args["strategy"] == args["dtypes"] == [pytest.approx(step_estimate)]
    assert 123.0 in args["input"]  # the step's rate
    assert 123.0 * 8 in args["data"]  # the host's: the step's rate x local devices
    assert ctx.train_step == STEP and ctx.member_strategy == {"winner": "vmap"}
    assert ctx.sizing.example_s == {"float32": 0.5 / 4}  # the fastest step over its batch


POINT = collectives.Point(
    axis="intra_node",
    op="all_reduce",
    n=8,
    size_bytes=1024,
    count=256,
    iters=3,
    time_s=1e-4,
    algbw=1.024e7,
    busbw=1.792e7,
    wrong=0,
    in_place_iters=3,
    in_place_time_s=2e-4,
    in_place_algbw=0.512e7,
    in_place_busbw=0.896e7,
    in_place_wrong=0,
)


def _result(**fields) -> runner.CheckResult:
    return runner.CheckResult(
        **{
            "info": INFO,
            "items": (
                (runner.SYSTEM, (Row("devices", PASS, 8.0, 8.0),)),
                ("stream", (Row("stream triad per device", FAIL, 1.0e9, 9.0e9, "B/s"),)),
                ("collectives", (Row("all_reduce busbw intra_node", PASS, 1.792e7, 1e7, "B/s"),)),
            ),
            "points": (POINT,),
            "train_step": None,
            "member_strategy": None,
            "budget_s": 30.0,
            "used_s": {name: 1.0 for name in SHARES},
            "wall_s": 12.34,
            **fields,
        }
    )


def test_the_text_and_the_record_come_from_the_result_alone():
    config, result = _config(), _result()
    text = runner.render_check(result)
    assert text == runner.render_check(result)
    lines = text.splitlines()
    assert lines[0].startswith("node check: 8 x cpu (cpu), 1 process(es) on 1 node(s) [n0]")
    assert lines[0].endswith("budget 30 s")
    # The collective table comes with the collectives' rows, after the stream row.
    assert text.index("stream triad") < text.index("# all_reduce on intra_node, n = 8 per group")
    assert text.index("# all_reduce on") < text.index("all_reduce busbw intra_node")
    assert lines[-1] == "verdict: FAIL (1 FAIL) in 12.3 s"
    # One unit for bandwidths: GB/s in the rows as in the tables, never raw B/s.
    stream = next(line for line in lines if line.startswith("stream triad"))
    assert stream.split()[4:7] == ["1", "9", "GB/s"]
    record = runner.check_record(config, "c", result)
    assert (record.status, record.reason) == ("complete", "FAIL: stream triad per device")
    assert record.check.verdict == "FAIL" and len(record.check.rows) == 3
    assert record.check.budget.wall_s == 12.34 and record.check.collectives[0].busbw == 1.792e7
    as_json = records.to_dict(record)
    assert records.to_dict(records.read(as_json)) == as_json
    quiet = _result(items=((runner.SYSTEM, (Row("devices", PASS, 8.0, 8.0),)),), points=())
    assert "# all_reduce on" not in runner.render_check(quiet)
    assert runner.render_check(quiet).splitlines()[-1] == "verdict: PASS (0 FAIL) in 12.3 s"
    assert runner.check_record(config, "c", quiet).reason == ""


def test_the_text_printed_item_by_item_is_the_whole_text(tmp_path, monkeypatch, capsys):
    """What the command prints as items finish is, joined, `render_check` of the result."""
    fake = [
        runner.Item("one", 0.5, lambda ctx, a: [Row("one row", PASS, 1.0, 1.0)]),
        runner.Item("two", 0.5, lambda ctx, a: [Row("two row", WARN, note="skipped: x")]),
    ]
    monkeypatch.setattr(runner, "ITEMS", tuple(fake))
    config = dataclasses.replace(
        _config(), results=C.ResultsConfig(results_dir=str(tmp_path), run_name="c")
    )
    assert runner.run_check(config) == 0
    printed = capsys.readouterr().out
    record = records.read(json.loads((tmp_path / "c.json").read_text()))
    assert record.status == "complete" and record.reason == ""
    result = runner.CheckResult(
        info=records.to_dict(record.check.system),
        items=(
            (runner.SYSTEM, tuple(Row(**_row(r)) for r in record.check.rows[:-2])),
            ("one", (Row("one row", PASS, 1.0, 1.0),)),
            ("two", (Row("two row", WARN, note="skipped: x"),)),
        ),
        points=(),
        train_step=None,
        member_strategy=None,
        budget_s=config.check.budget_s,
        used_s={},
        wall_s=record.check.budget.wall_s,
    )
    assert printed == runner.render_check(result) + f"\nrecord: {tmp_path / 'c.json'}\n"


def _row(row) -> dict:
    out = records.to_dict(row)
    out.pop("ratio")
    return out
