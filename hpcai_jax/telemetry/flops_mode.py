"""`--mode=flops`: the FLOP accounting report of a configuration's training step, without
training: the per-operator tables, XLA's count against the analytic one, APC, the peaks."""

from __future__ import annotations

import jax

from hpcai_jax import results
from hpcai_jax.config import RunConfig
from hpcai_jax.engine.setup import compile_train_step
from hpcai_jax.flops.peaks import measure_matmul_peak, peak_flops_per_device
from hpcai_jax.flops.tables import (
    PAPER_RESNET50_APC_GFLOPS,
    PAPER_RESNET50_BATCH,
    explain_gap,
    forward_table,
    train_table,
)
from hpcai_jax.flops.xla import xla_cost
from hpcai_jax.records.flops import FlopsPeaks, FlopsReport
from hpcai_jax.telemetry.flop_count import count_config, crosscheck, forward_args, forward_fn


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _fmt_ratio(r: float | None) -> str:
    return results.cell(r, "{:.4f}")


def run_flops(config: RunConfig) -> int:
    """Prints the FLOP report for `config` and writes it as a results record.

    Returns 0, or 1 when XLA's and the analytic count of the training step disagree by more
    than CROSSCHECK_TOLERANCE.
    """
    run_id = results.run_id(config, "flops")
    claimed = results.claim(config.results.results_dir, run_id, config.results.overwrite)
    member = count_config(config)
    m, b = config.mesh.ensemble_size, config.train.batch_size

    variables, x = forward_args(member)
    fwd_lowered = jax.jit(forward_fn(member.workload)).lower(variables, x)
    fwd_cost = xla_cost(fwd_lowered.compile(), 1, fwd_lowered)
    step = compile_train_step(config)
    step_cost = xla_cost(step.compiled, step.num_devices, step.lowered)
    check = crosscheck(config, step_cost.flops)

    device = jax.devices()[0]
    dtype = config.model.dtype
    datasheet = peak_flops_per_device(device.device_kind, dtype)
    measured = measure_matmul_peak(dtype)

    fwd = member.forward
    fwd_xla_ex = None if fwd_cost.flops is None else fwd_cost.flops / b
    lines = [
        f"FLOP accounting: {config.model.model}, {'×'.join(map(str, member.input_shape))}, |B| = {b}, M = {m}, dtype {dtype}, "
        f"{step.num_devices} device(s) ({device.device_kind})",
        "",
        f"Forward pass (one member, training mode), per example; "
        f"{fwd.macs / b / 1e9:.4f} GMAC over all taps",
        forward_table(fwd),
        "XLA (compiled forward, 1 device): "
        + (
            f"{fwd_xla_ex / 1e9:.4f} GFLOP/example; XLA / XLA rules "
            f"{_fmt_ratio(_ratio(fwd_xla_ex, fwd.per_example('xla')))}, XLA / Table 3 2·MAC "
            f"{_fmt_ratio(_ratio(fwd_xla_ex, fwd.per_example('table3_2mac')))}"
            if fwd_xla_ex is not None
            else f"unavailable ({fwd_cost.note})"
        ),
        "",
        "Training step (one member: preprocess, forward, backward, SGD update), per example",
        train_table(member),
        "",
        f"Whole ensemble's training step (M = {m}, global = per device × {step.num_devices}):",
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
        *(f"    {line}" for line in explain_gap(member)),
        "",
        f"APC (Eq. 4, one iteration of the ensemble): {check.apc / 1e9:.3f} GFLOP "
        f"[{check.train_step_flops_source}]; {check.apc_table3 / 1e9:.3f} GFLOP by the "
        "paper's rule (3 × forward, Table 3)",
    ]
    if config.model.model == "resnet50":
        lines.append(
            f"  paper (ResNet-50 v1, |B| = {PAPER_RESNET50_BATCH}, M = 1): "
            f"{PAPER_RESNET50_APC_GFLOPS:,} GFLOP = 23.0 GFLOP × 512 (≈ 3.8 GMAC × 2 × 3); ours is "
            "v1.5 (stride on the 3×3 convolution: 4.09 GMAC) and counts BatchNorm, "
            "element-wise and pooling operators too"
        )
    lines += [
        "FLOPS (Eq. 6) = APC × N/|B| / T_epoch: reported by training runs",
        "",
        f"Peak FLOP/s per device ({dtype}): datasheet "
        + (
            f"{datasheet / 1e12:.1f} TFLOP/s"
            if datasheet
            else f"unknown for {device.device_kind!r}"
        )
        + f"; measured matmul {measured / 1e12:.4f} TFLOP/s",
        *(f"note: {n}" for n in check.notes + [fwd_cost.note, step_cost.note] if n),
    ]
    ok = check.crosscheck_ok is not False
    if not ok:
        lines.append(f"CROSS-CHECK FAILED: {check.source_reason}")
    if jax.process_index() == 0:
        print("\n".join(lines))

    status, reason = ("complete", "") if ok else ("invalid", check.source_reason)
    record = results.envelope(
        "flops",
        run_id,
        status,
        config,
        reason,
        flops=FlopsReport(
            **check.to_dict(),
            forward=fwd.to_dict(),
            train_step_member=member.train_step.to_dict(),
            xla_forward_flops_per_example=fwd_xla_ex,
            xla_notes=[n for n in (fwd_cost.note, step_cost.note) if n],
            gap_by_operator=explain_gap(member),
        ),
        peaks=FlopsPeaks(
            device_kind=device.device_kind,
            dtype=dtype,
            datasheet_flops_per_s=datasheet,
            measured_matmul_flops_per_s=measured,
        ),
        compile_s=step.compile_s,
    )
    path = results.write_record(config.results.results_dir, run_id, record)
    claimed.release()
    if path is not None:
        print(f"record: {path}")
    return 0 if ok else 1
