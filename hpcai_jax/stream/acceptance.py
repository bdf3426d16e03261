"""A STREAM run judged for acceptance (docs/stream.md, Acceptance): the rule set's verdict
(rules.py), every device against its peers (min, mean, median, max; the outliers named) and
against `--expect`. `assess` makes the record's `acceptance` section from the record alone;
`lines` and `merit_suffix` render what it adds to stdout from that section alone, so that the
same record always gives the same lines; `attach` is the one call `run_stream` makes."""

from __future__ import annotations

import dataclasses
import statistics

from hpcai_jax.records.stream import (
    Acceptance,
    DeviceFigure,
    ExpectationCheck,
    KernelAcross,
    Outlier,
    StreamRecord,
)
from hpcai_jax.stream import expect, formats, rules, scan
from hpcai_jax.stream.config import StreamConfig

# A device below an expectation, or a clause of the rule set FAILed: the run wrote its record
# and printed everything, and exits with this (docs/reliability.md, Exit codes).
ACCEPTANCE_EXIT_CODE = 3


def _figure(unit: rules.Unit, key: str) -> DeviceFigure:
    return DeviceFigure(
        node=unit.node,
        process_index=unit.process_index,
        device_label=unit.device,
        gb_per_s=unit.gb_per_s(key),
    )


def _across(found: list[rules.Unit]) -> dict[str, KernelAcross]:
    """Per kernel, the devices' spread; empty unless several devices were measured alone."""
    if len(found) < 2:
        return {}
    out = {}
    for key, kernel in found[0].kernels.items():
        rates = [u.gb_per_s(key) for u in found]
        slowest = min(found, key=lambda u: u.gb_per_s(key))
        out[key] = KernelAcross(
            label=kernel.label,
            devices=len(found),
            min_gb_per_s=min(rates),
            mean_gb_per_s=statistics.fmean(rates),
            median_gb_per_s=statistics.median(rates),
            max_gb_per_s=max(rates),
            slowest=_figure(slowest, key),
        )
    return out


def _per_node(found: list[rules.Unit]) -> dict[str, dict[str, KernelAcross]]:
    """Each node's spread, where the devices measured alone span several nodes."""
    nodes = sorted({u.node for u in found})
    if len(nodes) < 2:
        return {}
    return {node: _across([u for u in found if u.node == node]) for node in nodes}


def _outliers(
    found: list[rules.Unit], across: dict[str, KernelAcross], fraction: float
) -> list[Outlier]:
    return [
        Outlier(
            kernel=key,
            label=spread.label,
            figure=_figure(u, key),
            fraction_of_median=u.gb_per_s(key) / spread.median_gb_per_s,
        )
        for key, spread in across.items()
        for u in found
        if u.gb_per_s(key) < fraction * spread.median_gb_per_s
    ]


def _expectations(
    found: list[rules.Unit], expectations: tuple[expect.Expectation, ...]
) -> list[ExpectationCheck]:
    return [
        ExpectationCheck(
            kernel=e.kernel,
            label=u.kernels[e.kernel].label,
            given=e.given,
            unit=e.unit,
            bytes_per_s=e.bytes_per_s,
            figure=_figure(u, e.kernel),
            passed=u.gb_per_s(e.kernel) * 1e9 >= e.bytes_per_s,
        )
        for e in expectations
        for u in found
    ]


def assess(record: StreamRecord, config: StreamConfig) -> Acceptance:
    """The record's `acceptance` section, from the record and the acceptance settings."""
    found = rules.units(record)
    verdict = rules.judge(record, config.rules)
    across = _across(found)
    checks = _expectations(found, expect.parse(config.expect))
    return Acceptance(
        rules=verdict,
        binary_units=config.mibibytes,
        outlier_fraction=config.outlier_fraction,
        across=across,
        nodes=_per_node(found),
        outliers=_outliers(found, across, config.outlier_fraction),
        expectations=checks,
        passed=verdict.passed and all(c.passed for c in checks),
    )


def _rate(gb_per_s: float, mibibytes: bool) -> str:
    return f"{gb_per_s * 1e9 * (2.0**-20 if mibibytes else 1e-6):.3f}"


