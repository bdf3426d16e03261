"""STREAM judged for acceptance (docs/stream.md, Acceptance): the rule sets, the devices against
their peers, `--expect` with its exit code, and the CSV and JSON outputs, parsed. One in-process
run of 8 devices alone, one of them slowed, serves every test that reads a record; the others
edit copies of it."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import subprocess
import sys

import pytest
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax import records
from hpcai_jax.config import ResultsConfig
from hpcai_jax.settings import Settings
from hpcai_jax.stream import acceptance, benchmark, drain, expect, formats, rules, scan
from hpcai_jax.stream.config import StreamConfig

SLOW_DEVICE = 3
JOIN_S = 300  # a loaded 2-core machine can take minutes to import JAX and join
RUN = (
    "--mode=stream",
    "--stream_rules=uknss",
    "--stream_kernels=triad",
    "--precision=float32",
    "--array_size=8192",
    "--allow_small_arrays",
    "--num_times=100",
)


def _is_slow(device) -> bool:
    return device.id == SLOW_DEVICE


def _timed(measure, slow=_is_slow):
    """`measure_bandwidth` with every device's calls timed at 10 us (max 3 % above), and four
    times slower on a device `slow` picks: a CPU shared with other jobs is too noisy to test on."""

    def timed(config, kernel_specs=None, placement=None, *args, **kwargs):
        result = measure(config, kernel_specs, placement, *args, **kwargs)
        fastest = 4e-5 if placement is not None and slow(placement.devices[0]) else 1e-5
        figures = [
            dataclasses.replace(f, min_s=fastest, max_s=1.03 * fastest, avg_s=1.015 * fastest)
            for f in result.figures
        ]
        return dataclasses.replace(result, figures=figures)

    return timed


@pytest.fixture(scope="module")
def slowed_run(tmp_path_factory):
    """uknss over 8 devices alone, device 3 slowed 4x: Triad 9.83 GB/s on the others (3 x 8192
    float32 over 10 us), 2.46 GB/s on it, expected at 5 GB/s."""
    folder = tmp_path_factory.mktemp("accept")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(benchmark, "measure_bandwidth", _timed(benchmark.measure_bandwidth))
        proc = run_in_process(*RUN, "--expect=triad:5GB/s", f"--results_dir={folder}")
    [record] = [records.read(p) for p in folder.glob("*.json")]
    return proc, record


def test_a_slowed_device_is_named_fails_its_expectation_and_the_run_exits_3(slowed_run):
    proc, record = slowed_run
    assert proc.returncode == acceptance.ACCEPTANCE_EXIT_CODE == 3, proc.stderr[-2000:]
    assert record.config["stream"]["devices"] == "each"  # uknss: every device alone
    assert record.printed == proc.stdout
    lines = proc.stdout.splitlines()
    outliers = [line for line in lines if line.startswith("Outlier: ")]
    assert len(outliers) == 1 and f"device {SLOW_DEVICE} (process 0)" in outliers[0]
    assert outliers[0].startswith(f"Outlier: node {record.provenance.hosts[0]}, device 3")
    failed = [c for c in record.acceptance.expectations if not c.passed]
    assert [c.figure.device_label for c in failed] == [str(SLOW_DEVICE)]
    assert len(record.acceptance.expectations) == 8
    node = record.provenance.hosts[0]
    assert [line for line in lines if line.endswith(" FAIL")] == [
        f"Expect triad:5GB/s: node {node}, device 3 (process 0): Triad 2.458 GB/s FAIL"
    ]
    assert lines[-1].endswith(
        f"; slowest: node {record.provenance.hosts[0]}, device 3 (process 0))"
    )
    assert lines[-2] == "Acceptance: FAIL (exit 3)"


def test_the_uknss_verdict_is_per_clause_and_printed(slowed_run):
    proc, record = slowed_run
    verdict = record.acceptance.rules
    assert [c.clause for c in verdict.clauses] == [
        "version",
        "iterations",
        "spread",
        "statistics",
        "every device",
    ]
    assert verdict.clauses[1].text == "iterations 100 ≥ 100 PASS"
    assert verdict.clauses[2].text == "spread 3.0 % ≤ 5 % PASS on 8 of 8 devices"
    assert verdict.passed  # the run's exit 3 is the expectation's alone
    assert verdict.clauses[4].text == "devices measured alone 8 of 8 PASS"
    assert rules.verdict_line(verdict) in proc.stdout.splitlines()
    # The same record gives the same lines: what a re-rendering check relies on.
    assert acceptance.lines(record) == acceptance.lines(
        records.read(records.schema.to_dict(record))
    )


def _with_spread(record, factor: float):
    """The record with every device's calls spread by `factor` (max = min x factor)."""
    per_device = [
        dataclasses.replace(
            d,
            kernels={
                k: dataclasses.replace(v, max_s=v.min_s * factor, avg_s=v.min_s * (1 + factor) / 2)
                for k, v in d.kernels.items()
            },
        )
        for d in record.per_device
    ]
    return dataclasses.replace(record, per_device=per_device)


