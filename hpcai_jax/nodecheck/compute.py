"""The rows about one device's own speed: STREAM Triad (the engine's BabelStream port) against
the datasheet memory bandwidth, and chained matmuls per dtype against the datasheet peak."""

from __future__ import annotations

import dataclasses
import time

import jax

from hpcai_jax.device_memory import device_memory_bytes
from hpcai_jax.flops.peaks import measure_matmul_peak_all, peak_flops_per_device
from hpcai_jax.nodecheck import expectations
from hpcai_jax.nodecheck.budget import Allotment
from hpcai_jax.nodecheck.memory import Room, capped_note
from hpcai_jax.nodecheck.rows import FAIL, PASS, WARN, Row, judge, skipped
from hpcai_jax.stream import measure_bandwidth
from hpcai_jax.stream.cache import largest_cache
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.datasheet import memory_bandwidth

MATMUL_DTYPES = ("float32", "bfloat16", "float16")
MAX_STREAM_TIMES = 100  # BabelStream's default
# Memory per device in units of one array's share: Triad's three arrays and one for their
# initial values and the validation.
STREAM_ARRAYS_HELD = 4
# Memory per device in units of one n×n matrix's bytes: the two operands, the loop's carry and
# its next value.
MATMULS_HELD = 4
MATMUL_DEFAULT = {"cpu": 1024}  # n when none is given: flops/peaks.py's defaults
MATMUL_ACCELERATOR = 8192
# Datasheet rows: a healthy device gets most of its datasheet figure (STREAM 80-90 % on HBM,
# large matmuls 60-90 %); under half is worth a look, under a tenth is broken.
DATASHEET_PASS, DATASHEET_WARN = 0.5, 0.1
# CPU rows: a shared 2-core machine is noisy; what matters is a figure many times off.
CPU_PASS, CPU_WARN = 0.3, 0.05


def _thresholds(backend: str) -> dict:
    if backend == "cpu":
        return {"pass_at": CPU_PASS, "warn_at": CPU_WARN}
    return {"pass_at": DATASHEET_PASS, "warn_at": DATASHEET_WARN}


