"""`python -m hpcai_jax.submission`: the session's tiny run packed, then checked: it passes, and
copies tampered with in the record, in the log, or in both consistently fail, naming the field.
Everything runs in this process (the compliance checker is its own subprocess), but for the
counting subprocesses of --recount (hpcai_jax/submission/count.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import forge
import pytest
from helpers import check_cli

from hpcai_jax import records
from hpcai_jax.submission.__main__ import main

RUN = "real-train"


_cli = check_cli


@pytest.fixture(scope="module")
def package(tiny_run, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("submission")
    system = folder / "site.json"
    system.write_text(json.dumps({"interconnect": "none: one host"}))
    out = folder / "package"
    assert (
        main(
            [
                "pack",
                str(tiny_run.results / f"{RUN}.json"),
                f"--out={out}",
                f"--system_json={system}",
            ]
        )
        == 0
    )
    return out


def _lines(log: Path) -> list[dict]:
    return [json.loads(line.removeprefix(":::MLLOG ")) for line in log.read_text().splitlines()]


def _write_lines(log: Path, lines: list[dict]) -> None:
    log.write_text("".join(":::MLLOG " + json.dumps(line) + "\n" for line in lines))


def _tampered(package: Path, tmp_path: Path, record=None, log=None) -> Path:
    """A copy of the package with `record(dict)` and `log(list of lines)` applied in place."""
    copy = tmp_path / "tampered"
    shutil.copytree(package, copy)
    if record:
        path = copy / f"{RUN}.json"
        data = json.loads(path.read_text())
        record(data)
        path.write_text(json.dumps(data))
    if log:
        path = copy / f"{RUN}.mllog"
        lines = _lines(path)
        log(lines)
        _write_lines(path, lines)
    return copy


def _key(lines: list[dict], key: str) -> list[dict]:
    return [line for line in lines if line["key"] == key]


def test_pack_then_check_passes(package, tiny_run, capsys):
    names = sorted(p.name for p in package.iterdir())
    assert names == ["README.md", f"{RUN}.flags", f"{RUN}.json", f"{RUN}.mllog", "system.json"]
    assert (package / f"{RUN}.mllog").read_text() == tiny_run.mllog.read_text()
    flags = (package / f"{RUN}.flags").read_text()
    assert "--ensemble_size=4\n" in flags and "--submission_org=Test Org\n" in flags
    assert "--process_id" not in flags and "--coordinator_address" not in flags
    system = json.loads((package / "system.json").read_text())
    assert system["interconnect"] == "none: one host"
    assert system["devices"] == [{"kind": "cpu", "count": 8}]
    assert system["runs"][RUN]["hosts"] and "packing_host" in system
    assert system["software"]["jax"]
    readme = (package / "README.md").read_text()
    assert f"| {RUN} | open | 4 | 4 | 8 × cpu |" in readme
    assert main(["check", str(package)]) == 0
    checked = [x for x in capsys.readouterr().out.splitlines() if x.startswith("checked ")]
    assert checked == [
        f"checked run {RUN}: configuration PASS, MLLOG compliance PASS, division PASS, scores "
        "re-derived PASS, plausibility PASS, bounds PASS, provenance PASS",
        "checked package: README.md, system.json, duplicates PASS",
    ]


def test_check_takes_a_relative_path(package, monkeypatch, capsys):
    """As a reviewer types it, from the package's parent (the checker runs elsewhere)."""
    monkeypatch.chdir(package.parent)
    assert _cli(capsys, "check", package.name) == (0, ["PASS"], [])


def _fails(capsys, folder, *fragments) -> list[str]:
    code, out, err = _cli(capsys, "check", folder)
    assert code == 1 and not err, (out, err)
    assert any(all(f in line for f in fragments) for line in out), out
    return out