def test_the_spread_clause_passes_within_5_percent_and_fails_beyond(slowed_run):
    _, record = slowed_run
    tight = rules.judge(_with_spread(record, 1.03), "uknss")
    assert tight.passed
    assert tight.clauses[2].text == "spread 3.0 % ≤ 5 % PASS on 8 of 8 devices"
    loose = rules.judge(_with_spread(record, 1.06), "uknss")
    assert not loose.passed
    assert loose.clauses[2].text == "spread 5.8 % > 5 % FAIL on 0 of 8 devices"


def test_jupiter_asks_2_28_elements_and_reports_triad_average_in_mib(slowed_run):
    _, record = slowed_run
    verdict = rules.judge(record, "jupiter")
    assert verdict.clauses[0].text == "elements per device 8,192 = 2^28 FAIL"
    assert verdict.clauses[1].text.startswith("Triad average ")
    assert verdict.clauses[1].text.endswith(" MiB/s (the slowest of 8 devices)")
    at_size = dataclasses.replace(
        record, array=dataclasses.replace(record.array, elements=rules.JUPITER_ELEMENTS)
    )
    assert rules.judge(at_size, "jupiter").clauses[0].passed
    config = rules.applied(StreamConfig(rules="jupiter"), 8)
    assert (config.devices, config.array_size) == ("each", 1 << 28)
    assert rules.applied(StreamConfig(rules="jupiter", devices="all"), 8).array_size == 8 << 28
    assert rules.applied(StreamConfig(array_size=64), 8) == StreamConfig(array_size=64)


def test_csv_has_node_and_device_in_front_for_every_kernel_selection(slowed_run):
    _, record = slowed_run
    table = list(csv.DictReader(io.StringIO(formats.csv(record))))
    assert list(table[0])[:4] == ["node", "device", "function", "num_times"]
    assert [row["device"] for row in table] == [str(d) for d in range(8)]
    slow = float(table[SLOW_DEVICE]["max_mbytes_per_sec"])
    assert slow == pytest.approx(record.acceptance.across["triad"].min_gb_per_s * 1e3)
    # Five kernels, as --stream_kernels=all leaves them: five rows per device, same columns.
    triad = record.per_device[0].kernels["triad"]
    five = {k: dataclasses.replace(triad, label=k.title()) for k in ("copy", "mul", "add", "triad")}
    every = dataclasses.replace(
        record, per_device=[dataclasses.replace(d, kernels=five) for d in record.per_device]
    )
    rows = list(csv.DictReader(io.StringIO(formats.csv(every))))
    assert len(rows) == 32 and {r["function"] for r in rows} == {"Copy", "Mul", "Add", "Triad"}


def test_json_output_is_one_object_of_the_rows_and_the_verdict(slowed_run, tmp_path):
    proc, record = slowed_run
    obj = json.loads(formats.as_json(record))
    assert obj["format"] == formats.JSON_FORMAT and obj["rules"] == "uknss"
    assert len(obj["rows"]) == 8 and obj["rows"][SLOW_DEVICE]["device"] == "3"
    assert obj["acceptance"]["passed"] is False
    assert obj["figure_of_merit"]["kernel"] == "triad"