def stream_array_mib(device) -> float:
    """MiB per (global) array: 4x the largest cache per device (BabelStream's rule), at least
    64 MiB per device on an accelerator (GPU L2s are 40-60 MiB) and at most 1/16 of its memory.
    On a CPU 4x the host's last-level cache per process (its devices share the cache)."""
    cache = largest_cache(device.platform, device.device_kind).bytes
    if device.platform == "cpu":  # one host cache per process's devices
        return 4 * cache * jax.process_count() / 2**20
    memory = device_memory_bytes(device) or 16 << 30
    per_device = min(max(4 * cache, 64 << 20), memory // 16)
    return per_device * jax.device_count() / 2**20


def stream_rows(backend: str, allotment: Allotment, room: Room | None = None) -> list[Row]:
    """STREAM Triad on every device at once (--stream_devices=all), float32; the per-device rate
    is the aggregate over the devices. Iterations (up to BabelStream's 100) are cut to fit half
    the allotment at the expected bandwidth; the rest is for the compile and the arrays' set-up.
    The arrays are cut to fit `room` (None: not checked), and the row says so."""
    device = jax.devices()[0]
    mib = stream_array_mib(device)
    cap = ""
    if room is not None:
        per_mib = STREAM_ARRAYS_HELD * 2**20 / jax.device_count()  # per device, per global MiB
        if not room.fits(mib * per_mib):
            fits = int(room.per_device() / per_mib)
            cap = "; " + capped_note("MiB per array", f"{mib:.0f}", fits, mib * per_mib, room)
            mib = float(fits)
    if backend == "cpu":
        expected = expectations.CPU["stream_triad_host"] / jax.local_device_count()
        source = expectations.CPU_SOURCE + " (host aggregate / local devices)"
        rate_guess = expectations.CPU["stream_triad_host"] * jax.process_count()
    else:
        sheet = memory_bandwidth(device.device_kind)
        expected, source = sheet if sheet else (None, "")
        rate_guess = (expected or 1e11) * jax.device_count()
    call_s = 3 * mib * 2**20 / rate_guess
    times = int(min(MAX_STREAM_TIMES, (allotment.agreed_left_s() * 0.5) / max(call_s, 1e-6)))
    if times < 2:
        return [skipped("stream triad per device", f"{allotment.seconds:.1f} s is too little")]
    config = StreamConfig(
        array_mib=mib,
        num_times=times,
        precision="float32",
        kernels="triad",
        devices="all",
        allow_small_arrays=True,  # a size cut to fit memory is measured, and marked below
    )
    config.validate()
    result = measure_bandwidth(config)
    triad = next(f for f in result.figures if f.key == "triad")
    note = f"{mib:.0f} MiB per array over {jax.device_count()} devices, best of {times - 1} calls"
    note += cap
    if not result.validation.passed:
        return [
            Row(
                "stream triad per device",
                FAIL,
                triad.per_device_gb_per_s * 1e9,
                expected,
                "B/s",
                source,
                "validation failed: " + "; ".join(result.validation.failures()),
            )
        ]
    source = source or f"no datasheet bandwidth for {device.device_kind!r}"
    return [_judged(result, triad, expected, source, note, backend)]


def _judged(result, triad, expected, source: str, note: str, backend: str) -> Row:
    """The Triad row against its expectation; arrays below the 4x-cache rule (cut to fit
    memory: a figure partly of a cache) are said in its note, and make a PASS a WARN."""
    if not result.size_check.ok:
        note += f"; the 4x-cache rule is broken: {result.size_check.message}"
    row = judge(
        "stream triad per device",
        triad.per_device_gb_per_s * 1e9,
        expected,
        unit="B/s",
        source=source,
        note=note,
        **_thresholds(backend),
    )
    if row.status == PASS and not result.size_check.ok:
        row = dataclasses.replace(row, status=WARN)
    return row


def matmul_size(size: int | None, backend: str, room: Room | None) -> tuple[int, str]:
    """n of the n×n matmuls: `size` or the default, halved until MATMULS_HELD float32 matrices
    fit `room`; and the cut's words ("" when none)."""
    n = size or MATMUL_DEFAULT.get(backend, MATMUL_ACCELERATOR)
    asked = n
    while room is not None and n > 128 and not room.fits(MATMULS_HELD * 4 * n * n):
        n //= 2
    if n == asked:
        return n, ""
    return n, capped_note("n", asked, n, MATMULS_HELD * 4 * asked * asked, room)


def matmul_rows(
    backend: str, allotment: Allotment, size: int | None = None, room: Room | None = None
) -> list[Row]:
    """Chained n×n matmuls on every local device at once, per dtype, against the datasheet
    peak of that dtype (flops/peaks.py); the time left is shared by the dtypes still to run.
    n is cut to fit `room` (None: not checked), and the rows say so."""
    device = jax.local_devices()[0]
    size, cap = matmul_size(size, backend, room)
    rows = []
    for i, dtype in enumerate(MATMUL_DTYPES):
        item = f"matmul {dtype} per device"
        share = allotment.left_s() / (len(MATMUL_DTYPES) - i)
        if share < 0.5:
            rows.append(skipped(item, f"{share:.1f} s left for it"))
            continue
        start = time.perf_counter()
        # Compile and warm-up take their part; the timed calls get a third of the share.
        peak = measure_matmul_peak_all(dtype, size=size, budget_s=share / 3)
        if backend == "cpu":
            expected = expectations.CPU["matmul_host"][dtype] / jax.local_device_count()
            source = expectations.CPU_SOURCE + " (host aggregate / local devices)"
        else:
            expected = peak_flops_per_device(device.device_kind, dtype)
            source = (
                "datasheet (hpcai_jax/flops/peaks.py)"
                if expected
                else (f"no datasheet peak for {device.device_kind!r}")
            )
        rows.append(
            judge(
                item,
                peak.per_device,
                expected,
                unit="FLOP/s",
                source=source,
                note=f"{peak.size}² in {time.perf_counter() - start:.1f} s"
                + (f"; {cap}" if cap else ""),
                **_thresholds(backend),
            )
        )
    return rows