def test_a_number_edited_in_the_record_only(package, tmp_path, capsys):
    def edit(r):
        r["metrics"]["flops_per_s"] *= 1.2

    out = _fails(
        capsys,
        _tampered(package, tmp_path, record=edit),
        f"run {RUN}: {RUN}.json metrics.flops_per_s",
        "re-derived from epochs (FLOPs per step × steps ÷ MLLOG epoch times)",
    )
    assert all(line.startswith(f"run {RUN}: ") for line in out)


def test_a_record_from_before_a_setting_existed_checks_at_its_default(package, tmp_path, capsys):
    """A record written before a setting was added lacks it: it ran as the default does, so it
    checks (and packs) as that; a flagfile that sets the missing setting otherwise still FAILs."""

    def older(r):
        del r["config"]["results"]["sweep_plan"]  # added after 0.1.0's first records

    copy = _tampered(package, tmp_path, record=older)
    assert _cli(capsys, "check", copy)[:2] == (0, ["PASS"])
    flags = copy / f"{RUN}.flags"
    flags.write_text(flags.read_text().replace("--sweep_plan=\n", "--sweep_plan=paper:full:ab\n"))
    _fails(capsys, copy, f"{RUN}.flags is not the configuration of {RUN}.json config")


def test_a_time_edited_in_the_log_only(package, tmp_path, capsys):
    def edit(lines):
        _key(lines, "epoch_stop")[0]["time_ms"] += 50  # epoch 1 took 50 ms longer

    _fails(
        capsys,
        _tampered(package, tmp_path, log=edit),
        f"run {RUN}: {RUN}.json epochs[0].wall_s",
        f"from {RUN}.mllog epoch_stop − epoch_start",
    )


@pytest.mark.parametrize("key", ["flops_per_s", "vflops_per_s"])
def test_an_edit_made_in_both_breaks_the_arithmetic(package, tmp_path, capsys, key):
    def record(r):
        r["metrics"][key] *= 2

    def log(lines):
        _key(lines, key)[0]["value"] *= 2

    how = "re-derived from epochs" if key == "flops_per_s" else "re-derived (Eq. 6 FLOPS × penalty)"
    copy = _tampered(package, tmp_path, record=record, log=log)
    out = _fails(capsys, copy, f"{RUN}.json metrics.{key}", how)
    assert any(f"{RUN}.mllog {key}" in line and how in line for line in out), out


def test_a_closed_claim_for_an_open_configuration(package, tmp_path, capsys):
    def record(r):
        r["submission"] = {"division": "closed", "violations": []}

    def log(lines):
        line = _key(lines, "submission_division")[0]
        line["value"], line["metadata"]["violations"] = "closed", []

    copy = _tampered(package, tmp_path, record=record, log=log)
    _fails(capsys, copy, f"{RUN}.json submission.division 'closed' != 'open'", "rules.judge")


@pytest.mark.slow
def test_recount(package, tiny_run, tmp_path, capsys):
    """The real run and a copy whose FLOPs per step were scaled consistently everywhere (so
    that everything but the recount passes): one --mode=flops subprocess counts both."""
    scale, fake = 1.5, "scaled-flops"
    forged = forge.Forged(package, RUN)
    forged.record["run_id"] = forged.record["config"]["results"]["run_name"] = fake
    for line in forged.key("init_start") + forged.key("run_stop"):
        line["metadata"]["run_id"] = fake  # pack matches the log's run id with the record's
    forged.record["flops"]["per_step"] *= scale
    # A clock of its own, as another run has: check refuses one run packed twice.
    t0 = forged.one("run_start")["time_ms"]
    forged.retime(lambda t: t if t < t0 else t0 + (t - t0) * 1.1)
    forged.rederive()
    runs = tmp_path / "runs"
    runs.mkdir()
    forged.record["mllog"] = str(runs / f"{fake}.mllog")
    forged.save(runs, fake)
    both = tmp_path / "both"
    assert (
        main(["pack", str(package / f"{RUN}.json"), str(runs / f"{fake}.json"), f"--out={both}"])
        == 0
    )
    capsys.readouterr()
    # Consistent everywhere: only the recount can tell.
    assert _cli(capsys, "check", both) == (0, ["PASS"], [])
    code, out, err = _cli(capsys, "check", "--recount", both)
    assert code == 1 and not err
    per_step = records.read(tiny_run.record).flops.per_step
    # The tiny run's members are mapped (docs/members.md): its count is the step with its loops
    # written out, before optimisation, so the lowered count judges the forgery, no compile.
    assert out == [
        f"run {fake}: {fake}.json flops.per_step {per_step * scale:.6g} != {per_step:.6g} "
        f"recounted from {fake}.flags on 8 CPU devices (the lowered step: more than 12% off, "
        "no rule counts it so)"
    ]


