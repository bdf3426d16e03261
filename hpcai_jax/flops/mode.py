"""`--mode=flops`: the FLOP accounting report of a configuration's training step, without
training: the per-operator tables, XLA's count against the analytic one, APC, the peaks.

Measure (`measure_flops`, the compiles and the matmul peak), render (`render_flops`, the text)
and record (`flops_record`) are separate, so that the text and the record are functions of one
measured value (docs/flops.md)."""

from __future__ import annotations

import dataclasses

import jax
from jax.sharding import Mesh

from hpcai_jax import results, units
from hpcai_jax.config import RunConfig
from hpcai_jax.data.datasets import data_spec, resolved
from hpcai_jax.engine.compiled import compile_abstract_step
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.flops.crosscheck import (
    FlopFigures,
    ModelFlops,
    count_config,
    crosscheck,
    forward_args,
    forward_fn,
)
from hpcai_jax.flops.peaks import measure_matmul_peak, peak_flops_per_device
from hpcai_jax.flops.tables import (
    PAPER_RESNET50_APC_GFLOPS,
    PAPER_RESNET50_BATCH,
    explain_gap,
    forward_table,
    train_table,
)
from hpcai_jax.records import write as record_write
from hpcai_jax.records.flops import FlopsPeaks, FlopsRecord, FlopsReport
from hpcai_jax.xla_cost import XlaCost, xla_cost


@dataclasses.dataclass(frozen=True)
class CompiledTrainStep:
    compiled: jax.stages.Compiled
    lowered: jax.stages.Lowered
    counted: jax.stages.Lowered | None  # StepBuild.counted
    layout: MeshLayout
    mesh: Mesh
    num_devices: int
    member_strategy: str
    member_strategy_why: str
    compile_s: float
    member_loop_trips: int = 1  # RunSetup.member_loop_trips


def compile_train_step(config: RunConfig, devices=None) -> CompiledTrainStep:
    """The whole-ensemble training step for `config`, compiled without initialising any state
    (for FLOP accounting)."""
    setup = build_setup(config, devices=devices, open_data=False)
    build = compile_abstract_step(setup, count=True)
    return CompiledTrainStep(
        compiled=build.compiled,
        lowered=build.lowered,
        counted=build.counted,
        layout=setup.layout,
        mesh=setup.mesh,
        num_devices=setup.layout.num_devices,
        member_strategy=setup.plan.mapping.strategy,
        member_strategy_why=setup.member_strategy_why,
        compile_s=build.seconds,
        member_loop_trips=setup.member_loop_trips,
    )


@dataclasses.dataclass(frozen=True)
class FlopsResult:
    """What `--mode=flops` measured; the model, |B| and M are the cross-check's (`check`)."""

    member: ModelFlops  # one member's analytic counts: forward and training step
    forward_cost: XlaCost  # XLA's count of the compiled forward pass, one device
    step_cost: XlaCost  # XLA's count of the whole ensemble's compiled training step
    check: FlopFigures  # XLA against the analytic counts, APC
    dtype: str
    num_devices: int  # the training step's devices
    device_kind: str
    datasheet_flops_per_s: float | None
    measured_matmul_flops_per_s: float
    compile_s: float  # compiling the training step

    @property
    def xla_forward_per_example(self) -> float | None:
        flops = self.forward_cost.flops
        return None if flops is None else flops / self.check.batch_size

    @property
    def ok(self) -> bool:
        """False only when XLA's and the analytic count disagree beyond the tolerance."""
        return self.check.crosscheck_ok is not False


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt_ratio(r: float | None) -> str:
    return units.formatted(r, "{:.4f}")


def measure_flops(config: RunConfig) -> FlopsResult:
    """Counts `config`'s step analytically, compiles its forward pass and training step for
    XLA's counts, and measures the matmul peak; prints nothing."""
    member = count_config(config)
    variables, x = forward_args(member)
    fwd_lowered = jax.jit(forward_fn(member.workload)).lower(variables, x)
    fwd_cost = xla_cost(fwd_lowered.compile(), 1, fwd_lowered)
    step = compile_train_step(config)
    step_cost = xla_cost(
        step.compiled,
        step.num_devices,
        step.lowered,
        step.counted,
        step.member_loop_trips,
    )
    check = crosscheck(config, step_cost.flops)
    device = jax.devices()[0]
    dtype = config.model.dtype
    return FlopsResult(
        member=member,
        forward_cost=fwd_cost,
        step_cost=step_cost,
        check=check,
        dtype=dtype,
        num_devices=step.num_devices,
        device_kind=device.device_kind,
        datasheet_flops_per_s=peak_flops_per_device(device.device_kind, dtype),
        measured_matmul_flops_per_s=measure_matmul_peak(dtype),
        compile_s=step.compile_s,
    )


def _forward_lines(result: FlopsResult) -> list[str]:
    fwd, b, fwd_xla_ex = (
        result.member.forward,
        result.check.batch_size,
        result.xla_forward_per_example,
    )
    return [
        f"Forward pass (one member, training mode), per example; "
        f"{fwd.macs / b / 1e9:.4f} GMAC over all taps",
        forward_table(fwd),
        "XLA (compiled forward, 1 device): "
        + (
            f"{fwd_xla_ex / 1e9:.4f} GFLOP/example; XLA / XLA rules "
            f"{_fmt_ratio(_ratio(fwd_xla_ex, fwd.per_example('xla')))}, XLA / Table 3 2·MAC "
            f"{_fmt_ratio(_ratio(fwd_xla_ex, fwd.per_example('table3_2mac')))}"
            if fwd_xla_ex is not None
            else f"unavailable ({result.forward_cost.note})"
        ),
    ]


