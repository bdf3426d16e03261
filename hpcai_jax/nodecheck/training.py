"""The rows about the training step on this backend: the flagship step's rate, FLOP/s against
the peak (MFU), memory and XLA's FLOP count against the analytic one; `unroll` against `vmap`
for several members per device; and whether float16, bfloat16 and int8 steps run and stay
finite. Every step here is the engine's own (engine/setup.py, engine/step.py) on the workload's
generated data, so nothing is read from disk.

Layouts: the flagship step runs one member per device (M = devices, P_degree = 1: the
collectives rows measure the links); the strategy comparison two per device at half the batch.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import time

import jax
import numpy as np

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import synthetic_batch
from hpcai_jax.device_memory import device_memory_bytes
from hpcai_jax.engine.member_map import auto_form
from hpcai_jax.flops.crosscheck import crosscheck
from hpcai_jax.flops.peaks import peak_flops_per_device
from hpcai_jax.nodecheck.budget import Allotment, agree
from hpcai_jax.nodecheck.memory import Room
from hpcai_jax.nodecheck.rows import FAIL, PASS, WARN, Row, judge, not_judged, skipped
from hpcai_jax.nodecheck.step_fit import DoesNotFit, Sizing, build_step
from hpcai_jax.run import member_figures
from hpcai_jax.telemetry.energy import read_energy
from hpcai_jax.telemetry.memory import memory_analysis
from hpcai_jax.xla_cost import xla_cost

# The workload's own generated data set: the check never reads one from disk.
GENERATED = {
    "image_classification": "synthetic",
    "regression": "friedman1",
    "extreme_weather": "synthetic_climate",
}
CHECK_DTYPES = ("float16", "bfloat16", "int8")
MAX_STEPS = 20
# FLOP/s of the step over the matmul rate this check measured in its dtype (MFU against the
# achieved peak, which a datasheet MFU sits below): ResNet-50 in bfloat16 reaches 30-50 % on
# recent GPUs and TPUs; under 5 % is worth a look, under 0.5 % is broken.
MFU_PASS, MFU_WARN = 0.05, 0.005
MEMORY_PASS, MEMORY_WARN = 0.9, 1.0  # of device memory: over 90 % leaves no room, over 100 % OOMs


def step_config(
    config: C.RunConfig,
    members_per_device: int = 1,
    batch_size: int | None = None,
    dtype: str | None = None,
    strategy: str | None = None,
    devices: int | None = None,
    member_map: str | None = None,
) -> C.RunConfig:
    """The configured workload, model and dtype on generated data, with `members_per_device`
    members on every device (of `devices`, default all) and P_degree = 1. The members'
    strategy and map are the flags' defaults (`MeshConfig`'s) unless given."""
    devices = devices or jax.device_count()
    chosen = {"member_strategy": strategy, "member_map": member_map}
    return dataclasses.replace(
        config,
        mesh=C.MeshConfig(
            ensemble_size=devices * members_per_device,
            members_per_device=members_per_device,
            parallel_degree=1,
            **{name: value for name, value in chosen.items() if value is not None},
        ),
        data=dataclasses.replace(config.data, dataset=GENERATED[config.model.workload]),
        model=dataclasses.replace(config.model, dtype=dtype or config.model.dtype),
        train=dataclasses.replace(
            config.train, batch_size=batch_size or config.train.batch_size, steps=MAX_STEPS + 1
        ),
    ).validate()


@dataclasses.dataclass(frozen=True)
class StepRun:
    config: C.RunConfig
    compiled: object
    lowered: object
    compile_s: float
    build_s: float  # set-up, initial state and compile: what another step of this size costs first
    step_s: list[float]  # timed steps, warm-up excluded
    finite: bool  # every member's loss and parameters finite after every step
    joules: float | None = None  # local devices' energy over the timed steps, where counted
    note: str = ""  # the batch's cut to fit the memory room, or ""

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.step_s) if self.step_s else None


def run_steps(
    config: C.RunConfig,
    left_s,
    max_steps: int = MAX_STEPS,
    min_steps: int = 0,
    compiler_options: dict | None = None,
    room: Room | None = None,
    may_rebuild=lambda compile_s: True,
    devices: list | None = None,
) -> StepRun:
    """Builds, compiles and runs `config`'s step on generated data: one warm-up step, then as
    many timed steps (min_steps to max_steps) as the seconds `left_s()` allow, agreed by every
    process. The step is compiled before its state exists, and with a `room` its batch is cut to
    fit it (step_fit.build_step; DoesNotFit when nothing fits). The local devices' energy
    counters are read around the timed steps."""
    build_start = time.perf_counter()
    built = build_step(config, room, compiler_options, may_rebuild, devices)
    config, setup = built.config, built.setup
    state = setup.init_state()
    batch = synthetic_batch(
        setup.workload.synthetic,
        setup.mesh,
        setup.layout.ensemble_size,
        config.train.batch_size,
        config.train.seed,
    )
    compiled, compile_s = built.build.compiled, built.build.seconds
    build_s = time.perf_counter() - build_start
    finite = True
    start = time.perf_counter()
    state, metrics = compiled(state, batch)
    finite &= _all_local(metrics.finite)
    warm_s = time.perf_counter() - start
    fit = int(agree(min(max_steps, max(0.0, 0.8 * left_s()) / max(warm_s, 1e-6))))
    steps = max(min_steps, fit)
    times = []
    energy_start = read_energy()
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
        finite &= _all_local(metrics.finite)
    energy_end = read_energy()
    joules = (
        (sum(energy_end.millijoules) - sum(energy_start.millijoules)) / 1e3
        if times and energy_start.available and energy_end.available
        else None
    )
    finite = agree(1.0 if finite else 0.0) > 0  # every process's members
    lowered = built.build.lowered
    return StepRun(config, compiled, lowered, compile_s, build_s, times, finite, joules, built.note)


def _all_local(flags) -> bool:
    """Whether this process's members' flags are all true (the step leaves them sharded over
    `ensemble`: each process reads its own)."""
    return all(bool(np.all(v)) for v in member_figures.local(flags).values())


def measured_matmul(rows: list[Row]) -> dict[str, float]:
    """FLOP/s per device by dtype that this check's matmul rows measured (compute.matmul_rows's
    items); a dtype whose row measured nothing is absent."""
    found = (re.fullmatch(r"matmul (\w+) per device", r.item) for r in rows)
    return {m[1]: r.measured for m, r in zip(found, rows, strict=True) if m and r.measured}


# The least share of an item's time its timed steps are sized for, when the build estimate
# takes all of it (the estimate is a guess until the flagship step is built).
STEPS_MIN_SHARE = 0.25


def steps_seconds(left_s: float, builds_s: float) -> float:
    """The seconds the timed steps are sized for: what is left after the builds, at least
    STEPS_MIN_SHARE of it all."""
    return max(left_s - builds_s, STEPS_MIN_SHARE * left_s, 0.0)


def sized_run(
    cfg: C.RunConfig, seconds: float, sizing: Sizing | None, calls: int, may_rebuild, **steps
) -> tuple[StepRun | None, str]:
    """`run_steps` at the batch `sizing` allows: cut so that `calls` steps fit `seconds`, then
    to fit the memory room; (None, why) when nothing fits. The cuts' notes come back for the
    row. Without `sizing`, `run_steps` as it is."""
    time_cut, room = "", None
    if sizing is not None:
        cfg, time_cut = sizing.cap_for_time(cfg, seconds, calls)
        room = sizing.room
    try:
        run = run_steps(cfg, room=room, may_rebuild=may_rebuild, **steps)
    except DoesNotFit as e:
        return None, str(e)
    return run, "; ".join(n for n in (time_cut, run.note) if n)


def train_rows(
    config: C.RunConfig,
    allotment: Allotment,
    estimate_s: float,
    max_steps: int = MAX_STEPS,
    sizing: Sizing | None = None,
    matmul: dict[str, float] | None = None,
) -> tuple[list[Row], dict]:
    """The flagship step's rows, and the record's section (the step's figures, for the input row
    and the strategy item's compile estimate). Skipped when `estimate_s` (a compile and a few
    steps) does not fit, or when not one example fits the memory room (`sizing`). `matmul`: the
    FLOP/s per device this check measured by dtype (`measured_matmul`), the MFU's denominator."""
    items = (
        "train step per device",
        "train step FLOP/s per device",
        "train step memory per device",
        "XLA / analytic FLOPs",
    )
    if not allotment.claim(estimate_s):
        why = f"{allotment.ceiling_s:.0f} s at most, a build needs about {estimate_s:.0f} s"
        return [skipped(i, why) for i in items], {}
    run, cut = sized_run(
        step_config(config),
        steps_seconds(allotment.agreed_left_s(), estimate_s),
        sizing,
        3,
        allotment.claim,
        left_s=allotment.left_s,
        max_steps=max_steps,
        min_steps=2,
    )
    if run is None:
        return [skipped(i, cut) for i in items], {}
    cfg = run.config
    layout_devices = jax.device_count()
    m, b = cfg.mesh.ensemble_size, cfg.train.batch_size
    cost = xla_cost(run.compiled, layout_devices, run.lowered)
    flops = crosscheck(cfg, cost.flops)
    median = run.median_s
    rate = m * b / median / layout_devices if median else None
    flop_rate = flops.train_step_flops / median / layout_devices if median else None
    section = _train_section(run, flops, rate, flop_rate)
    memory = memory_analysis(run.compiled)
    section["memory"] = memory
    rows = [
        _rate_row(items[0], run, rate, cut),
        _mfu_row(items[1], cfg.model.dtype, flop_rate, matmul or {}),
        _memory_row(items[2], memory),
        _crosscheck_row(items[3], flops),
    ]
    return rows, section


