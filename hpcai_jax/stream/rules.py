"""The centres' STREAM rules (`--stream_rules`): one table of rule sets, each its document and
its clauses, and `judge`, which judges a run's record by them. docs/stream.md (Rule sets)
quotes each document; the clauses read the record alone, so that the verdict of a record can be
re-derived from it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hpcai_jax.records.stream import Clause, Kernel, RuleVerdict, StreamRecord
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.sizing import given_sizes

UKNSS_MIN_ITERATIONS = 100
UKNSS_MAX_SPREAD = 0.05  # (max - min) / mean of a kernel's calls, every kernel, every device
JUPITER_ELEMENTS = 1 << 28  # per device


@dataclasses.dataclass(frozen=True)
class Unit:
    """One measured unit of a run: a device alone (`--stream_devices=each`), or the run's one
    placement; its kernels' figures, the bandwidth per device."""

    node: str
    process_index: int
    device: str  # the device's id, or "all" where the arrays span several devices
    kernels: dict[str, Kernel]
    num_devices: int  # devices the unit's arrays span

    def gb_per_s(self, key: str) -> float:
        """The kernel's bandwidth per device of the unit."""
        return self.kernels[key].gb_per_s / self.num_devices


def units(record: StreamRecord) -> list[Unit]:
    """Every device measured alone, or the run's one placement, from the record."""
    hosts = record.provenance.hosts

    def node(process: int) -> str:
        return hosts[process] if 0 <= process < len(hosts) else f"process {process}"

    if record.per_device:
        return [
            Unit(node(d.process_index), d.process_index, str(d.device_id), d.kernels, 1)
            for d in record.per_device
        ]
    n = record.placement.num_devices
    device = "all" if n > 1 else record.placement.devices[0]
    return [Unit(node(0), 0, device, record.kernels, n)]


def _judged(clause: str, text: str, ok: bool | None, waived: bool = False) -> Clause:
    """A clause whose text ends in its verdict (none where it asks for a figure reported)."""
    verdict = "" if ok is None else " PASS" if ok else " FAIL"
    return Clause(clause=clause, text=text + verdict, passed=ok, waived=waived)


def _size(record: StreamRecord, _units: list[Unit]) -> Clause:
    cache = record.cache
    one_array = cache.array_bytes_per_cache or cache.arrays_bytes_per_cache // 3
    need = "the largest cache unknown" if cache.bytes is None else f"{4 * cache.bytes:,} B"
    ok = cache.size_rule_ok
    text = f"one array {one_array:,} B {'≥' if ok else '<'} 4 × the largest cache ({need})"
    clause = _judged("size", text, ok, waived=not ok)
    if ok:
        return clause
    return dataclasses.replace(clause, text=clause.text + " (--allow_small_arrays)")


def _triad_merit(record: StreamRecord, _units: list[Unit]) -> Clause:
    """Reported, not judged: a run of Nstream alone keeps its exit code."""
    kernel = record.figure_of_merit.kernel
    note = "" if kernel == "triad" else " (not Triad)"
    return _judged("figure of merit", f"figure of merit {kernel}{note}", None)


def _version(record: StreamRecord, _units: list[Unit]) -> Clause:
    version = record.run.babelstream_version
    return _judged("version", f"BabelStream {version} = 5.0", version == "5.0")


def _iterations(record: StreamRecord, _units: list[Unit]) -> Clause:
    n = record.run.num_times
    ok = n >= UKNSS_MIN_ITERATIONS
    return _judged("iterations", f"iterations {n} {'≥' if ok else '<'} {UKNSS_MIN_ITERATIONS}", ok)


def spread(unit: Unit) -> float:
    """The largest (max - min) / mean of the unit's kernels' call times."""
    return max((k.max_s - k.min_s) / k.avg_s for k in unit.kernels.values())


def _spread(_record: StreamRecord, found: list[Unit]) -> Clause:
    spreads = [spread(u) for u in found]
    good = sum(s <= UKNSS_MAX_SPREAD for s in spreads)
    ok = good == len(found)
    text = f"spread {100 * max(spreads):.1f} % {'≤' if ok else '>'} {100 * UKNSS_MAX_SPREAD:.0f} %"
    clause = _judged("spread", text, ok)
    return dataclasses.replace(clause, text=f"{clause.text} on {good} of {len(found)} devices")