@pytest.mark.parametrize("output_format", ["json", "csv"])
def test_machine_output_on_stdout_keeps_the_lines_on_stderr(tmp_path, output_format):
    proc = run_in_process(
        "--mode=stream",
        "--array_size=4096",
        "--allow_small_arrays",
        "--num_times=2",
        "--precision=float32",
        f"--output_format={output_format}",
        f"--results_dir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    if output_format == "json":
        obj = json.loads(proc.stdout)
        assert obj["rules"] == "nersc10" and len(obj["rows"]) == 5
    else:  # every kernel of --stream_kernels=all, one device: five rows
        rows = list(csv.DictReader(io.StringIO(proc.stdout)))
        assert [r["function"] for r in rows] == ["Copy", "Mul", "Add", "Triad", "Dot"]
        assert len({(r["node"], r["device"]) for r in rows}) == 1  # the one device
    assert "Figure of merit: Triad" in proc.stderr and "Acceptance: PASS" in proc.stderr
    [record] = [records.read(p) for p in tmp_path.glob("*.json")]
    assert record.printed == proc.stdout


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--stream_rules=uknss", "--num_times=99"], ["--num_times=99", "at least 100"]),
        (["--stream_rules=lumi"], ["--stream_rules", "nersc10, uknss, jupiter"]),
        (["--expect=triad:fast"], ["--expect=triad:fast", "KERNEL:VALUEUNIT"]),
        (["--expect=triad:3PB/s"], ["no known unit (PB/s)"]),
        (["--expect=dot:1GB/s", "--stream_kernels=triad"], ["dot does not run"]),
        (["--output_format=xml"], ["--output_format", "text, csv, json"]),
    ],
)
def test_bad_acceptance_input_is_one_line_and_exit_2(tmp_path, args, fragments):
    proc = run_in_process("--mode=stream", f"--results_dir={tmp_path}", *args)
    assert_one_line_error(proc, *fragments)
    assert not list(tmp_path.glob("*.json"))


def test_expectations_parse_units_and_refuse_repeats():
    [triad, copy] = expect.parse("triad:3885301MB/s, copy:1.5TB/s")
    assert triad.bytes_per_s == 3885301e6 and copy.bytes_per_s == 1.5e12
    assert expect.parse("nstream:1GiB/s")[0].bytes_per_s == 2.0**30
    assert expect.parse("") == ()
    with pytest.raises(expect.UsageError, match="gives triad twice"):
        expect.parse("triad:1GB/s,triad:2GB/s")
    with pytest.raises(expect.UsageError, match="is not positive"):
        expect.parse("triad:0GB/s")


# Each process of a two-process job times its devices as `_timed` does, process 1's second
# device four times slower, then runs the CLI.
WORKER = """
import sys
import jax
sys.path.insert(0, "tests")
from test_stream_acceptance import _timed
from hpcai_jax import main
from hpcai_jax.stream import benchmark

def slow(device):
    return device.process_index == 1 and device == jax.local_devices()[1]

benchmark.measure_bandwidth = _timed(benchmark.measure_bandwidth, slow)
sys.argv = ["hpcai_jax.main", *sys.argv[1:]]
main.run()
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_nodes_name_the_slow_devices_node(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    proc = subprocess.run(
        [
            sys.executable,
            "launch/local.py",
            "--num_processes=2",
            "--devices_per_process=4",
            "--processes_per_node=1",
            f"--timeout_s={JOIN_S + 120}",
            "--",
            sys.executable,
            str(worker),
            *RUN,
            "--expect=triad:5GB/s",
            f"--distributed_timeout_s={JOIN_S}",
            f"--results_dir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=JOIN_S + 180,
    )
    assert proc.returncode == acceptance.ACCEPTANCE_EXIT_CODE, proc.stderr[-3000:]
    [record] = [records.read(p) for p in tmp_path.glob("stream-*.json")]
    assert record.provenance.hosts == ["local-node0", "local-node1"]
    [slow] = [d for d in record.per_device if d.process_index == 1][1:2]
    where = f"node local-node1, device {slow.device_id} (process 1)"
    printed = record.printed.splitlines()
    assert [x for x in printed if x.startswith("Outlier: ")] == [
        f"Outlier: {where}: Triad 2457.600 MBytes/sec, 0.250 of the median (< 0.9)"
    ]
    assert [x for x in printed if x.endswith(" FAIL")] == [
        f"Expect triad:5GB/s: {where}: Triad 2.458 GB/s FAIL"
    ]
    assert printed[-1].endswith(f"; slowest: {where})")
    assert drain.nodes_to_drain(record) == ["local-node1"]
    node1 = [x for x in printed if x.startswith("Node local-node1 (4 devices), Triad MBytes/sec: ")]
    assert node1 == [
        f"Node local-node1 (4 devices), Triad MBytes/sec: min 2457.600 ({where}), mean 7987.200, "
        "median 9830.400, max 9830.400"
    ]
    assert sorted(record.acceptance.nodes) == ["local-node0", "local-node1"]


def _free(monkeypatch, elements: int) -> None:
    """The host's MemAvailable made to hold three float32 arrays of `elements`, no more."""
    monkeypatch.setattr(benchmark, "mem_available_bytes", lambda: 3 * 4 * elements)