def _train_section(run: StepRun, flops, rate: float | None, flop_rate: float | None) -> dict:
    """The record's section for the flagship step: its configuration and figures."""
    cfg = run.config
    return {
        "config": {
            "model": cfg.model.model,
            "dtype": cfg.model.dtype,
            "ensemble_size": cfg.mesh.ensemble_size,
            "batch_size": cfg.train.batch_size,
            "image_size": cfg.data.image_size,
        },
        "compile_s": run.compile_s,
        "build_s": run.build_s,
        "step_s": run.step_s,
        "examples_per_s_per_device": rate,
        "flops_per_step": flops.train_step_flops,
        "flops_source": flops.train_step_flops_source,
        "flops_per_s_per_device": flop_rate,
        "xla_over_analytic": flops.xla_over_analytic,
        "finite": run.finite,
        "joules": run.joules,
    }


def _rate_row(item: str, run: StepRun, rate: float | None, cut: str) -> Row:
    """The step's examples per second per device: a FAIL where a loss went non-finite."""
    cfg = run.config
    m, b = cfg.mesh.ensemble_size, cfg.train.batch_size
    note = f"{cfg.model.model} {cfg.model.dtype}, {m} members x {b}, {len(run.step_s)} timed steps"
    note += f"; {cut}" if cut else ""
    if not run.finite:
        return Row(item, FAIL, rate, None, "ex/s", "", note + "; NON-FINITE loss")
    if rate is None:
        return skipped(item, "no time left for a timed step after the compile")
    return Row(item, PASS, rate, None, "ex/s", "", note)