def _statistics(_record: StreamRecord, _units: list[Unit]) -> Clause:
    return _judged("statistics", "min, mean and max reported", True)


def _every_device(record: StreamRecord, found: list[Unit]) -> Clause:
    total = record.provenance.device_count
    alone = len(found) if record.per_device else 0
    return _judged("every device", f"devices measured alone {alone} of {total}", alone == total)


def _elements(record: StreamRecord, found: list[Unit]) -> Clause:
    per_device = record.array.elements // found[0].num_devices
    ok = per_device == JUPITER_ELEMENTS
    return _judged("size", f"elements per device {per_device:,} = 2^28", ok)


def _triad_average(record: StreamRecord, found: list[Unit]) -> Clause:
    if "triad" not in record.kernels:
        return _judged("triad average", "Triad ran", False)
    rates = [
        u.kernels["triad"].bytes_moved / u.num_devices / u.kernels["triad"].avg_s * 2.0**-20
        for u in found
    ]
    text = f"Triad average {min(rates):.3f} MiB/s (the slowest of {len(found)} devices)"
    return _judged("triad average", text, None)


def _scan(record: StreamRecord, _units: list[Unit]) -> Clause:
    """From 2^15 elements up to the largest whose three arrays the free memory holds."""
    scan = record.scan
    if scan is None or not scan.points:
        return _judged("size scan", "size scan not run (--stream_scan)", False)
    first, last = scan.points[0].elements, scan.points[-1].elements
    full = 3 * 2 * last * record.array.itemsize > scan.free_bytes
    text = f"size scan 2^{first.bit_length() - 1} to 2^{last.bit_length() - 1} elements"
    return _judged("size scan", text + (", memory full" if full else ""), first == 1 << 15 and full)


ClauseFn = Callable[[StreamRecord, list[Unit]], Clause]


@dataclasses.dataclass(frozen=True)
class RuleSet:
    document: str
    clauses: tuple[ClauseFn, ...]
    each: bool  # every device measured alone: --stream_devices=one becomes each
    elements_per_device: int | None  # --array_size=auto becomes this many per device


RULE_SETS: dict[str, RuleSet] = {
    "nersc10": RuleSet(
        "NERSC-10 Benchmark Suite, STREAM (BabelStream) run rules",
        (_size, _triad_merit),
        False,
        None,
    ),
    "uknss": RuleSet(
        "UK NSS (EPCC) benchmark rules for Isambard-AI, BabelStream",
        (_version, _iterations, _spread, _statistics, _every_device),
        True,
        None,
    ),
    "jupiter": RuleSet(
        "JSC JUPITER benchmark suite, GPU STREAM",
        (_elements, _triad_average, _scan),
        True,
        JUPITER_ELEMENTS,
    ),
}


def applied(config: StreamConfig, device_count: int) -> StreamConfig:
    """The settings the rule set asks for where the user left the defaults: every device alone
    (uknss, jupiter) and JUPITER's 2^28 elements per device."""
    rules = RULE_SETS[config.rules]
    changes: dict = {}
    if rules.each and config.devices == "one":
        changes["devices"] = "each"
    if rules.elements_per_device and not given_sizes(config):
        shards = device_count if changes.get("devices", config.devices) == "all" else 1
        changes["array_size"] = rules.elements_per_device * shards
    return dataclasses.replace(config, **changes) if changes else config


def judge(record: StreamRecord, rules: str) -> RuleVerdict:
    """Every clause of the rule set `rules`, judged on the record."""
    found = units(record)
    rule_set = RULE_SETS[rules]
    clauses = [clause(record, found) for clause in rule_set.clauses]
    return RuleVerdict(
        rules=rules,
        document=rule_set.document,
        clauses=clauses,
        passed=all(c.passed is not False or c.waived for c in clauses),
    )


def verdict_line(verdict: RuleVerdict) -> str:
    """`uknss: iterations 100 ≥ 100 PASS; spread 3.1 % ≤ 5 % PASS on 8 of 8 devices; ...`."""
    return f"{verdict.rules}: " + "; ".join(c.text for c in verdict.clauses)
