"""Which FLOP count a run uses, the per-operator tables, and `--mode=flops` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_main

from hpcai_jax import records
from hpcai_jax.flops.analytic import KINDS
from hpcai_jax.flops.crosscheck import SOURCE_ANALYTIC, SOURCE_XLA, choose_flops, count_model
from hpcai_jax.flops.tables import forward_table, train_table


@pytest.mark.parametrize(
    "requested,xla,ratio,want",
    [
        ("auto", 1.01e9, 1.01, (1.01e9, SOURCE_XLA, True)),
        ("auto", 5.0e9, 5.0, (1.0e9, SOURCE_ANALYTIC, False)),  # e.g. a cost-analysis bug
        ("auto", None, None, (1.0e9, SOURCE_ANALYTIC, None)),
        ("xla", 5.0e9, 5.0, (5.0e9, SOURCE_XLA, False)),  # asked for: used, but flagged
        ("xla", None, None, (1.0e9, SOURCE_ANALYTIC, None)),
        ("analytic", 1.01e9, 1.01, (1.0e9, SOURCE_ANALYTIC, True)),
    ],
)
def test_flops_source_rules(requested, xla, ratio, want):
    flops, source, ok, why = choose_flops(requested, xla, 1.0e9, ratio)
    assert (flops, source, ok) == want
    assert why
    if ok is False:
        assert "OUTSIDE ±10%" in why


def test_tables_list_every_counted_operator_and_shares_add_up():
    mf = count_model("resnet_small", (28, 28, 1), 10, 8)
    for table, count in ((forward_table(mf.forward), mf.forward), (train_table(mf), mf.train_step)):
        body = table.splitlines()[1:-1]
        kinds = [line.split()[0] for line in body]
        assert kinds == [k for k in KINDS if count.row(k).ops or count.row(k).xla]
        xla_shares = sum(float(line.split()[-1].rstrip("%")) for line in body)
        assert xla_shares == pytest.approx(100, abs=0.05)
        assert table.splitlines()[-1].startswith("total")


@pytest.mark.slow
def test_flops_mode_prints_the_report_and_writes_the_record(tmp_path: Path):
    # The shipped ResNet-50 flagfile, shrunk to resnet_small so that it compiles in seconds.
    result = run_main(
        "--flagfile=configs/flops_resnet50.flags",
        "--model=resnet_small",
        "--image_size=28",
        "--num_classes=0",  # the data set's: synthetic data's 1000, as the record says
        "--batch_size=16",
        "--ensemble_size=2",
        "--parallel_degree=4",
        f"--results_dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for text in (
        "Forward pass",
        "Training step",
        "XLA / analytic =",
        "APC (Eq. 4",
        "Peak FLOP/s per device",
        "normalization",
        "convolution",
    ):
        assert text in out, out
    (path,) = tmp_path.glob("flops-*.json")
    record = json.loads(path.read_text())
    typed = records.read(path)
    flops = typed.flops
    assert flops.train_step_flops_source == "xla_cost_analysis"
    assert abs(flops.xla_over_analytic - 1) < 0.05
    assert flops.crosscheck_ok is True
    assert flops.apc == flops.train_step_flops == flops.xla_train_step_flops
    assert {row["kind"] for row in flops.forward["operators"]} >= {
        "convolution",
        "normalization",
    }
    assert typed.peaks.measured_matmul_flops_per_s > 0
    assert typed.config["mode"] == "flops"
    assert typed.config["data"]["num_classes"] == 1000
    assert typed.config["data"]["image_size"] == 28
    # The typed record is the file's JSON, field for field.
    assert isinstance(typed, records.FlopsRecord) and records.to_dict(typed) == record