def _mfu_row(item: str, dtype: str, flop_rate: float | None, matmul: dict[str, float]) -> Row:
    """The step's FLOP/s per device over the matmul rate this check measured in `dtype` (MFU
    against the achieved peak). Without a measured matmul: an accelerator's datasheet peak, said
    so; on a CPU not judged (the reference machine's figure says nothing of this host's peak)."""
    kind = "float32" if dtype == "int8" else dtype  # int8 steps compute around float32
    thresholds = {"unit": "FLOP/s", "pass_at": MFU_PASS, "warn_at": MFU_WARN}
    if matmul.get(kind):
        source = f"this check's measured matmul {kind} per device"
        note = f"ratio = MFU against the matmul {kind} rate this check measured"
        return judge(item, flop_rate, matmul[kind], source=source, note=note, **thresholds)
    if jax.default_backend() == "cpu":
        why = f"not judged: no matmul {kind} row measured, and a CPU has no datasheet peak"
        return not_judged(item, flop_rate, "FLOP/s", why)
    peak = peak_flops_per_device(jax.devices()[0].device_kind, kind)
    source = f"datasheet {kind} peak (flops/peaks.py)"
    note = f"ratio = MFU against the datasheet: no matmul {kind} row measured"
    return judge(item, flop_rate, peak, source=source, note=note, **thresholds)


