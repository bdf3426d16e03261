"""The acceptance's measuring groups. Each takes the run's `Context` and its time allotment and
returns its items; the node check's own code measures wherever it already does (STREAM, matmul,
the training step, dtypes), so the two commands judge alike.

Layouts: every training item runs one member per device (M = devices, P_degree = 1), or m
members per device at 1/m of the batch, so that a device does the same images per step in
every variant and the variants compare directly.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
from pathlib import Path

import jax

from hpcai_jax import gpu_settings
from hpcai_jax.acceptance.items import FAIL, PASS, WARN, Item, from_row
from hpcai_jax.acceptance.sizes import Sizes
from hpcai_jax.device_memory import device_memory_bytes
from hpcai_jax.nodecheck import compute, expectations, inputs, system, training
from hpcai_jax.nodecheck.budget import Allotment
from hpcai_jax.nodecheck.rows import NA, skipped
from hpcai_jax.nodecheck.runner import measure_collectives
from hpcai_jax.settings import Settings
from hpcai_jax.stream import measure_bandwidth
from hpcai_jax.stream.cache import largest_cache
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.datasheet import memory_bandwidth

# STREAM on HBM reaches 80-93 % of the datasheet; under 70 % is worth a look, under 40 % broken.
STREAM_PASS, STREAM_WARN = 0.7, 0.4
# A first guess of one training step's build (set-up, compile), before one is timed.
BUILD_GUESS_S = {"cpu": 10.0, "gpu": 60.0, "tpu": 60.0}


@dataclasses.dataclass
class Context:
    """What the groups share: the sizes, the base configuration, and what earlier groups
    measured (the flagship step's rate feeds the input item, its build time the estimates)."""

    sizes: Sizes
    base: Settings
    accelerator: bool  # a real run: an accelerator is expected
    backend: str
    step_rate: float | None = None  # images/s per device of the 1-member step
    build_s: float | None = None  # the 1-member step's build (set-up + compile)
    matmul: dict[str, float] = dataclasses.field(default_factory=dict)  # measured FLOP/s by dtype
    out_dir: Path | None = None  # OUT_DIR, for a group's files beside acceptance.json

    def build_estimate_s(self) -> float:
        return self.build_s or BUILD_GUESS_S.get(self.backend, 60.0)


def base_config(sizes: Sizes, results_dir: str) -> Settings:
    """The flagship classifier on generated data, checked like any configuration."""
    c = Settings()
    return dataclasses.replace(
        c,
        mode="check",
        data=dataclasses.replace(
            c.data, dataset="synthetic", image_size=sizes.image_size, num_classes=1000
        ),
        model=dataclasses.replace(
            c.model, workload="image_classification", model=sizes.model, dtype=sizes.dtype
        ),
        train=dataclasses.replace(c.train, batch_size=sizes.batch_size),
        results=dataclasses.replace(c.results, results_dir=results_dir),
    ).validate()


def _rows(group: str, rows) -> list[Item]:
    return [from_row(group, r) for r in rows]


def stream_config(ctx: Context) -> StreamConfig:
    """The STREAM run of the acceptance on one device (the babelstream group runs the same)."""
    device = jax.devices()[0]
    if ctx.sizes.stream_mib is not None:
        mib = ctx.sizes.stream_mib
    else:  # 4x the last-level cache per array at least, 1 GiB if it fits in 1/16 of memory
        cache = largest_cache(device.platform, device.device_kind).bytes
        memory = device_memory_bytes(device) or 16 << 30
        mib = max(4 * cache, min(1 << 30, memory // 16)) / 2**20
    config = StreamConfig(
        array_mib=mib,
        num_times=ctx.sizes.stream_times,
        precision=ctx.sizes.stream_precision,
        kernels="all",
        devices="one",
        allow_small_arrays=ctx.sizes.stream_mib is not None,  # --smoke's toy size
    )
    config.validate()
    return config


def stream_items(ctx: Context, allotment: Allotment) -> list[Item]:
    """BabelStream's five kernels on one device, each against the datasheet bandwidth."""
    device = jax.devices()[0]
    config = stream_config(ctx)
    mib = config.array_mib
    result = measure_bandwidth(config)
    if device.platform == "cpu":
        expected = expectations.CPU["stream_triad_host"]
        source = expectations.CPU_SOURCE + " (Triad, host aggregate)"
        thresholds = (compute.CPU_PASS, compute.CPU_WARN)
    else:
        sheet = memory_bandwidth(device.device_kind)
        expected, source = sheet if sheet else (None, f"no datasheet for {device.device_kind!r}")
        thresholds = (STREAM_PASS, STREAM_WARN)
    failures = "; ".join(result.validation.failures()) if not result.validation.passed else ""
    items = []
    for figure in result.figures:
        rate = figure.gb_per_s * 1e9
        note = (
            f"{mib:.0f} MiB per array, {config.precision}, best of {config.num_times - 1} "
            f"samples of {result.burst} call(s) back to back"
        )
        if failures:
            verdict, note = FAIL, f"validation failed: {failures}"
        elif not expected:
            verdict = WARN
        else:
            ratio = rate / expected
            verdict = PASS if ratio >= thresholds[0] else WARN if ratio >= thresholds[1] else FAIL
        items.append(
            Item(
                "stream",
                f"stream {figure.key}",
                rate,
                "B/s",
                f"{expected / 1e9:.4g} GB/s ({source})" if expected else source,
                verdict,
                note,
                expected,
            )
        )
    return items


def matmul_items(ctx: Context, allotment: Allotment) -> list[Item]:
    cap = ctx.sizes.matmul_budget_s
    if cap is not None and allotment.seconds > cap:  # the peak routine fills what it is given
        allotment = dataclasses.replace(allotment, seconds=cap)
    rows = compute.matmul_rows(ctx.backend, allotment, size=ctx.sizes.matmul_size)
    ctx.matmul = training.measured_matmul(rows)
    return _rows("matmul", rows)


def node_items(ctx: Context, allotment: Allotment) -> list[Item]:
    """The node check's host, energy and collective rows (collectives need two devices)."""
    info = system.describe()
    rows = system.host_rows(info) + system.energy_rows()
    rows += measure_collectives(allotment, info["device_kind"], info["backend"])[0]
    return _rows("node", rows)


def _energy_item(group: str, section: dict) -> Item:
    """Joules per image over the timed steps, where the devices count energy."""
    steps, joules = len(section["step_s"]), section.get("joules")
    if joules is None:
        why = system.energy_rows()[0].note if steps else "no timed steps"
        return Item(group, f"{group} energy per image", None, "J", "", WARN, why)
    local = jax.local_device_count() / jax.device_count()  # the counters are this host's
    images = local * section["config"]["ensemble_size"] * section["config"]["batch_size"] * steps
    per_image = joules / images
    return Item(
        group,
        f"{group} energy per image",
        per_image,
        "J",
        "",
        PASS if per_image > 0 else FAIL,
        f"NVML, local devices, {steps} timed steps",
    )


def train_items(ctx: Context, allotment: Allotment) -> list[Item]:
    """The flagship step at one member per device: rate, MFU, memory, XLA against the analytic
    FLOPs (the node check's rows), and the energy per image."""
    rows, section = training.train_rows(
        ctx.base, allotment, ctx.build_estimate_s(), ctx.sizes.max_steps, matmul=ctx.matmul
    )
    items = _rows("train", rows)
    if section:
        ctx.step_rate = section["examples_per_s_per_device"]
        ctx.build_s = section["build_s"]
        items.append(_energy_item("train", section))
    return items


def dtype_items(ctx: Context, allotment: Allotment) -> list[Item]:
    base = dataclasses.replace(
        ctx.base, train=dataclasses.replace(ctx.base.train, batch_size=ctx.sizes.dtype_batch_size)
    )
    return _rows("dtypes", training.dtype_rows(base, allotment, ctx.build_estimate_s()))


def detector_items(ctx: Context, allotment: Allotment) -> list[Item]:
    """The detector at full size, one member per device: the node check's step rows."""
    c = ctx.base
    config = dataclasses.replace(
        c,
        data=dataclasses.replace(
            c.data,
            dataset="synthetic_climate",
            image_size=ctx.sizes.detector_image_size,
            num_classes=0,  # the data set's (4); the classifier's 1000 would contradict it
        ),
        model=dataclasses.replace(
            c.model, workload="extreme_weather", model=ctx.sizes.detector_model
        ),
        train=dataclasses.replace(c.train, batch_size=ctx.sizes.detector_batch_size),
    ).validate()
    rows, _ = training.train_rows(
        config, allotment, 2 * ctx.build_estimate_s(), ctx.sizes.max_steps
    )
    return [dataclasses.replace(from_row("detector", r), name=f"detector {r.item}") for r in rows]


def _decode_for(args) -> tuple[int, float]:
    """Worker: decodes the JPEGs round and round for `seconds`; (images, seconds taken)."""
    encoded, size, seconds = args
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        inputs.train_transform(encoded[count % len(encoded)], size, count).copy()
        count += 1
    return count, time.perf_counter() - start


def input_items(ctx: Context, allotment: Allotment) -> list[Item]:
    """The training transform (JPEG crop decode, resize, flip) on every core of the host at
    once, against the images/s the measured step consumes on this host's devices."""
    name = "input images/s on all host cores"
    cores = system.host_cores()
    window = min(ctx.sizes.input_window_s, allotment.left_s() / 3)
    if window < 0.5:
        return [from_row("input", skipped(name, f"{allotment.left_s():.1f} s left"))]
    import numpy as np

    rng = np.random.default_rng(0)
    encoded = [inputs.imagenet_like_jpeg(rng, i) for i in range(ctx.sizes.input_images)]
    with multiprocessing.get_context("spawn").Pool(cores) as pool:
        done = pool.map(_decode_for, [(encoded, ctx.sizes.image_size, window)] * cores, 1)
    rate = sum(n / s for n, s in done)
    needed = ctx.step_rate * jax.local_device_count() if ctx.step_rate else None
    note = f"{cores} processes for {window:.1f} s, {len(encoded)} ImageNet-like JPEGs to {ctx.sizes.image_size}²"
    if ctx.backend == "cpu":
        verdict, note = NA, note + "; not judged on a CPU (the step and the decode share cores)"
    elif needed is None:
        verdict, note = WARN, note + "; no step rate measured to compare with"
    else:
        verdict = PASS if rate >= needed else WARN
        if rate < needed:
            note += f"; the host starves its devices: {rate / needed:.2f} of what they consume"
    return [
        Item(
            "input",
            name,
            rate,
            "ex/s",
            "the step's images/s x local devices" if needed else "",
            verdict,
            note,
            needed,
        )
    ]


def settings_items(ctx: Context, allotment: Allotment) -> list[Item]:
    """The GPU settings in force, and the one-device step with XLA's command buffers off
    against on (the other XLA settings act on collectives, which one device has none of)."""
    env = gpu_settings.environment()
    items = [
        Item(
            "settings",
            "environment for XLA, the GPU client and NCCL",
            f"{len(env)} variables",
            "",
            "docs/gpu_settings.md",
            PASS,
            "; ".join(f"{k}={v}" for k, v in env.items()),
        )
    ]
    name = "step with command buffers off"
    if ctx.backend != "gpu":
        return items + [
            from_row("settings", skipped(name, f"a GPU setting; this is {ctx.backend}"))
        ]
    if not ctx.step_rate or not allotment.claim(ctx.build_estimate_s()):
        why = "no 1-member step to compare with" if not ctx.step_rate else "no time left"
        return items + [from_row("settings", skipped(name, why))]
    options = gpu_settings.compiler_options([gpu_settings.BY_NAME["no_command_buffers"]])
    cfg = training.step_config(ctx.base)
    run = training.run_steps(
        cfg, allotment.left_s, ctx.sizes.max_steps, 2, compiler_options=options
    )
    rate = ctx.sizes.batch_size / run.median_s if run.median_s else None
    return items + [
        Item(
            "settings",
            name,
            rate,
            "ex/s",
            "the 1-member step as configured",
            PASS if run.finite and rate else WARN,
            f"--{gpu_settings.BY_NAME['no_command_buffers'].key}= for this compile only",
            ctx.step_rate,
        )
    ]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