def _where(d: DeviceFigure) -> str:
    return f"node {d.node}, device {d.device_label} (process {d.process_index})"


def _spread_line(what: str, s: KernelAcross, mib: bool) -> str:
    unit = "MiBytes/sec" if mib else "MBytes/sec"
    return (
        f"{what}, {s.label} {unit}: min {_rate(s.min_gb_per_s, mib)} ({_where(s.slowest)}), "
        f"mean {_rate(s.mean_gb_per_s, mib)}, median {_rate(s.median_gb_per_s, mib)}, "
        f"max {_rate(s.max_gb_per_s, mib)}"
    )


def lines(record: StreamRecord) -> list[str]:
    """What the acceptance section adds to the output, one line per fact; none in a record
    without one."""
    a = record.acceptance
    if a is None:
        return []
    unit = "MiBytes/sec" if a.binary_units else "MBytes/sec"
    out = [*scan.lines(record, a.binary_units), rules.verdict_line(a.rules)]
    out += [
        _spread_line(f"Across {s.devices} devices", s, a.binary_units) for s in a.across.values()
    ]
    for node, kernels in a.nodes.items():
        out += [
            _spread_line(f"Node {node} ({s.devices} devices)", s, a.binary_units)
            for s in kernels.values()
        ]
    for o in a.outliers:
        out.append(
            f"Outlier: {_where(o.figure)}: {o.label} {_rate(o.figure.gb_per_s, a.binary_units)} "
            f"{unit}, {o.fraction_of_median:.3f} of the median (< {a.outlier_fraction})"
        )
    for c in a.expectations:
        measured = c.figure.gb_per_s * 1e9 / expect.UNITS[c.unit]
        out.append(
            f"Expect {c.given}: {_where(c.figure)}: {c.label} {measured:.3f} {c.unit} "
            f"{'PASS' if c.passed else 'FAIL'}"
        )
    out.append(f"Acceptance: {'PASS' if a.passed else f'FAIL (exit {ACCEPTANCE_EXIT_CODE})'}")
    return out


def merit_suffix(record: StreamRecord) -> str:
    """What the figure-of-merit line adds inside its parentheses: the slowest device's node,
    where several devices were measured alone."""
    a = record.acceptance
    spread = None if a is None else a.across.get(record.figure_of_merit.kernel)
    return "" if spread is None else f"; slowest: {_where(spread.slowest)}"


def decorate(record: StreamRecord, text, output_format: str = "text", csv: bool = False):
    """`text` (printed.StreamText, as render_stream gives it) with what the record's
    acceptance section adds: its lines close the report on stdout in text, go to stderr where
    stdout is CSV (--csv) or CSV/JSON (--output_format, which then replaces the report); the
    slowest device's node closes the figure-of-merit line. A function of the record and `text`
    alone: a checker that re-renders `text` from a record gets the printed output back."""
    suffix = merit_suffix(record)
    merit = text.figure_of_merit[:-1] + suffix + ")" if suffix else text.figure_of_merit
    extra = lines(record)
    if output_format != "text":
        report = formats.render(record, output_format)
        text = dataclasses.replace(
            text, report=report, failures=(*text.failures, *extra), merit_to_stderr=True
        )
    elif csv:
        text = dataclasses.replace(text, failures=(*text.failures, *extra))
    else:
        text = dataclasses.replace(text, report="\n".join([text.report, *extra]))
    return dataclasses.replace(text, figure_of_merit=merit)


def attach(config: StreamConfig, record: StreamRecord, text):
    """(record, text) with the acceptance section and `decorate`'s text; the record's `printed`
    is the new stdout."""
    record = dataclasses.replace(record, acceptance=assess(record, config))
    text = decorate(record, text, config.output_format, config.csv)
    return dataclasses.replace(record, printed=text.stdout), text


def exit_code(record: StreamRecord, validation_code: int) -> int:
    """Validation's code (1) first; else 3 where the acceptance FAILed; else 0."""
    if validation_code or record.acceptance is None or record.acceptance.passed:
        return validation_code
    return ACCEPTANCE_EXIT_CODE