def _memory_row(item: str, memory: dict | None) -> Row:
    """The compiled step's bytes on a device (XLA's memory analysis) over the device's memory."""
    used = (
        memory["argument_bytes"]
        + memory["output_bytes"]
        - memory["alias_bytes"]
        + memory["temp_bytes"]
        if memory
        else None
    )
    return judge(
        item,
        used,
        device_memory_bytes(jax.local_devices()[0]),
        unit="B",
        source="device memory (allocator limit; CPU: host / devices)",
        pass_at=MEMORY_PASS,
        warn_at=MEMORY_WARN,
        higher_is_better=False,
    )


def _crosscheck_row(item: str, flops) -> Row:
    """XLA's FLOP count of the step over the analytic walk's."""
    ratio = flops.xla_over_analytic
    if ratio is None:
        return Row(
            item,
            WARN,
            None,
            1.0,
            "",
            "analytic walk (flops/crosscheck.py)",
            "XLA gave no FLOP count: FLOPS use the analytic count",
        )
    ok = flops.crosscheck_ok
    return Row(
        item,
        PASS if ok else WARN,
        ratio,
        1.0,
        "",
        f"analytic walk, tolerance ±{flops.tolerance:.0%}",
        ""
        if ok
        else "XLA's count is off on this backend: FLOPS use the analytic one (--flops_source=auto)",
    )


def item_devices() -> list | None:
    """The devices the strategy and dtype items build on: one on a CPU host of one process (its
    devices share the host's cores and memory, so one device answers the same question at an
    eighth of the work for eight), else all of them (None)."""
    if jax.default_backend() == "cpu" and jax.process_count() == 1:
        return jax.local_devices()[:1]
    return None