def test_the_scan_goes_from_2_15_until_memory_is_full(slowed_run, tmp_path, monkeypatch):
    _, record = slowed_run
    _free(monkeypatch, (1 << 17) + 100)
    config = StreamConfig(scan=True, kernels="triad", precision="float32", num_times=2)
    scanned = scan.scanned(
        config, record, str(tmp_path), benchmark.measure_bandwidth, benchmark._room
    )
    assert [p.elements for p in scanned.scan.points] == [1 << 15, 1 << 16, 1 << 17]
    assert (tmp_path / scanned.scan.plot).stat().st_size > 0
    table = scan.lines(scanned, mibibytes=False)
    assert table[1].split()[:3] == ["Elements", "MiB/array", "Triad"]
    assert [row.split()[0] for row in table[2:]] == ["32768", "65536", "131072"]
    clause = rules.judge(scanned, "jupiter").clauses[2]
    assert (clause.text, clause.passed) == (
        "size scan 2^15 to 2^17 elements, memory full PASS",
        True,
    )
    assert rules.judge(record, "jupiter").clauses[2].passed is False  # no scan: not JUPITER's run


def test_a_scan_that_cannot_fit_is_one_line_and_exit_2(tmp_path, monkeypatch):
    _free(monkeypatch, (1 << 15) - 1)
    proc = run_in_process(
        "--mode=stream",
        "--stream_rules=jupiter",
        "--stream_devices=all",
        "--stream_kernels=triad",
        "--precision=float32",
        "--array_size=4096",
        "--allow_small_arrays",
        "--num_times=2",
        "--stream_scan",
        f"--results_dir={tmp_path}",
    )
    assert_one_line_error(proc, "--stream_scan: three arrays of 2^15 elements need 393,216 B")
    assert not list(tmp_path.glob("*.json"))


def test_the_report_names_the_nodes_to_drain(slowed_run, tmp_path, capsys):
    _, record = slowed_run
    path = tmp_path / "record.json"
    path.write_text(json.dumps(records.to_dict(record)))
    code = drain.run([str(path), "--json", str(tmp_path / "report.json")])
    assert code == acceptance.ACCEPTANCE_EXIT_CODE
    node = record.provenance.hosts[0]
    assert capsys.readouterr().out.splitlines()[-1] == f"nodes to drain: {node}"
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["drain"], report["passed"]) == ([node], False)
    assert report["lines"] == acceptance.lines(record)
    path.write_text(json.dumps({"mode": "stream"}))
    with pytest.raises(expect.UsageError, match="record.json: "):
        drain.run([str(path)])


@pytest.mark.parametrize("output_format", ["text", "csv", "json"])
def test_the_printed_output_comes_back_from_the_record_and_the_rendered_text(
    tmp_path, output_format
):
    """What a checker that re-renders BabelStream's text from a record needs: `decorate` of the
    record and that text is the printed output, in every format."""
    config = Settings(
        mode="stream",
        stream=StreamConfig(
            array_size=1 << 12,
            allow_small_arrays=True,
            num_times=2,
            kernels="triad",
            precision="float32",
            expect="triad:1MB/s",
            output_format=output_format,
        ),
        results=ResultsConfig(results_dir=str(tmp_path)),
    ).validate()
    measured = benchmark.measure_stream(config.stream)
    text = benchmark.render_stream(measured)
    record = benchmark.stream_record(config, "s", measured.result, None, None, text.stdout)
    record, printed = acceptance.attach(config.stream, record, text)
    again = records.read(records.to_dict(record))
    redone = acceptance.decorate(again, text, output_format)
    assert redone.stdout == record.printed == printed.stdout
    assert ("Acceptance: PASS" in record.printed) == (output_format == "text")
