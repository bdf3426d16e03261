"""`--mode=flops` as measure → render → record: the text and the record are functions of one
measured value, here built from the analytic counts and forged XLA figures (no compile)."""

from __future__ import annotations

from hpcai_jax import config as C
from hpcai_jax import records
from hpcai_jax.flops.crosscheck import count_config, crosscheck
from hpcai_jax.flops.mode import FlopsResult, flops_record, render_flops
from hpcai_jax.xla_cost import XlaCost


def _config() -> C.RunConfig:
    return C.RunConfig(
        mode="flops",
        mesh=C.MeshConfig(ensemble_size=2, parallel_degree=4),
        model=C.ModelConfig(model="resnet_small"),
        data=C.DataConfig(dataset="synthetic", image_size=28, num_classes=10),
        train=C.TrainConfig(batch_size=16, steps=1),
        results=C.ResultsConfig(flops_source="auto"),
    ).validate()


def _result(config: C.RunConfig, xla_over_walk: float) -> FlopsResult:
    """A result whose XLA count of the step is `xla_over_walk` times the analytic walk."""
    walk = crosscheck(config, None).analytic["train_step"]["xla_rules"]
    step_flops = xla_over_walk * walk
    return FlopsResult(
        member=count_config(config),
        forward_cost=XlaCost(None, None, 1, note="forged: no forward figure"),
        step_cost=XlaCost(step_flops / 8, None, 8),
        check=crosscheck(config, step_flops),
        dtype="float32",
        num_devices=8,
        device_kind="Forged Device",
        datasheet_flops_per_s=None,
        measured_matmul_flops_per_s=1.2345e12,
        compile_s=7.5,
    )


def test_the_report_and_the_record_come_from_the_result_alone():
    config = _config()
    good = _result(config, 1.0)
    text = render_flops(good)
    assert text == render_flops(good)  # nothing measured again, nothing else read
    assert "(Forged Device)" in text and "measured matmul 1.2345 TFLOP/s" in text
    assert "unavailable (forged: no forward figure)" in text
    assert "XLA / analytic = 1.0000" in text and "CROSS-CHECK FAILED" not in text
    record = flops_record(config, "f", good)
    assert (record.status, record.reason, record.compile_s) == ("complete", "", 7.5)
    assert record.peaks.measured_matmul_flops_per_s == 1.2345e12
    assert record.peaks.device_kind == "Forged Device"
    assert record.flops.xla_train_step_flops == good.step_cost.flops
    assert record.flops.xla_notes == ["forged: no forward figure"]
    assert records.to_dict(records.read(records.to_dict(record))) == records.to_dict(record)


def test_a_failed_crosscheck_is_rendered_and_recorded_invalid():
    config = _config()
    bad = _result(config, 5.0)  # e.g. a cost-analysis bug: --flops_source=auto distrusts it
    assert not bad.ok
    text = render_flops(bad)
    assert text.splitlines()[-1] == f"CROSS-CHECK FAILED: {bad.check.source_reason}"
    record = flops_record(config, "f", bad)
    assert (record.status, record.reason) == ("invalid", bad.check.source_reason)
