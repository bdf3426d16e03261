"""`--mode=check` as measure → render → record: the items are one table of (name, share,
function) run by one loop within the budget, and the text and the record are functions of what
it measured. No item measures anything here: each is replaced by a fake that notes its call."""

from __future__ import annotations

import pytest

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.check import collectives, compute, inputs, runner, training
from hpcai_jax.check.budget import Budget
from hpcai_jax.check.rows import FAIL, PASS, Row, judge

# docs/node_check.md's shares, in the order the items run.
SHARES = {
    "stream": 0.06,
    "matmul": 0.10,
    "collectives": 0.20,
    "train": 0.18,
    "input": 0.04,
    "strategy": 0.28,
    "dtypes": 0.14,
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
STEP = {"build_s": 2.0, "step_s": [0.5, 0.7, 0.6], "examples_per_s_per_device": 123.0}


def _config() -> C.RunConfig:
    return C.RunConfig(
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
            calls.append((name, allotment.seconds, others))
            out = [judge(f"{name} row", 1.0, None)]
            return out if section is None else (out, section)

        return measure

    monkeypatch.setattr(compute, "stream_rows", fake("stream"))
    monkeypatch.setattr(compute, "matmul_rows", fake("matmul"))
    monkeypatch.setattr(collectives, "measure", lambda layout, a, size: ([], {}))
    monkeypatch.setattr(training, "train_rows", fake("train", section=STEP))
    monkeypatch.setattr(inputs, "input_rows", fake("input"))
    monkeypatch.setattr(training, "strategy_rows", fake("strategy", section={"winner": "vmap"}))
    monkeypatch.setattr(training, "dtype_rows", fake("dtypes"))
    now = [0.0]
    budget = Budget(100.0, SHARES, clock=lambda: now[0])  # nothing takes time: shares of 100 s
    ctx = runner.Context(_config(), INFO, estimate_s=10.0)
    rows = runner.run_items(ctx, budget)
    named = [name for name, _, _ in calls]
    assert named == ["stream", "matmul", "train", "input", "strategy", "dtypes"]
    assert [r.item for r in rows][:2] == ["stream row", "matmul row"]
    # Each a share of what is left (all of it: nothing took time) over the shares still to run.
    assert calls[0][1] == pytest.approx(6.0) and calls[1][1] == pytest.approx(100 * 0.10 / 0.94)
    assert list(budget.used_s) == list(SHARES)
    step_estimate = 2.0 + 3 * 0.7  # the step's build and three of its slowest steps
    args = {name: others for name, _, others in calls}
    assert args["matmul"] == ["cpu", 512]  # a CPU's matmuls at n = 512
    assert args["train"] == [10.0]  # the guess, before a step is built
    assert args["strategy"] == args["dtypes"] == [pytest.approx(step_estimate)]
    assert 123.0 in args["input"]  # the step's rate
    assert ctx.train_step == STEP and ctx.member_strategy == {"winner": "vmap"}


def _result(**fields) -> runner.CheckResult:
    point = collectives.Point("intra_node", "all_reduce", 8, 1024, 256, 3, 1e-4, 1.024e7, 1.792e7)
    return runner.CheckResult(
        **{
            "info": INFO,
            "rows": (
                Row("devices", PASS, 8.0, 8.0),
                Row("stream triad per device", FAIL, 1.0, 9.0),
            ),
            "points": (point,),
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
    assert "collectives on intra_node (n = 8 per group; GB/s)" in text
    assert lines[-1] == "verdict: FAIL (1 FAIL) in 12.3 s"
    record = runner.check_record(config, "c", result)
    assert (record.status, record.reason) == ("complete", "FAIL: stream triad per device")
    assert record.check.verdict == "FAIL" and len(record.check.rows) == 2
    assert record.check.budget.wall_s == 12.34 and record.check.collectives[0].busbw == 1.792e7
    as_json = records.to_dict(record)
    assert records.to_dict(records.read(as_json)) == as_json
    quiet = _result(rows=(Row("devices", PASS, 8.0, 8.0),), points=())
    assert "collectives on" not in runner.render_check(quiet)
    assert runner.render_check(quiet).splitlines()[-1] == "verdict: PASS (0 FAIL) in 12.3 s"
    assert runner.check_record(config, "c", quiet).reason == ""
