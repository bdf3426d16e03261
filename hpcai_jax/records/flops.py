"""The FLOP accounting record (`--mode=flops`); `flops/mode.py` builds it. docs/flops.md
explains the counts, docs/record.md lists the fields."""

from __future__ import annotations

from hpcai_jax.records.envelope import Record
from hpcai_jax.records.fields import field
from hpcai_jax.records.schema import section
from hpcai_jax.records.train import Crosscheck


@section
class FlopsReport(Crosscheck):
    forward: dict = field(
        "one member's forward pass, per operator kind: taps, MACs and FLOPs by each convention "
        "(docs/flops.md)"
    )
    train_step_member: dict = field("one member's training step, the same way")
    xla_forward_flops_per_example: float | None = field(
        "XLA's count of the compiled forward pass per example; None where XLA gives none", "FLOP"
    )
    xla_notes: list[str] = field("why XLA gave no count, per compiled program")
    gap_by_operator: list[str] = field(
        "per operator kind, why the step under XLA's rules differs from 3 × Table 3's forward"
    )


@section
class FlopsPeaks:
    device_kind: str = field("the device")
    dtype: str = field("the dtype of the peaks")
    datasheet_flops_per_s: float | None = field(
        "the vendor's dense peak; None where unknown", "FLOP/s"
    )
    measured_matmul_flops_per_s: float = field("a large matmul's rate on one device", "FLOP/s")


@section
class FlopsRecord(Record):
    flops: FlopsReport = field(
        "the step's two counts and the per-operator tables; the cross-check's fields as in "
        "`flops.crosscheck` of a training record"
    )
    peaks: FlopsPeaks = field("the device's peak FLOP/s")
    compile_s: float = field("compiling the training step", "s")
