"""The command line: an end-to-end run writes a complete record; bad input is one line, exit 2."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from helpers import run_main

TINY = [
    "--ensemble_size=4",
    "--members_per_device=2",
    "--parallel_degree=4",
    "--batch_size=16",
    "--steps=4",
    "--train_examples=512",
    "--eval_examples=300",
    "--eval_batch_size=128",
    "--log_every=2",
    "--lr_schedule=constant",
    "--model=resnet_small",
    "--target_quality=0.9",
]


_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


def _assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr[-2000:]
    # Progress log lines (absl's "I1202 10:58:23.335358 ..." prefix) may precede the error.
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)
    ]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("hpcai_jax: error: ")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _walk(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}/{k}")
    else:
        yield path, value


def test_end_to_end_record(tmp_path):
    proc = run_main(*TINY, f"--results_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = list(tmp_path.glob("*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    for key in (
        "flops/per_step",
        "flops/xla_per_step_per_device",
        "metrics/flops_per_s_steady",
        "flops/crosscheck/xla_over_analytic",
        "metrics/mfu_measured",
        "peak_flops/measured_per_device",
        "metrics/flops_per_s_per_device",
        "metrics/vflops_per_s_steady",
        "metrics/penalty",
        "metrics/images_per_s",
        "timing/compile_s",
        "timing/train_wall_s",
        "timing/step_s/min_s",
        "timing/step_s/median_s",
        "timing/step_s/max_s",
        "quality/ensemble",
        "quality/member_mean",
        "quality/target",
        "quality/exponent",
        "data/steps_per_epoch",
        "mesh/num_devices",
        "provenance/device_count",
    ):
        value = dict(_walk(record))["/" + key]
        assert isinstance(value, int | float) and value > 0 and math.isfinite(value), (key, value)
    assert record["timing"]["data_wait_s"] >= 0
    assert record["mesh"]["shape"] == {"ensemble": 2, "data": 4, "model": 1}
    assert record["timing"]["timed_steps"] == 3  # one warm-up step excluded
    assert len(record["quality"]["members"]) == 4
    assert all(0 < a <= 1 for a in record["quality"]["members"])
    assert record["flops"]["source"] == "xla_cost_analysis"
    assert record["flops"]["per_step"] == record["flops"]["xla_per_step"]
    assert 0.9 < record["flops"]["crosscheck"]["xla_over_analytic"] < 1.2
    assert record["provenance"]["versions"]["jax"]
    assert record["provenance"]["git_commit"]
    expected_vflops = (
        record["metrics"]["flops_per_s_steady"]
        * (record["quality"]["ensemble"] / record["quality"]["target"])
        ** record["quality"]["exponent"]
    )
    assert record["metrics"]["vflops_per_s_steady"] == pytest.approx(expected_vflops)
    assert "ensemble top1_accuracy" in proc.stdout
    # 4 steps of an epoch of 32: no Eq. 6 figure, hence no VFLOPS; the summary says why.
    assert record["epochs"] == [] and record["metrics"]["flops_per_s"] is None
    assert record["metrics"]["vflops_per_s"] is None
    assert "n/a (no completed epoch (4 steps of 32 per epoch)" in proc.stdout
    # One evaluation, at the end, below the target 0.9: no time to target, and why.
    (point,) = record["quality"]["curve"]
    assert (point["step"], point["ensemble"]) == (4, record["quality"]["ensemble"])
    assert record["time_to_target_s"] is None
    assert record["time_to_target_why"].startswith("the ensemble never reached the target 0.9")
    assert record["timing"]["eval_s"] > 0 and record["quality"]["stopped_at_target"] is False
    # The score's provenance: bagging, the out-of-bag estimate, the target, the FLOP source.
    assert all(0.55 < f < 0.72 for f in record["data"]["distinct_fraction"])  # 512 examples
    oob = record["quality"]["oob"]
    assert oob["subset"] == 512 and 0 < oob["scored"] < 512 and 0 <= oob["quality"] <= 1
    assert 1 <= oob["mean_voters"] < 4
    assert record["quality"]["target_is_official"] is False and record["quality"]["target"] == 0.9
    assert record["flops"]["crosscheck_ok"] is True
    assert "all 8 devices at once" in record["peak_flops"]["measured_method"]
    # Members never exchange training data; what a member sends goes over `data`.
    assert record["comm"]["bytes_per_step"]["ensemble"] == 0
    assert record["comm"]["bytes_per_step"]["data"] > 0
    assert record["memory_per_device"]["argument_bytes"] > 0
    assert record["energy"]["available"] is False and "cpu" in record["energy"]["why"]
    roof = record["roofline"]
    assert roof["bandwidth_bytes_per_s"] > 1e8 and "measured at start" in roof["bandwidth_source"]
    assert roof["arithmetic_intensity_flops_per_byte"] > 0 and roof["bound"] in (
        "memory",
        "compute",
    )


@pytest.mark.parametrize(
    "args,fragments",
    [
        (
            ["--ensemble_size=3", "--parallel_degree=4", "--members_per_device=1"],
            [
                "Eq. 5 fails",
                "(--ensemble_size=3 / --members_per_device=1) × --parallel_degree=4 = 12",
                "8 devices",
            ],
        ),
        (["--ensemble_size=4", "--members_per_device=3"], ["--members_per_device=3 must divide"]),
        (["--bootstrap=sometimes"], ["--bootstrap", "sometimes"]),
        (["--model=resnet9000"], ["--model", "resnet9000"]),
        (["--batch_size=0"], ["--batch_size=0: expected >= 1"]),
        (["--batch_size=abc"], ["--batch_size", "abc"]),
        (["--no_such_flag=1"], ["no_such_flag"]),
        (
            ["--data_dir=/nonexistent/fmnist"],
            ["--data_dir=/nonexistent/fmnist", "apt-get install dataset-fashion-mnist"],
        ),
        (
            ["--dataset=imagenet2012", "--data_dir=/nonexistent/tfds"],
            ["--dataset=imagenet2012", "not found or not prepared", "tfds build imagenet2012"],
        ),
        (["--flagfile=/nonexistent.flags"], ["/nonexistent.flags"]),
        (
            ["--target_quality=0"],
            [
                "--target_quality: no official target for",
                "--model=resnet_small --dataset=fashion_mnist",
                "give --target_quality explicitly",
            ],
        ),
        (["--quality_exponent=-2"], ["--quality_exponent=-2.0: expected >= 0"]),
        (["--flops_source=guess"], ["--flops_source", "guess"]),
        (
            ["--stream_record=/nonexistent.json"],
            ["--stream_record=/nonexistent.json", "not a STREAM record with a Triad figure"],
        ),
        (
            ["--batch_size=15", "--parallel_degree=2", "--members_per_device=1"],
            ["--batch_size=15 must be divisible by P_degree=2"],
        ),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, fragments):
    proc = run_main(*TINY, f"--results_dir={tmp_path}/r", *args, timeout=120)
    _assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_corrupt_data_file(tmp_path):
    data = tmp_path / "fmnist"
    data.mkdir()
    for src in Path("/usr/share/datasets/fashion-mnist").iterdir():
        shutil.copy(src, data / src.name)
    (data / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b garbage")
    proc = run_main(*TINY, f"--data_dir={data}", f"--results_dir={tmp_path}/r", timeout=120)
    _assert_one_line_error(proc, "train-images-idx3-ubyte.gz", "not a valid IDX file")


def test_unwritable_results_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_main(*TINY, f"--results_dir={blocker}/sub", timeout=120)
    _assert_one_line_error(proc, f"--results_dir={blocker}/sub")
    assert blocker.read_text() == "not a directory"