def strategy_rows(
    config: C.RunConfig, allotment: Allotment, estimate_s: float, sizing: Sizing | None = None
) -> tuple[list[Row], dict]:
    """`unroll` against `vmap` with two members per device at half the batch (or the batch that
    fits, the same for both); the winner (fewer seconds per example) goes in the record for
    --member_strategy=auto --check_record."""
    item = "member strategy, 2 per device"
    # Two builds, each of twice the members at half the batch.
    need = 2 * estimate_s
    if not allotment.claim(need):
        why = f"{allotment.ceiling_s:.0f} s at most, two builds of twice the members need ~{need:.0f} s"
        return [skipped(item, why)], {}
    devices = item_devices()
    cfg = step_config(
        config,
        members_per_device=2,
        batch_size=max(1, config.train.batch_size // 2),
        devices=len(devices) if devices else None,
    )
    runs, cuts = {}, []
    for i, strategy in enumerate(("unroll", "vmap")):
        cfg = dataclasses.replace(cfg, mesh=dataclasses.replace(cfg.mesh, member_strategy=strategy))
        left = lambda i=i: allotment.left_s() / (2 - i)  # noqa: E731
        seconds = steps_seconds(allotment.agreed_left_s(), (2 - i) * estimate_s) / (2 - i)
        run, cut = sized_run(
            cfg,
            seconds,
            sizing,
            2,
            allotment.claim,
            left_s=left,
            max_steps=5,
            min_steps=1,
            devices=devices,
        )
        if run is None:
            return [skipped(item, cut)], {}
        runs[strategy], cfg = run, run.config  # the second runs at the first's batch
        cuts.append(cut)
    return _strategy_verdict(config, item, runs, "; ".join(dict.fromkeys(c for c in cuts if c)))


def _strategy_verdict(
    config: C.RunConfig, item: str, runs: dict[str, StepRun], cut: str
) -> tuple[list[Row], dict]:
    """The faster strategy per example, against the backend's default."""
    medians = {s: r.median_s for s, r in runs.items()}
    if any(v is None for v in medians.values()) or not all(r.finite for r in runs.values()):
        return [Row(item, WARN, note=f"no timed steps or non-finite: {medians}")], {}
    per_example = {s: medians[s] / r.config.train.batch_size for s, r in runs.items()}
    winner = min(per_example, key=per_example.get)
    loser = "vmap" if winner == "unroll" else "unroll"
    backend = jax.default_backend()
    default = auto_form(backend, strategy=True)
    section = {
        "winner": winner,
        "backend": backend,
        "device_kind": jax.devices()[0].device_kind,
        "members_per_device": 2,
        "batch_size": runs[winner].config.train.batch_size,
        "model": config.model.model,
        "step_s": medians,
    }
    note = f"{winner} wins: {medians[winner]:.4g} s vs {loser} {medians[loser]:.4g} s per step" + (
        ""
        if winner == default
        else f"; the {backend} default is {default}: train with --check_record=<this record>"
    )
    note += f"; {cut}" if cut else ""
    status = PASS if winner == default else WARN
    ratio = per_example[loser] / per_example[winner]
    return [Row(item, status, ratio, 1.0, "x faster", "", note)], section


def dtype_rows(
    config: C.RunConfig, allotment: Allotment, estimate_s: float, sizing: Sizing | None = None
) -> list[Row]:
    """Each of float16, bfloat16 and int8: the configured model, one member per device
    (`item_devices`) at a batch of at most 8 (or what fits the time and the memory), three steps
    (fewer when the time runs out after the first); PASS when every loss and parameter stays
    finite."""
    rows = []
    for i, dtype in enumerate(CHECK_DTYPES):
        item = f"{dtype} steps finite"
        if not allotment.claim(estimate_s):
            rows.append(
                skipped(
                    item,
                    f"{max(0.0, allotment.left_s()):.0f} s left, a build needs about "
                    f"{estimate_s:.0f} s",
                )
            )
            continue
        devices = item_devices()
        cfg = step_config(
            config,
            batch_size=min(8, config.train.batch_size),
            dtype=dtype,
            devices=len(devices) if devices else None,
        )
        left = len(CHECK_DTYPES) - i  # this dtype and those after it share what is left
        seconds = steps_seconds(allotment.agreed_left_s(), left * estimate_s) / left
        run, cut = sized_run(
            cfg,
            seconds,
            sizing,
            3,
            allotment.claim,
            left_s=lambda left=left: allotment.left_s() / left,
            max_steps=2,
            devices=devices,
        )
        if run is None:
            rows.append(skipped(item, cut))
            continue
        rows.append(
            Row(
                item,
                PASS if run.finite else FAIL,
                float(len(run.step_s) + 1),
                3.0,
                "steps",
                "",
                f"{run.config.model.model}, batch {run.config.train.batch_size}, compiled in "
                f"{run.compile_s:.1f} s"
                + ("" if len(run.step_s) == 2 else "; fewer steps: the item's time ran out")
                + ("" if run.finite else "; NON-FINITE loss or parameters")
                + (f"; {cut}" if cut else ""),
            )
        )
    return rows