def _step_lines(result: FlopsResult) -> list[str]:
    check, step_cost = result.check, result.step_cost
    return [
        "Training step (one member: preprocess, forward, backward, SGD update), per example",
        train_table(result.member),
        "",
        f"Whole ensemble's training step (M = {check.ensemble_size}, global = per device × "
        f"{result.num_devices}):",
        "  XLA cost analysis      "
        + (
            f"{step_cost.flops / 1e9:14.3f} GFLOP"
            if step_cost.flops is not None
            else f"unavailable ({step_cost.note})"
        ),
        f"  analytic, XLA rules    {check.analytic['train_step']['xla_rules'] / 1e9:14.3f} GFLOP"
        f"   XLA / analytic = {_fmt_ratio(check.xla_over_analytic)}",
        f"  analytic, 3×fwd Table 3 {check.apc_table3 / 1e9:13.3f} GFLOP"
        f"   XLA / Table 3  = {_fmt_ratio(check.xla_over_table3)}",
        "  per operator, 3×fwd Table 3 vs the step under XLA's rules (GFLOP/example):",
        *(f"    {line}" for line in explain_gap(result.member)),
    ]


def render_flops(result: FlopsResult) -> str:
    """The report `--mode=flops` prints, from the measured value alone."""
    check, member = result.check, result.member
    kind, dtype = result.device_kind, result.dtype
    lines = [
        f"FLOP accounting: {check.model}, {'×'.join(map(str, member.input_shape))}, "
        f"|B| = {check.batch_size}, M = {check.ensemble_size}, dtype {dtype}, "
        f"{result.num_devices} device(s) ({kind})",
        "",
        *_forward_lines(result),
        "",
        *_step_lines(result),
        "",
        f"APC (Eq. 4, one iteration of the ensemble): {check.apc / 1e9:.3f} GFLOP "
        f"[{check.train_step_flops_source}]; {check.apc_table3 / 1e9:.3f} GFLOP by the "
        "paper's rule (3 × forward, Table 3)",
    ]
    if check.model == "resnet50":
        lines.append(
            f"  paper (ResNet-50 v1, |B| = {PAPER_RESNET50_BATCH}, M = 1): "
            f"{PAPER_RESNET50_APC_GFLOPS:,} GFLOP = 23.0 GFLOP × 512 (≈ 3.8 GMAC × 2 × 3); ours is "
            "v1.5 (stride on the 3×3 convolution: 4.09 GMAC) and counts BatchNorm, "
            "element-wise and pooling operators too"
        )
    datasheet = result.datasheet_flops_per_s
    notes = check.notes + [result.forward_cost.note, result.step_cost.note]
    lines += [
        "FLOPS (Eq. 6) = APC × N/|B| / T_epoch: reported by training runs",
        "",
        f"Peak FLOP/s per device ({dtype}): datasheet "
        + (f"{datasheet / 1e12:.1f} TFLOP/s" if datasheet else f"unknown for {kind!r}")
        + f"; measured matmul {result.measured_matmul_flops_per_s / 1e12:.4f} TFLOP/s",
        *(f"note: {n}" for n in notes if n),
    ]
    if not result.ok:
        lines.append(f"CROSS-CHECK FAILED: {check.source_reason}")
    return "\n".join(lines)


def flops_record(config: RunConfig, run_id: str, result: FlopsResult) -> FlopsRecord:
    """The record (`records.FlopsRecord`, docs/record.md) of the measured value; every process
    must call it (the envelope gathers host names)."""
    check = result.check
    status, reason = ("complete", "") if result.ok else ("invalid", check.source_reason)
    return results.envelope(
        "flops",
        run_id,
        status,
        config,
        reason,
        flops=FlopsReport(
            **check.to_dict(),
            forward=result.member.forward.to_dict(),
            train_step_member=result.member.train_step.to_dict(),
            xla_forward_flops_per_example=result.xla_forward_per_example,
            xla_notes=[n for n in (result.forward_cost.note, result.step_cost.note) if n],
            gap_by_operator=explain_gap(result.member),
        ),
        peaks=FlopsPeaks(
            device_kind=result.device_kind,
            dtype=result.dtype,
            datasheet_flops_per_s=result.datasheet_flops_per_s,
            measured_matmul_flops_per_s=result.measured_matmul_flops_per_s,
        ),
        compile_s=result.compile_s,
    )


def run_flops(config: RunConfig) -> int:
    """Prints the FLOP report for `config` (process 0) and writes it as a results record.

    Returns 0, or 1 when XLA's and the analytic count of the training step disagree by more
    than CROSSCHECK_TOLERANCE.
    """
    # The record states the data set's own values (its classes, its image size), as a run's does.
    config = dataclasses.replace(config, data=resolved(config.data, data_spec(config.data)))
    run_id = record_write.run_id(config, "flops")
    claimed = results.claim(config.results.results_dir, run_id, config.results.overwrite)
    result = measure_flops(config)
    if jax.process_index() == 0:
        print(render_flops(result))
    record = flops_record(config, run_id, result)
    path = results.write_record(config.results.results_dir, run_id, record)
    claimed.release()
    if path is not None:
        print(f"record: {path}")
    return 0 if result.ok else 1
