"""A packed STREAM run's figures re-derived from the few the run measured (each kernel's
fastest, slowest and mean call) and its configuration, never read as given: bytes from the
kernel's byte weight and the arrays, bandwidths, per-device figures, the figure of merit and
`metrics`, the gold values, tolerances and verdicts of validation, the size rule from the
cache; then held to what the devices make possible, and its stdout rendered again with the
stream module's own code (stream/report.py) and compared line for line. docs/submission.md,
"BabelStream runs", lists each rule and what stays unverifiable."""

from __future__ import annotations

import dataclasses
import math
import re
from types import SimpleNamespace

import numpy as np

from hpcai_jax.errors import UsageError
from hpcai_jax.records.schema import to_dict
from hpcai_jax.records.stream import Kernel, StreamRecord
from hpcai_jax.stream import acceptance as stream_acceptance
from hpcai_jax.stream import cache as stream_cache
from hpcai_jax.stream import report, validate
from hpcai_jax.stream.datasheet import memory_bandwidth
from hpcai_jax.stream.kernels import DOT_EXTRA_BYTES, KERNELS, RUN_ORDERS
from hpcai_jax.stream.placement import placement_line

ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2}
MODES = ("one", "all", "each")
# No kernel above the faster of Copy and Mul (one array read, one written) by more than this:
# BabelStream counts no write-allocate traffic, which flatters the kernels that read more than
# they write (Add, Triad, Dot) by up to 1.5 against them on the same memory; 2 leaves room for
# a busy host's noise.
COPY_FACTOR = 2.0
# ... once each kernel ran this many times: the best of fewer calls on a busy host can be any
# kernel's, of 2 or 3 the tests' runs measured Add at 2.8 × Copy.
RATIO_CALLS = 10
# The fastest plausible memory bandwidth one logical CPU core drives (a server core sustains
# 10-30 GB/s, a core of a high-bandwidth-memory CPU well under this); a host's ceiling is its
# logical cores times this, the core count read from the record's implementation line.
CPU_CORE_GB_PER_S = 50.0
RELATIVE = 1e-9  # re-derived floats against the record's: the same operations, so equal
# The most calls of a kernel whose gold values check replays (a second or two on a host): a run of
# 100 (BabelStream's default) to 10,000 is far below it, a hostile 10^12 would never end.
MAX_REPLAYS = 1_000_000
MEAN_RELATIVE = 1e-6  # a mean's rounding (`each` gathers the calls' figures in float32)


class Found:
    """Failure lines of one STREAM run, `run ID: stream/ID.json FIELD ...`."""

    def __init__(self, record: StreamRecord):
        self.run, self.lines = record.run_id, []
        self.file = f"stream/{record.run_id}.json"

    def fail(self, text: str) -> None:
        self.lines.append(f"run {self.run}: {text}")

    def field(self, name: str, got, want, how: str) -> None:
        if not _same(got, want):
            self.fail(f"{self.file} {name} {_text(got)} != {_text(want)} ({how})")


def _same(got, want) -> bool:
    if isinstance(want, float) and type(got) in (int, float):
        return math.isclose(got, want, rel_tol=RELATIVE, abs_tol=0.0) or got == want
    return type(got) is type(want) and got == want if isinstance(want, bool) else got == want