@pytest.mark.slow
def test_recount_of_a_closed_imagenet_package_needs_no_imagenet(
    package, tmp_path, monkeypatch, capsys
):
    """The tiny run's package forged as closed ResNet-50 on ImageNet (tests/test_forgery.py)
    is recounted where no ImageNet is: the step counted on generated 224×224×3 inputs of 1000
    classes, lowered only (its count is more than count.FAR from the claim: no compile)."""
    from test_forgery import closed_imagenet

    copy = tmp_path / "closed"
    shutil.copytree(package, copy)
    closed_imagenet(forge.Forged(copy, RUN))
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no-tensorflow-datasets"))
    code, out, err = _cli(capsys, "check", "--recount", copy)
    assert code == 1 and not err
    claimed = records.read(copy / f"{RUN}.json").flops.per_step
    line = next(x for x in out if "recounted" in x)
    assert line.startswith(f"run {RUN}: {RUN}.json flops.per_step {claimed:.6g} != 1.5"), line
    assert line.endswith(
        f"recounted from {RUN}.flags on 8 CPU devices (the lowered step: more than 12% off, no "
        "rule counts it so)"
    )


def test_one_line_errors(tiny_run, package, tmp_path, capsys):
    record = dict(tiny_run.record, mllog=None)
    path = tmp_path / "no-log.json"
    path.write_text(json.dumps(record))
    code, out, err = _cli(capsys, "pack", path, f"--out={tmp_path / 'out'}")
    assert code == 2 and len(err) == 1 and not out
    assert (
        str(path) in err[0]
        and "--mllog" in err[0]
        and err[0].startswith("hpcai_jax.submission: error: ")
    )
    assert not (tmp_path / "out").exists()
    # A package's folder is never overwritten.
    code, _, err = _cli(capsys, "pack", tiny_run.results / f"{RUN}.json", f"--out={package}")
    assert code == 2 and len(err) == 1 and "not empty" in err[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = _cli(capsys, "check", empty)
    assert code == 2 and len(err) == 1 and "no run records" in err[0] and not out
    broken = tmp_path / "broken"
    shutil.copytree(package, broken)
    (broken / f"{RUN}.json").write_text("{not json")
    code, _, err = _cli(capsys, "check", broken)
    assert code == 2 and len(err) == 1 and f"{RUN}.json" in err[0]


def test_a_record_moved_with_its_log_packs_from_where_it_lies(tiny_run, tmp_path, capsys):
    # Copied off the cluster: the record names the log where the run wrote it, which is gone.
    log = Path(records.read(tiny_run.record).mllog)
    moved = tmp_path / "from-cluster"
    moved.mkdir()
    shutil.copy(log, moved / log.name)
    record = dict(tiny_run.record, mllog=f"/cluster/scratch/gone/{log.name}")
    (moved / f"{RUN}.json").write_text(json.dumps(record))
    code, _, err = _cli(capsys, "pack", moved / f"{RUN}.json", f"--out={tmp_path / 'pkg'}")
    assert code == 0, err
    assert (tmp_path / "pkg" / f"{RUN}.mllog").read_bytes() == log.read_bytes()
    (moved / log.name).unlink()
    code, out, err = _cli(capsys, "pack", moved / f"{RUN}.json", f"--out={tmp_path / 'pkg2'}")
    assert code == 2 and len(err) == 1 and not out
    assert f"/cluster/scratch/gone/{log.name}" in err[0] and str(moved / log.name) in err[0]


def _moved(tiny_run, folder: Path, record=None, log=None) -> Path:
    """The tiny run's record and log copied into `folder` (the record naming its log there),
    with `record(dict)` and `log(list of lines)` applied."""
    folder.mkdir()
    data = dict(tiny_run.record, mllog=str(folder / "run.mllog"))
    if record:
        record(data)
    (folder / f"{RUN}.json").write_text(json.dumps(data))
    lines = _lines(tiny_run.mllog)
    if log:
        log(lines)
    _write_lines(folder / "run.mllog", lines)
    return folder / f"{RUN}.json"


def test_pack_refuses_a_run_that_is_not_complete(tiny_run, tmp_path, capsys):
    """A preempted (partial) or diverged (invalid) record is no submission: one line naming
    its status, exit 2, no package."""
    for status, reason in (("partial", "preempted by SIGINT at step 7"), ("invalid", "")):
        path = _moved(
            tiny_run,
            tmp_path / status,
            record=lambda r, s=status, why=reason: r.update(status=s, reason=why),
        )
        code, out, err = _cli(capsys, "pack", path, f"--out={tmp_path / status / 'pkg'}")
        assert code == 2 and not out and len(err) == 1, err
        assert f"{path}: run {RUN} is {status}" in err[0] and "complete runs only" in err[0]
        assert reason in err[0] and not (tmp_path / status / "pkg").exists()


def test_pack_refuses_a_record_and_a_log_of_different_runs(tiny_run, tmp_path, capsys):
    """The log's run id is another's; or the log is a later run's of the same name, cut short
    where it compiled (the issue's --overwrite interrupted early), or preempted: one line each.
    The untouched pair packs."""

    def other_id(lines):
        for line in lines:
            if line["key"] in ("init_start", "run_stop"):
                line["metadata"]["run_id"] = "another-run"

    def cut(lines):
        del lines[[line["key"] for line in lines].index("run_start") :]

    def preempted(lines):
        lines[-1]["metadata"]["record_status"] = "partial"

    cases = {
        "other": (other_id, "names run another-run, not real-train: the record and the log"),
        "cut": (cut, "it ends without run_stop (its last line: init_stop)"),
        "preempted": (
            preempted,
            "not the log of complete run real-train: its run_stop ends a partial run",
        ),
        "same": (None, None),
    }
    for name, (edit, expected) in cases.items():
        path = _moved(tiny_run, tmp_path / name, log=edit)
        code, out, err = _cli(capsys, "pack", path, f"--out={tmp_path / name / 'pkg'}")
        if expected is None:
            assert code == 0, err
            continue
        assert code == 2 and not out and len(err) == 1, err
        assert f"{path}: its MLLOG" in err[0] and expected in err[0], err


# BabelStream runs in a package (hpcai_jax/submission/streams.py): NERSC-10 asks for all data
# printed to stdout, so the record and its printed output travel together, checked.
STREAM = "stream-cpu-1dev"
STREAM_RECORDS = Path(__file__).parents[1] / "docs" / "example_report" / "records"


@pytest.fixture(scope="module")
def with_stream(tiny_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("with_stream") / "package"
    runs = (tiny_run.results / f"{RUN}.json", STREAM_RECORDS / f"{STREAM}.json")
    assert main(["pack", *map(str, runs), f"--out={out}"]) == 0
    return out


def test_a_stream_run_packs_with_its_printed_output(with_stream, capsys):
    record = records.read(STREAM_RECORDS / f"{STREAM}.json")
    printed = (with_stream / "stream" / f"{STREAM}.txt").read_text()
    assert printed == record.printed and "Figure of merit: Triad" in printed
    copied = (with_stream / "stream" / f"{STREAM}.json").read_bytes()
    assert copied == (STREAM_RECORDS / f"{STREAM}.json").read_bytes()
    readme = (with_stream / "README.md").read_text()
    assert f"| {RUN} | open |" in readme and "## BabelStream (NERSC-10's run rules)" in readme
    assert f"| {STREAM} | 1 × cpu | float64 | 268435456 | 2048 | 300 | 9.20 |" in readme
    assert STREAM in json.loads((with_stream / "system.json").read_text())["runs"]
    assert main(["check", str(with_stream)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"checked run {STREAM}: BabelStream output and rules PASS" in out and out[-1] == "PASS"


def _stream_tampered(package: Path, tmp_path: Path, record=None, printed=None) -> Path:
    copy = tmp_path / "tampered"
    shutil.copytree(package, copy)
    if record:
        path = copy / "stream" / f"{STREAM}.json"
        data = json.loads(path.read_text())
        record(data)
        path.write_text(json.dumps(data))
    if printed:
        path = copy / "stream" / f"{STREAM}.txt"
        path.write_text(printed(path.read_text()))
    return copy


@pytest.mark.parametrize(
    "case",
    ["printed output edited", "a time edited in both", "bandwidth edited", "rule and validation"],
)
def test_a_tampered_stream_run_fails_check(with_stream, tmp_path, capsys, case):
    """Each edit fails naming what it broke; the README is regenerated and compared as well."""

    def both(r):
        r["kernels"]["add"]["min_s"] *= 0.9
        r["printed"] = r["printed"].replace("0.53570", "0.48213")

    def rule(r):
        r["cache"]["size_rule_ok"] = False
        r["validation"]["passed"] = False

    edits = {
        "printed output edited": (
            None,
            lambda t: t.replace("Triad       10764.382", "Triad       12764.382"),
            ["is not the printed output its record holds", f"stream/{STREAM}.txt line 13 'Triad "],
        ),
        "a time edited in both": (
            both,
            lambda t: t.replace("0.53570", "0.48213"),
            ["kernels.add.gb_per_s 12.0263 != 13.3626 (bytes_moved / min_s)", "line 12 'Add"],
        ),
        "bandwidth edited": (
            lambda r: r["kernels"]["triad"].update(gb_per_s=20.0),
            None,
            ["kernels.triad.gb_per_s 20 != 10.7644 (bytes_moved / min_s)", "README.md line"],
        ),
        "rule and validation": (
            rule,
            None,
            ["cache.size_rule_ok False != True", "validation.passed False != True"],
        ),
    }
    edit, printed, expected = edits[case]
    copy = _stream_tampered(with_stream, tmp_path, edit, printed)
    code, out, err = _cli(capsys, "check", copy)
    assert code == 1 and not err, (out, err)
    for fragment in expected:
        assert any(fragment in line for line in out), (fragment, out)


def test_pack_refuses_a_stream_run_that_breaks_the_rules(tmp_path, capsys):
    """Below the size rule, failed, or without its printed output: one line, exit 2, nothing
    written."""
    small = STREAM_RECORDS / "stream-cpu-1dev-small.json"
    record = json.loads((STREAM_RECORDS / f"{STREAM}.json").read_text())
    unprinted = tmp_path / "old.json"
    unprinted.write_text(json.dumps({k: v for k, v in record.items() if k != "printed"}))
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(dict(record, status="invalid")))
    cases = {
        small: "breaks the size rule (one array 32.0 MiB < 4 x largest cache 300.0 MiB",
        unprinted: "holds no printed output (a record from before it was kept): NERSC-10",
        failed: f"STREAM run {STREAM} is invalid (validation): pack takes valid runs",
    }
    for path, expected in cases.items():
        code, out, err = _cli(capsys, "pack", path, f"--out={tmp_path / 'pkg'}")
        assert code == 2 and not out and len(err) == 1 and expected in err[0], err
        assert str(path) in err[0] and not (tmp_path / "pkg").exists()