def _text(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def spanned(record: StreamRecord) -> int:
    """Devices one measurement's arrays span: one with `each` (every device alone)."""
    return 1 if record.placement.mode == "each" else record.placement.num_devices


def _figures(kernels: dict[str, Kernel], devices: int) -> list[report.KernelFigures]:
    return [
        report.KernelFigures(
            key, k.label, k.bytes_moved, k.min_s, k.max_s, k.avg_s, devices, k.xla_bytes_accessed
        )
        for key, k in kernels.items()
    ]


def device_figures(record: StreamRecord) -> list[report.DeviceFigures] | None:
    if record.per_device is None:
        return None
    return [
        report.DeviceFigures(
            d.device_id, d.process_index, _figures(d.kernels, 1), d.validation_passed
        )
        for d in record.per_device
    ]


def headline(record: StreamRecord) -> list[report.KernelFigures]:
    """The figures the record's headline must hold: its kernels', or with `each` the slowest
    device's per kernel, re-chosen from every device's."""
    devices = device_figures(record)
    if devices:
        return report.slowest(devices)
    return _figures(record.kernels, spanned(record))


def identity(f: Found, r: StreamRecord) -> bool:
    """The run set and its configuration: False where the rest cannot be re-derived."""
    conf = (r.config or {}).get("stream") or {}
    f.field("mode", r.mode, "stream", "a STREAM record")
    f.field("status", r.status, "complete", "pack takes complete runs")
    f.field("run.kernels", r.run.kernels, conf.get("kernels"), "config.stream.kernels")
    f.field("run.num_times", r.run.num_times, conf.get("num_times"), "config.stream.num_times")
    f.field("array.precision", r.array.precision, conf.get("precision"), "config.stream")
    f.field("placement.mode", r.placement.mode, conf.get("devices"), "config.stream.devices")
    if r.run.kernels not in RUN_ORDERS or r.array.precision not in ITEMSIZE:
        f.fail(f"{f.file} run.kernels or array.precision: not one hpcai_jax runs")
        return False
    if r.placement.mode not in MODES:
        f.fail(f"{f.file} placement.mode {r.placement.mode!r}: expected one, all or each")
        return False
    order = list(RUN_ORDERS[r.run.kernels])
    f.field("run.order", r.run.order, order, f"the run order of --stream_kernels={r.run.kernels}")
    f.field("kernels", list(r.kernels), order, "the kernels of run.order, in order")
    for i, d in enumerate(r.per_device or []):
        f.field(f"per_device[{i}].kernels", list(d.kernels), order, "the run's kernels")
    same = all(list(d.kernels) == order for d in r.per_device or [])
    if r.run.num_times < 2:
        f.fail(f"{f.file} run.num_times {r.run.num_times}: BabelStream needs at least 2")
    replays = r.run.num_times * (r.run.burst if r.run.kernels == "nstream" else 1)
    if replays > MAX_REPLAYS:
        f.fail(
            f"{f.file} run.num_times {r.run.num_times}: over the {MAX_REPLAYS} calls check replays"
        )
    return list(r.kernels) == order and same and r.run.num_times >= 2 and replays <= MAX_REPLAYS


def arrays(f: Found, r: StreamRecord) -> None:
    """Elements, element size and bytes agree, and the configuration's explicit size."""
    a, conf = r.array, (r.config or {}).get("stream") or {}
    f.field("array.itemsize", a.itemsize, ITEMSIZE[a.precision], f"the size of {a.precision}")
    f.field(
        "array.bytes_per_array", a.bytes_per_array, a.elements * a.itemsize, "elements × itemsize"
    )
    f.field("array.bytes_total", a.bytes_total, 3 * a.elements * a.itemsize, "3 arrays")
    if conf.get("array_size"):
        f.field("array.elements", a.elements, conf["array_size"], "config.stream.array_size")
    if a.elements % spanned(r):
        f.fail(f"{f.file} array.elements {a.elements}: not divisible over {spanned(r)} devices")


def placement(f: Found, r: StreamRecord) -> None:
    """Devices, their kind and platform, and the processes, as provenance states them."""
    p, prov = r.placement, r.provenance
    f.field("placement.devices", len(p.devices), p.num_devices, "one per placement.num_devices")
    want = 1 if p.mode == "one" else prov.device_count
    f.field("placement.num_devices", p.num_devices, want, f"--stream_devices={p.mode}, provenance")
    f.field("placement.process_count", p.process_count, prov.process_count, "provenance")
    f.field("placement.device_kind", p.device_kind, prov.device_kind, "provenance.device_kind")
    f.field("placement.platform", p.platform, prov.backend, "provenance.backend")
    kind = p.device_kind.lower()
    platform = "cpu" if kind == "cpu" else "tpu" if "tpu" in kind else "gpu"
    f.field("placement.platform", p.platform, platform, f"the platform of {p.device_kind!r}")
    jax_version = (prov.versions or {}).get("jax")
    head = f"JAX {jax_version} ({p.platform}: "
    if not r.run.implementation.startswith(head):
        f.fail(f"{f.file} run.implementation {r.run.implementation!r}: not {head}...)")
    elif p.platform != "cpu":
        f.field("run.implementation", r.run.implementation, f"{head}{p.device_kind})", "its kind")
    if p.mode == "each":
        count = len(r.per_device or [])
        f.field("per_device", count, p.num_devices, "every device measured alone, with `each`")
    elif r.per_device is not None:
        f.fail(f"{f.file} per_device: present without --stream_devices=each")


def processes(f: Found, r: StreamRecord) -> None:
    """The hosts provenance lists, and with `one` every process's own best rates: process 0's
    the record's kernels' (gathered in float32), none beyond its device's bound."""
    prov, per = r.provenance, r.per_process_gb_per_s
    hosts = prov.hosts or []
    f.field("provenance.hosts", len(hosts), prov.process_count, "one per process")
    f.field("provenance.number_of_nodes", prov.number_of_nodes, len(set(hosts)), "its hosts")
    if r.placement.mode != "one":
        if per is not None:
            f.fail(f"{f.file} per_process_gb_per_s: present without --stream_devices=one")
        return
    if per is None or len(per) != r.placement.process_count:
        f.fail(f"{f.file} per_process_gb_per_s: not one entry per process of --stream_devices=one")
        return
    rate, source = _ceiling(r)
    for i, entry in enumerate(per):
        f.field(f"per_process_gb_per_s[{i}]", sorted(entry), sorted(r.kernels), "the run's kernels")
        for key, gbs in entry.items():
            if rate is not None and gbs * 1e9 > rate:
                f.fail(f"{f.file} per_process_gb_per_s[{i}].{key} {gbs:.6g} GB/s > {source}")
    for key, gbs in per[0].items():
        if key in r.kernels:
            want = float(np.float32(r.kernels[key].gb_per_s))
            f.field(f"per_process_gb_per_s[0].{key}", gbs, want, "process 0's, in float32")


def kernels(f: Found, r: StreamRecord) -> None:
    """Each kernel's bytes from its byte weight, its bandwidth from its fastest call, its calls
    ordered, XLA's bytes its own; with `each`, every device's and the slowest chosen."""
    _kernel_set(f, "kernels", r.kernels, r, spanned(r))
    for i, d in enumerate(r.per_device or []):
        _kernel_set(f, f"per_device[{i}].kernels", d.kernels, r, 1)
    for fig in headline(r) if r.per_device else ():
        k = r.kernels[fig.key]
        got = (k.min_s, k.max_s, k.avg_s)
        f.field(
            f"kernels.{fig.key}", got, (fig.min_s, fig.max_s, fig.avg_s), "the slowest device's"
        )
    mismatches = [
        f"{KERNELS[fig.key].name}: BabelStream counts {fig.bytes_moved} bytes, XLA "
        f"{fig.xla_bytes_accessed:.0f}"
        for fig in _figures(r.kernels, spanned(r))
        if fig.xla_bytes_accessed is not None
        and abs(fig.xla_bytes_accessed - fig.bytes_moved) > _slack(fig.key, spanned(r))
    ]
    f.field("byte_weight_mismatches", r.byte_weight_mismatches, mismatches, "re-derived")
    if mismatches:
        f.fail(f"{f.file} kernels: XLA's bytes accessed disagree ({'; '.join(mismatches)})")


def _slack(key: str, devices: int) -> int:
    return DOT_EXTRA_BYTES * devices if KERNELS[key].writes is None else 0


def _kernel_set(f: Found, where: str, ks: dict[str, Kernel], r: StreamRecord, devices: int):
    for key, k in ks.items():
        spec, name = KERNELS[key], f"{where}.{key}"
        f.field(f"{name}.label", k.label, spec.name, "BabelStream's name")
        f.field(f"{name}.arrays_moved", k.arrays_moved, spec.arrays_moved, "its byte weight")
        want = spec.arrays_moved * r.array.elements * ITEMSIZE[r.array.precision]
        f.field(f"{name}.bytes_moved", k.bytes_moved, want, "byte weight × elements × itemsize")
        _calls(f, name, k, r.run.num_times - 1)
        gbs = want / k.min_s * 1e-9
        f.field(f"{name}.gb_per_s", k.gb_per_s, gbs, "bytes_moved / min_s")
        f.field(f"{name}.gb_per_s_per_device", k.gb_per_s_per_device, gbs / devices, "/ devices")
        if k.xla_bytes_accessed is not None and abs(k.xla_bytes_accessed - want) > _slack(
            key, devices
        ):
            f.fail(f"{f.file} {name}.xla_bytes_accessed {k.xla_bytes_accessed:.0f} != {want}")


def _calls(f: Found, name: str, k: Kernel, n: int) -> None:
    """min ≤ avg ≤ max, and avg a mean of `n` calls of which one took min_s and one max_s: at
    least (max + (n − 1) min) / n, at most (min + (n − 1) max) / n."""
    if not k.min_s <= k.avg_s <= k.max_s:
        f.fail(f"{f.file} {name}: min_s {k.min_s:g} ≤ avg_s {k.avg_s:g} ≤ max_s {k.max_s:g} fails")
        return
    if n < 2:
        return
    low = (k.max_s + (n - 1) * k.min_s) / n
    high = (k.min_s + (n - 1) * k.max_s) / n
    slack = MEAN_RELATIVE * k.max_s
    if not low - slack <= k.avg_s <= high + slack:
        f.fail(
            f"{f.file} {name}: avg_s {k.avg_s:.6g} is no mean of {n} calls from min_s "
            f"{k.min_s:.6g} to max_s {k.max_s:.6g} (between {low:.6g} and {high:.6g})"
        )


def merit(f: Found, r: StreamRecord) -> None:
    """The figure of merit and `metrics` (what reports and rankings read) from the kernels."""
    figures = headline(r)
    fom = report.merit_kernel(figures)
    f.field("figure_of_merit.kernel", r.figure_of_merit.kernel, fom.key, "Triad, else Nstream")
    f.field("figure_of_merit.gb_per_s", r.figure_of_merit.gb_per_s, fom.gb_per_s, "its kernel's")
    want = report.metrics(figures)
    want["stream/figure_of_merit/gb_per_s"] = fom.gb_per_s
    want["stream/validation/passed"] = _passed(r)
    got = r.metrics or {}
    for key in sorted(set(got) | set(want)):
        f.field(f"metrics[{key!r}]", got.get(key), want.get(key), "from the kernels")


def _passed(r: StreamRecord) -> bool:
    checks = r.validation.checks.values()
    devices = all(d.validation_passed for d in r.per_device or [])
    return all(c.passed for c in checks) and devices


def validation(f: Found, r: StreamRecord) -> None:
    """Gold values replayed (stream/validate.py), each check's tolerance and verdict from its
    error, the run's verdict from its checks: the verdicts are never read as given."""
    a, v = r.array, r.validation
    replays = r.run.num_times * (r.run.burst if r.run.kernels == "nstream" else 1)
    rounding = v.gold.rounding if v.gold.rounding in validate.ROUNDINGS else "operation"
    gold = validate.gold_values(r.run.kernels, replays, a.precision, a.elements, rounding)
    for name in ("a", "b", "c", "dot"):
        f.field(f"validation.gold.{name}", getattr(v.gold, name), getattr(gold, name), "replayed")
    names = ["a", "b", "c"] + (["dot"] if gold.dot is not None else [])
    f.field("validation.checks", sorted(v.checks), sorted(names), "the arrays, and Dot's sum")
    for name, c in v.checks.items():
        where = f"validation.checks.{name}"
        if name == "dot":
            tolerance = validate.dot_tolerance(a.precision, a.elements)[0]
        else:
            tolerance = validate.ARRAY_TOLERANCE[a.precision]
        f.field(
            f"{where}.tolerance", c.tolerance, tolerance, f"{a.precision}'s, stream/validate.py"
        )
        passed = c.error is not None and c.error <= c.tolerance
        f.field(f"{where}.passed", c.passed, passed, f"error {c.error} ≤ tolerance {c.tolerance}")
    failed = [d.device_id for d in r.per_device or [] if not d.validation_passed]
    if r.per_device is not None:
        f.field("validation.devices_failed", v.devices_failed, failed, "per_device's")
    f.field("validation.passed", v.passed, _passed(r), "every check and device passed")
    if not _passed(r):
        f.fail(f"{f.file} validation: failed (a check's error is above its tolerance)")


def size_rule(f: Found, r: StreamRecord, host_caches: dict) -> None:
    """The 4x-cache rule from bytes_per_array and the cache (stream/cache.py's check_size); an
    accelerator's cache is cache.py's table's, a host's the same in every run of that host."""
    p, c = r.placement, r.cache
    if p.platform != "cpu":
        table = stream_cache.accelerator_cache(p.device_kind)
        f.field("cache.bytes", c.bytes, table.bytes, f"stream/cache.py's for {p.device_kind!r}")
        f.field("cache.source", c.source, table.source, "stream/cache.py's table")
        sharing = 1
    else:
        host = tuple(r.provenance.hosts or [r.provenance.hostname])
        first = host_caches.setdefault(host, (c.bytes, r.run_id))
        f.field("cache.bytes", c.bytes, first[0], f"run {first[1]} of the same host")
        sharing = max(1, p.num_devices // max(1, p.process_count)) if p.mode == "all" else 1
    f.field("cache.scope", c.scope, "host" if p.platform == "cpu" else "device", "its platform")
    per_device = r.array.bytes_per_array // spanned(r)
    info = stream_cache.CacheInfo(c.bytes, c.source, c.scope)
    want = stream_cache.check_size(per_device, sharing, info, "--array_size, --array_mib")
    f.field("cache.array_bytes_per_cache", c.array_bytes_per_cache, want.array_bytes, "re-derived")
    f.field("cache.arrays_bytes_per_cache", c.arrays_bytes_per_cache, 3 * want.array_bytes, "×3")
    f.field("cache.size_rule_ok", c.size_rule_ok, want.ok, "bytes_per_array against 4 × the cache")
    f.field("cache.message", c.message, want.message, "stream/cache.py's check_size")
    if not want.ok:
        f.fail(f"{f.file} cache: arrays below the size rule ({want.message})")


def plausible(f: Found, r: StreamRecord) -> None:
    """No kernel faster than the devices' memory can feed (the datasheet's bandwidth per
    accelerator, the host's cores on CPUs), nor than Copy and Mul by more than COPY_FACTOR
    (with RATIO_CALLS calls or more)."""
    p = r.placement
    rate, source = _ceiling(r)
    two = [r.kernels[k] for k in ("copy", "mul") if k in r.kernels]
    reference = max(two, key=lambda k: k.gb_per_s) if two else None
    for key, k in r.kernels.items():
        if rate is not None and k.gb_per_s * 1e9 > rate * spanned(r):
            f.fail(
                f"{f.file} kernels.{key}.gb_per_s {k.gb_per_s:.6g} > {rate * spanned(r) / 1e9:.6g} "
                f"GB/s, the most {spanned(r)} × {p.device_kind} can move ({source})"
            )
        if (
            reference
            and r.run.num_times >= RATIO_CALLS
            and k.gb_per_s > COPY_FACTOR * reference.gb_per_s
        ):
            f.fail(
                f"{f.file} kernels.{key}.gb_per_s {k.gb_per_s:.6g} > {COPY_FACTOR} × "
                f"{reference.label}'s {reference.gb_per_s:.6g}: no kernel leads Copy and Mul by "
                "more on the same memory"
            )
    if rate is None:
        f.fail(
            f"{f.file} placement.device_kind {p.device_kind!r}: no datasheet bandwidth to bound it"
        )


def _ceiling(r: StreamRecord) -> tuple[float | None, str]:
    p = r.placement
    if p.platform == "cpu":
        found = re.search(r", (\d+) logical cores\)$", r.run.implementation)
        if not found:
            return None, "no core count"
        cores, hosts = int(found[1]), max(1, len(set(r.provenance.hosts or [])))
        per = cores * CPU_CORE_GB_PER_S * 1e9 * hosts / spanned(r)
        return per, f"{cores} logical cores × {CPU_CORE_GB_PER_S:g} GB/s on {hosts} host(s)"
    sheet = memory_bandwidth(p.device_kind)
    return (None, "") if sheet is None else sheet


def printout(r: StreamRecord, printed: str) -> report.Printout:
    """What the run's output renders from, out of its record (and, for a Triad-only run, the
    runtime its output states: the record keeps no first call)."""
    conf = (r.config or {}).get("stream") or {}
    p = r.placement
    runtime = re.search(r"^Runtime \(seconds\): (\d+\.\d{5})$", printed, re.M)
    return report.Printout(
        implementation=r.run.implementation,
        kernels=r.run.kernels,
        num_times=r.run.num_times,
        precision=r.array.precision,
        elements=r.array.elements,
        itemsize=r.array.itemsize,
        mibibytes=conf.get("mibibytes") is True,
        csv=conf.get("csv") is True,
        placement=placement_line(
            p.mode, p.devices[0], p.num_devices, p.num_devices // p.process_count, p.process_count
        ),
        figures=headline(r),
        devices=device_figures(r),
        below_rule="" if r.cache.size_rule_ok else r.cache.message,
        triad_runtime_s=float(runtime[1]) if runtime and r.run.kernels == "triad" else None,
    )


def _settings(r: StreamRecord) -> SimpleNamespace:
    """The acceptance settings the run was given (config.stream), as assess reads them."""
    conf = (r.config or {}).get("stream") or {}
    return SimpleNamespace(
        rules=conf.get("rules", "nersc10"),
        expect=conf.get("expect", ""),
        outlier_fraction=conf.get("outlier_fraction", 0.9),
        mibibytes=conf.get("mibibytes") is True,
    )


def accepted(r: StreamRecord):
    """The acceptance section the record's own figures and settings give (stream/acceptance.py:
    rule-set clauses, spreads, outliers, expectations), or None for a record without one (a
    run before the rule sets) or whose settings cannot be read (acceptance() says so)."""
    if r.acceptance is None:
        return None
    try:
        return stream_acceptance.assess(dataclasses.replace(r, acceptance=None), _settings(r))
    except (UsageError, ValueError, TypeError, KeyError, ZeroDivisionError, OverflowError):
        return None


def acceptance(f: Found, r: StreamRecord) -> None:
    """The record's verdicts (rule set, expectations, outliers) re-derived, never read: a
    flipped PASS, an edited spread or a dropped section FAILs."""
    conf = (r.config or {}).get("stream") or {}
    if r.acceptance is None:
        if "rules" in conf:
            f.fail(
                f"{f.file} acceptance is missing (its config.stream names rules {conf['rules']})"
            )
        return
    want = accepted(r)
    if want is None:
        f.fail(f"{f.file} config.stream: its acceptance settings cannot be read again")
    elif to_dict(want) != to_dict(r.acceptance):
        f.fail(
            f"{f.file} acceptance is not what its figures and config.stream give "
            "(stream/acceptance.py re-derives it)"
        )


def rendered(r: StreamRecord, printed: str) -> str:
    """The whole stdout the run printed, rendered again from the record alone: BabelStream's
    report and figure of merit (stream/report.py) with the acceptance section re-derived from
    the figures (`accepted`, never the record's own) and decorated as the run does."""
    from hpcai_jax.stream.printed import StreamText

    conf = (r.config or {}).get("stream") or {}
    p = printout(r, printed)
    text, fom = report.render(p)
    out = StreamText(text, (), fom, merit_to_stderr=p.csv)
    mine = dataclasses.replace(r, acceptance=accepted(r))
    fmt = conf.get("output_format", "text")
    return stream_acceptance.decorate(mine, out, fmt if isinstance(fmt, str) else "?", p.csv).stdout


def output(f: Found, r: StreamRecord, printed: str, name: str) -> None:
    """The printed output, line for line, against its rendering from the record."""
    want = rendered(r, printed).splitlines()
    got = printed.splitlines()
    for n in range(max(len(got), len(want))):
        mine = got[n] if n < len(got) else None
        theirs = want[n] if n < len(want) else None
        if mine != theirs and not _triad_bandwidth(r, got, mine, theirs):
            f.fail(
                f"stream/{name} line {n + 1} {mine!r} != {theirs!r} (its record's figures, "
                "rendered by stream/report.py)"
            )
            return
    runtime = printout(r, printed).triad_runtime_s
    timed = (r.run.num_times - 1) * r.kernels["triad"].avg_s if runtime is not None else 0.0
    if runtime is not None and runtime + 5e-6 < timed * (1 - MEAN_RELATIVE):
        f.fail(f"stream/{name}: Runtime {runtime} s < its {timed:.6g} s of timed Triad calls")
    if printed != "\n".join(got) + "\n":
        f.fail(f"stream/{name}: its lines do not end as the run prints them (one \\n each)")


def _triad_bandwidth(r: StreamRecord, got: list[str], mine, theirs) -> bool:
    """A Triad-only run's bandwidth over its runtime, which its output states to 5 decimals:
    any rate the rounding allows, and a runtime no shorter than its timed calls."""
    if r.run.kernels != "triad" or not (mine and theirs and mine.startswith("Bandwidth (")):
        return False
    runtime = next((ln.split(": ")[1] for ln in got if ln.startswith("Runtime (seconds): ")), "")
    try:
        seconds, rate = float(runtime), float(mine.split(":")[1])
    except (ValueError, IndexError):
        return False
    k, conf = r.kernels["triad"], (r.config or {}).get("stream") or {}
    scale = 2.0**-30 if conf.get("mibibytes") else 1e-9
    total = 3 * r.array.itemsize * r.array.elements * r.run.num_times * scale
    low, high = seconds - 5e-6, seconds + 5e-6
    return (
        mine.split(":")[0] == theirs.split(":")[0]
        and low > 0
        and high >= (r.run.num_times - 1) * k.avg_s
        and total / high - 5e-4 <= rate <= total / low + 5e-4
    )
