"""STREAM runs in a submission package (hpcai_jax/submission/streams.py, streamderive.py): honest
runs of every output mode pack and PASS `check`; copies forged consistently (record, printed
output, README and system.json rewritten together, the output rendered by the stream module's
own code) FAIL naming the field; hostile files give one line, never a traceback or a hang; and
neither `pack` nor `check` writes outside the package. The runs are real, in this process, on
arrays sized for a 2 MiB cache, shared by the module."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import check_cli

from hpcai_jax import records
from hpcai_jax.config import ResultsConfig
from hpcai_jax.records.schema import to_dict
from hpcai_jax.settings import Settings
from hpcai_jax.stream import cache as stream_cache
from hpcai_jax.stream import report
from hpcai_jax.stream.benchmark import run_stream
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.submission import pack, streamderive, system
from hpcai_jax.submission.__main__ import main

# A host cache of 4 MiB: arrays of 16 MiB, large enough that a call is not all overhead (Triad
# within 2 × Copy on a loaded machine), small enough to run in seconds; 3 calls of each kernel,
# the first excluded, so that a mean is (min + max) / 2 exactly.
CACHE = 4 << 20
RUNS = {  # run id → its STREAM settings
    "s-one": {},
    "s-csv": {"csv": True},
    "s-all": {"devices": "all", "mibibytes": True},
    "s-each": {"devices": "each", "expect": "triad:1MB/s"},  # its expectation lines too
    "s-triad": {"kernels": "triad"},
}


def _stream(folder: Path, name: str, settings: dict) -> Path:
    config = Settings(
        mode="stream",
        stream=StreamConfig(num_times=3, **settings),
        results=ResultsConfig(results_dir=str(folder), run_name=name),
    ).validate()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert run_stream(config) == 0
    return folder / f"{name}.json"


@pytest.fixture(scope="module")
def stream_records(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stream_runs")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(stream_cache, "cpu_cache", lambda: stream_cache.CacheInfo(CACHE, "t", "host"))
        return {name: _stream(folder, name, settings) for name, settings in RUNS.items()}


@pytest.fixture(scope="module")
def stream_package(stream_records, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stream_package") / "package"
    assert main(["pack", *map(str, stream_records.values()), f"--out={out}"]) == 0
    return out


def test_honest_stream_runs_of_every_output_mode_pass(stream_package, capsys):
    """Table, CSV, sharded (MiB/s, per-device table), each device alone, Triad only."""
    code, out, err = check_cli(capsys, "check", stream_package)
    assert code == 0 and out == ["PASS"] and not err, (out, err)
    each = (stream_package / "stream" / "s-each.txt").read_text()
    assert "Each device alone (8 devices" in each
    assert not any(line.startswith("Copy ") for line in each.splitlines())  # no plain table


def test_a_training_run_and_stream_runs_pass_together(tiny_run, stream_records, tmp_path, capsys):
    runs = [tiny_run.results / "real-train.json", *stream_records.values()]
    out = tmp_path / "package"
    assert main(["pack", *map(str, runs), f"--out={out}"]) == 0
    capsys.readouterr()
    code, lines, err = check_cli(capsys, "check", out)
    assert code == 0 and lines == ["PASS"] and not err, (lines, err)


def _rewrite(copy: Path) -> None:
    """README.md and system.json as pack writes them from the (forged) records."""
    paths = sorted((copy / "stream").glob("*.json"), key=lambda p: p.stem)  # pack's order
    stream = [records.read(p) for p in paths]
    (copy / "README.md").write_text(pack.readme([], stream))
    (copy / "system.json").write_text(json.dumps(system.describe(stream, {}), indent=2) + "\n")


def forged(package: Path, tmp_path: Path, run: str, edit, printed=None) -> Path:
    """A copy of the package with `edit(record JSON)` applied to `run`, its acceptance section
    and printed output then derived again from the forged record by the stream module's own code
    (or `printed(text)`), README.md and system.json rewritten: consistent, as a forger who knows
    the code makes it."""
    copy = tmp_path / "forged"
    shutil.copytree(package, copy)
    path = copy / "stream" / f"{run}.json"
    data = json.loads(path.read_text())
    edit(data)
    try:
        record = records.read(data)
        if record.acceptance is not None:
            data["acceptance"] = to_dict(streamderive.accepted(record))
            record = records.read(data)
        text = streamderive.rendered(record, data["printed"])
    except Exception:  # a value no record holds: the output stays as it was
        text = data["printed"]
    text = printed(text) if printed else text
    data["printed"] = text
    path.write_text(json.dumps(data))
    (copy / "stream" / f"{run}.txt").write_text(text)
    with contextlib.suppress(Exception):
        _rewrite(copy)
    return copy


def _kernels(data, edit, devices=True):
    for k in data["kernels"].values():
        edit(k)
    for d in data.get("per_device") or [] if devices else []:
        for k in d["kernels"].values():
            edit(k)


def _rederive(data):
    """bytes → bandwidths → figure of merit → metrics, as the run derives them."""
    r = data
    n = 1 if r["placement"]["mode"] == "each" else r["placement"]["num_devices"]
    for k in r["kernels"].values():
        k["gb_per_s"] = k["bytes_moved"] / k["min_s"] * 1e-9
        k["gb_per_s_per_device"] = k["gb_per_s"] / n
    fom = "triad" if "triad" in r["kernels"] else list(r["kernels"])[-1]
    r["figure_of_merit"]["gb_per_s"] = r["kernels"][fom]["gb_per_s"]
    for key, k in r["kernels"].items():
        for name in ("gb_per_s", "gb_per_s_per_device", "min_s", "max_s", "avg_s"):
            r["metrics"][f"stream/{key}/{name}"] = k[name]
    r["metrics"]["stream/figure_of_merit/gb_per_s"] = r["figure_of_merit"]["gb_per_s"]


def _times(scale, only=("min_s", "avg_s", "max_s")):
    def edit(data):
        _kernels(data, lambda k: k.update({n: k[n] * scale for n in only}), devices=False)
        _rederive(data)

    return edit


def _each(key, value):
    def edit(data):
        for k in data["kernels"].values():
            k[key] = value(k[key]) if callable(value) else value

    return edit


def _set(path: str, value):
    def edit(data):
        *parents, last = path.split(".")
        for p in parents:
            data = data[p]
        data[last] = value(data[last]) if callable(value) else value

    return edit


def _chain(*edits):
    def edit(data):
        for e in edits:
            e(data)

    return edit


def _elements(scale):
    def edit(data):
        a = data["array"]
        a["elements"] *= scale
        a["bytes_per_array"] *= scale
        a["bytes_total"] *= scale
        for k in data["kernels"].values():
            k["bytes_moved"] *= scale
            k["xla_bytes_accessed"] *= scale
        _rederive(data)

    return edit


def _fast_triad(gb):
    def edit(data):
        k = data["kernels"]["triad"]
        k["min_s"] = k["bytes_moved"] / (gb * 1e9)
        k["max_s"] = max(k["max_s"], k["min_s"])
        k["avg_s"] = (k["min_s"] + k["max_s"]) / 2  # 2 timed calls
        _rederive(data)

    return edit


def _ten_calls(data):
    """The run claimed of 10 calls a kernel, gold values replayed for them, each mean one that 9
    timed calls can give: consistent, but for what follows. From 10 calls check asks that no
    kernel lead Copy and Mul by more than COPY_FACTOR, which the fixture's 2 timed calls of 16
    MiB on a loaded machine can break honestly (Triad 24.9 GB/s over Mul's 10.1 once): a forger
    slows such a kernel's fastest call to 1.5 x the leader of the two first."""
    from hpcai_jax.stream import validate

    data["run"]["num_times"] = data["config"]["stream"]["num_times"] = 10
    a = data["array"]
    gold = validate.gold_values("all", 10, a["precision"], a["elements"])
    data["validation"]["gold"].update(a=gold.a, b=gold.b, c=gold.c, dot=gold.dot)
    kernels = data["kernels"]
    lead = max(kernels[k]["gb_per_s"] for k in ("copy", "mul"))
    for k in kernels.values():
        if k["gb_per_s"] > 1.5 * lead:
            k["min_s"] *= k["gb_per_s"] / (1.5 * lead)
            k["max_s"] = max(k["max_s"], k["min_s"])
    _kernels(data, lambda k: k.update(avg_s=(k["min_s"] + k["max_s"]) / 2))
    _rederive(data)
    for row in data.get("per_process_gb_per_s") or []:  # process 0's own, in float32
        row.update({key: float(np.float32(k["gb_per_s"])) for key, k in kernels.items()})


def _triad_times_copy(factor):
    def edit(data):
        _ten_calls(data)
        copy = max(data["kernels"][k]["gb_per_s"] for k in ("copy", "mul"))
        _fast_triad(factor * copy)(data)

    return edit


def _two_cores(data):
    implementation = data["run"]["implementation"]
    data["run"]["implementation"] = implementation.rsplit(", ", 1)[0] + ", 2 logical cores)"


def _small_cache(data):
    """A cache 16 × larger, its message the rule's verdict on it, the verdict flipped to ok."""
    c = data["cache"]
    c["bytes"] = 16 * c["bytes"]
    info = stream_cache.CacheInfo(c["bytes"], c["source"], c["scope"])
    c["message"] = stream_cache.check_size(c["array_bytes_per_cache"], 1, info).message
    c["size_rule_ok"] = True


def _h100(data):
    """A run claimed of one H100 at 10,000 GB/s (3 × its datasheet), everything consistent."""
    data["placement"].update(device_kind="NVIDIA H100 80GB HBM3", platform="gpu")
    data["provenance"].update(device_kind="NVIDIA H100 80GB HBM3", backend="gpu")
    jax = data["provenance"]["versions"]["jax"]
    data["run"]["implementation"] = f"JAX {jax} (gpu: NVIDIA H100 80GB HBM3)"
    data["cache"].update(bytes=50 << 20, source="table: H100", scope="device")
    for k in data["kernels"].values():
        k["min_s"] = k["bytes_moved"] / 10e12
        k["avg_s"] = k["max_s"] = k["min_s"] * 1.1
    _rederive(data)


# (run, edit, printed edit, a fragment of the failure line): the forgeries.
FORGERIES = {
    "size rule flipped": ("s-one", _small_cache, None, "cache.size_rule_ok"),
    "a larger cache, rule kept": ("s-one", _set("cache.bytes", 1 << 20), None, "cache.bytes"),
    "dot failed, run passed": (
        "s-one",
        _chain(
            _set("validation.checks.dot.error", 1.0), _set("validation.checks.dot.passed", False)
        ),
        None,
        "validation.passed",
    ),
    "dot failed, both passed": (
        "s-one",
        _set("validation.checks.dot.error", 1.0),
        None,
        "validation.checks.dot.passed",
    ),
    "bytes x3": (
        "s-one",
        _chain(_each("bytes_moved", lambda b: 3 * b), _rederive),
        None,
        "bytes_moved",
    ),
    "triad moves 4 arrays": (
        "s-one",
        _set("kernels.triad.arrays_moved", 4),
        None,
        "kernels.triad.arrays_moved",
    ),
    "elements x8, timings kept": ("s-one", _elements(8), None, "validation.gold.dot"),
    "float64 claimed float32": (
        "s-one",
        _chain(_set("array.precision", "float32"), _set("config.stream.precision", "float32")),
        None,
        "array.itemsize",
    ),
    "bfloat16 of 8 bytes": (
        "s-one",
        _chain(_set("array.precision", "bfloat16"), _set("config.stream.precision", "bfloat16")),
        None,
        "array.itemsize",
    ),
    "num_times 3 -> 10, gold replayed": ("s-one", _ten_calls, None, "NOT CAUGHT"),
    "min_s alone / 3": ("s-one", _times(1 / 3, ("min_s",)), None, "is no mean of 2 calls"),
    "min > avg > max": (
        "s-one",
        _chain(_each("max_s", lambda v: v / 10), _rederive),
        None,
        "avg_s",
    ),
    "NaN bandwidth": (
        "s-one",
        _each("gb_per_s", float("nan")),
        None,
        "gb_per_s: expected a finite",
    ),
    "8e289 GB/s": ("s-one", _fast_triad(8e289), None, "kernels.triad.gb_per_s"),
    "triad 3 x copy": ("s-one", _triad_times_copy(3), None, "no kernel leads Copy and Mul"),
    "triad 2,000 GB/s on 2 vCPUs": (
        "s-one",
        _chain(_two_cores, _fast_triad(2000)),
        None,
        "2 logical cores × 50 GB/s",
    ),
    "an H100 at 10,000 GB/s": ("s-one", _h100, None, "NVIDIA H100 datasheet"),
    "num_times 3 -> 1000": (
        "s-one",
        _chain(_set("run.num_times", 1000), _set("config.stream.num_times", 1000)),
        None,
        "validation.gold",
    ),
    "x10 table appended": (
        "s-one",
        lambda d: None,
        lambda t: t + t.replace("Triad       ", "Triad       9"),
        "line",
    ),
    "figure of merit note edited": (
        "s-one",
        lambda d: None,
        lambda t: t.replace(" GB/s)", " GB/s, certified)"),
        "Figure of merit",
    ),
    "header edited": (
        "s-one",
        lambda d: None,
        lambda t: t.replace("Precision: double", "Precision: float"),
        "Precision",
    ),
    "csv extra column": ("s-csv", lambda d: None, lambda t: t.replace("\n", ",1\n"), "line 1"),
    "64 devices claimed": ("s-all", _set("placement.num_devices", 64), None, "placement"),
    "8 devices, 1 listed": (
        "s-all",
        _set("placement.devices", lambda v: v[:1]),
        None,
        "placement.devices",
    ),
    "triad missing from the kernels": (
        "s-one",
        lambda d: d["kernels"].pop("triad"),
        None,
        "kernels",
    ),
    "cpu with a TPU v5p": (
        "s-one",
        _chain(_set("placement.device_kind", "TPU v5p"), _set("provenance.device_kind", "TPU v5p")),
        None,
        "placement.platform",
    ),
    "per-device figure edited": (
        "s-all",
        _each("gb_per_s_per_device", lambda v: 2 * v),
        None,
        "gb_per_s_per_device",
    ),
    "figure of merit edited": (
        "s-one",
        _set("figure_of_merit.gb_per_s", 99.0),
        None,
        "figure_of_merit",
    ),
    "metrics edited": (
        "s-one",
        lambda d: d["metrics"].update({"stream/triad/gb_per_s": 99.0}),
        None,
        "metrics",
    ),
    "xla bytes edited": (
        "s-one",
        _set("kernels.copy.xla_bytes_accessed", 1.0),
        None,
        "xla_bytes_accessed",
    ),
    "byte-weight mismatches dropped": (
        "s-one",
        _set("byte_weight_mismatches", ["Copy: BabelStream counts 1 bytes, XLA 2"]),
        None,
        "byte_weight_mismatches",
    ),
    "each: a device made faster": (
        "s-each",
        lambda d: d["per_device"][0]["kernels"]["copy"].update(min_s=1e-9),
        None,
        "per_device[0].kernels.copy",
    ),
    "each: headline not the slowest": (
        "s-each",
        _times(0.5),
        None,
        "the slowest device's",
    ),
    "rule message flipped": (
        "s-one",
        _set("cache.message", lambda m: m.replace(">=", "<")),
        None,
        "cache.message",
    ),
    "validation verdict true, check false": (
        "s-one",
        _set("validation.checks.a.passed", False),
        None,
        "validation.checks.a.passed",
    ),
    "gold values edited": ("s-one", _set("validation.gold.a", 1.0), None, "validation.gold.a"),
    "tolerance widened": (
        "s-one",
        _set("validation.checks.a.tolerance", 1.0),
        None,
        "validation.checks.a.tolerance",
    ),
    "yes as true": (
        "s-one",
        _set("validation.passed", "yes"),
        None,
        "validation.passed: expected true",
    ),
    "on as a csv flag": ("s-one", _set("config.stream.csv", "on"), None, "config.stream.csv"),
    "10**400 bytes": (
        "s-one",
        _set("kernels.copy.bytes_moved", 10**400),
        None,
        "bytes_moved: expected",
    ),
    "10**400 elements": (
        "s-one",
        _set("array.elements", 10**400),
        None,
        "array.elements: expected",
    ),
    "min_s = 0": ("s-one", _set("kernels.copy.min_s", 0), None, "kernels.copy.min_s: expected"),
    "min_s missing": (
        "s-one",
        lambda d: d["kernels"]["copy"].pop("min_s"),
        None,
        "kernels.copy.min_s: expected",
    ),
    "no kernels": ("s-one", _set("kernels", {}), None, "kernels: expected a non-empty"),
    "kernels missing": ("s-one", lambda d: d.pop("kernels"), None, "kernels: expected"),
    "no devices listed": (
        "s-one",
        _set("placement.devices", []),
        None,
        "expected a non-empty list",
    ),
    "each: a device without Dot": (
        "s-each",
        lambda d: d["per_device"][3]["kernels"].pop("dot"),
        None,
        "per_device[3].kernels ['copy', 'mul', 'add', 'triad'] != ",
    ),
    "another process faster": (
        "s-one",
        lambda d: d["per_process_gb_per_s"][0].update(triad=999.0),
        None,
        "per_process_gb_per_s[0].triad",
    ),
    "hosts not one per process": (
        "s-one",
        _set("provenance.hosts", lambda h: h * 2),
        None,
        "provenance.hosts",
    ),
    "num_times 10**12": (
        "s-one",
        _chain(_set("run.num_times", 10**12), _set("config.stream.num_times", 10**12)),
        None,
        "over the 1000000 calls check replays",
    ),
}


@pytest.mark.parametrize("case", FORGERIES)
def test_a_forged_stream_run_fails_check_naming_the_field(stream_package, tmp_path, capsys, case):
    run, edit, printed, fragment = FORGERIES[case]
    copy = forged(stream_package, tmp_path, run, edit, printed)
    code, out, err = check_cli(capsys, "check", copy)
    if fragment == "NOT CAUGHT":  # what a forger who replays the gold values gets through
        assert code == 0 and out == ["PASS"], out
        return
    assert code == 1 and not err, (out, err)
    mine = [line for line in out if line.startswith(f"run {run}: ")]
    assert any(fragment in line for line in mine), (fragment, out)


# The package's boundaries (hpcai_jax/submission/safe.py) -----------------------------------

TRAIN = Path(__file__).parents[1] / "docs" / "example_report" / "records" / "cpu-M1-P1.json"
NOT_PLAIN = ["../../evil", "../evil", "/tmp/evil-abs", "sub/x", "..", ".", "", "a\x00b", ".hidden"]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("run_id", NOT_PLAIN)
def test_pack_takes_only_a_run_id_that_is_a_plain_file_name(
    stream_records, tmp_path, capsys, run_id
):
    """STREAM and training records alike: one line naming the file and its run_id, exit 2,
    nothing written anywhere (the files under the test's folder, and /tmp/evil-abs*, before
    and after)."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    for source, name in ((stream_records["s-one"], "stream.json"), (TRAIN, "train.json")):
        data = json.loads(source.read_text())
        data["run_id"] = run_id
        record = work / name
        record.write_text(json.dumps(data))
        before = _files(tmp_path)
        code, out, err = check_cli(capsys, "pack", record, f"--out={work / 'pkg'}")
        assert code == 2 and not out and len(err) == 1, err
        assert f"{record}: run_id {run_id!r} is not a plain file name" in err[0], err
        assert _files(tmp_path) == before and not list(Path("/tmp").glob("evil-abs*"))


@pytest.mark.parametrize("run_id", ["..", "...", "-", "a b"])
def test_check_takes_only_a_run_id_that_is_a_plain_file_name(
    stream_package, tmp_path, capsys, run_id
):
    """A STREAM record renamed with its run id (`..` packed as stream/...json): one line naming
    it, no figure read."""
    copy = tmp_path / "copy"
    shutil.copytree(stream_package, copy)
    data = json.loads((copy / "stream" / "s-one.json").read_text())
    data["run_id"] = run_id
    (copy / "stream" / "s-one.json").unlink()
    (copy / "stream" / f"{run_id}.json").write_text(json.dumps(data))
    code, out, err = check_cli(capsys, "check", copy)
    assert code == 1 and not err, (out, err)
    mine = [line for line in out if line.startswith(f"run {run_id}: ")]
    assert len(mine) == 1 and "is not a plain file name" in mine[0], out


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


LINKS = {  # what replaces a file of the package → the failure line's fragment
    "a .json linked to a FIFO": (
        "stream/s-one.json",
        lambda copy, out: (copy / "stream" / "s-one.json").symlink_to(_fifo(out / "fifo")),
        "stream/s-one.json is a symbolic link",
    ),
    "a .txt linked outside": (
        "stream/s-one.txt",
        lambda copy, out: (copy / "stream" / "s-one.txt").symlink_to(
            shutil.copy(copy.parent / "src" / "stream" / "s-one.txt", out / "t.txt")
        ),
        "stream/s-one.txt is a symbolic link",
    ),
    "stream/ linked outside": (
        "stream",
        lambda copy, out: (copy / "stream").symlink_to(
            shutil.copytree(copy.parent / "src" / "stream", out / "stream")
        ),
        "stream is a symbolic link",
    ),
    "a FIFO as README.md": (
        "README.md",
        lambda copy, out: _fifo(copy / "README.md"),
        "README.md is not a regular file",
    ),
    "system.json linked to a FIFO": (
        "system.json",
        lambda copy, out: (copy / "system.json").symlink_to(_fifo(out / "fifo")),
        "system.json is a symbolic link",
    ),
}


@pytest.mark.parametrize("case", LINKS)
def test_check_refuses_links_and_fifos_without_opening_them(stream_package, tmp_path, capsys, case):
    """A FIFO would wait forever for a writer, a link leads outside the package: each is one
    failure line, and nothing of the package is read."""
    name, make, fragment = LINKS[case]
    shutil.copytree(stream_package, tmp_path / "src")
    copy, outside = tmp_path / "copy", tmp_path / "outside"
    shutil.copytree(stream_package, copy)
    outside.mkdir()
    target = copy / name
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    make(copy, outside)
    code, out, err = check_cli(capsys, "check", copy)
    assert (
        code == 1
        and not err
        and out == [f"package: {fragment}: a package holds its own files"]
        or (code == 1 and out == [f"package: {fragment} (a FIFO, socket or device)"])
    ), (out, err)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deep_json_is_one_line_everywhere(stream_package, tmp_path, capsys):
    """100,000 levels of nesting (json's RecursionError, past the reader's depth bound) as a
    STREAM record (a failure line), as a training record and as system.json (exit 2, one line),
    and to records.read (RecordError)."""
    deep = {"mode": "stream", "run_id": "s-one", "kernels": json.loads(_nested(70))}
    for name, text in {"flat": json.dumps(deep), "deep": _nested(100_000)}.items():
        copy = tmp_path / name
        shutil.copytree(stream_package, copy)
        (copy / "stream" / "s-one.json").write_text(text)
        code, out, err = check_cli(capsys, "check", copy)
        assert code == 1 and not err, (out, err)
        assert any(
            line.startswith("run s-one: ") and "nested deeper than 64" in line for line in out
        )
    for name in ("real-x.json", "system.json"):
        copy = tmp_path / f"top-{name}"
        shutil.copytree(stream_package, copy)
        (copy / name).write_text(_nested(100_000))
        code, out, err = check_cli(capsys, "check", copy)
        assert code == 2 and not out and len(err) == 1 and "nested deeper than 64" in err[0], err
    (tmp_path / "deep.json").write_text(_nested(100_000))
    with pytest.raises(records.RecordError, match="nested deeper than 64"):
        records.read(tmp_path / "deep.json")


def test_pack_and_check_write_nothing_outside_the_package(stream_records, tmp_path, capsys):
    """Hostile records (a run id that climbs out, a FIFO, deep JSON) given to pack, then check
    run on the package and on hostile copies: the files under the test's folder change only
    inside --out. (The tests run as root, which a read-only folder does not stop: the set of
    files is compared instead.)"""
    work = tmp_path / "parent" / "records"
    work.mkdir(parents=True)
    for name, path in stream_records.items():
        shutil.copy(path, work / f"{name}.json")
    hostile = json.loads((work / "s-one.json").read_text())
    hostile["run_id"] = "../../evil"
    (work / "evil.json").write_text(json.dumps(hostile))
    _fifo(work / "fifo.json")
    before = _files(tmp_path)
    for given in ([work / "evil.json"], [work / "fifo.json"], [work]):
        code, out, err = check_cli(capsys, "pack", *given, f"--out={tmp_path / 'parent' / 'pkg'}")
        assert code == 2 and len(err) == 1, err
    assert _files(tmp_path) == before
    (work / "evil.json").unlink()
    (work / "fifo.json").unlink()
    out = tmp_path / "parent" / "pkg"
    assert main(["pack", str(work), f"--out={out}"]) == 0
    capsys.readouterr()
    before = _files(tmp_path)
    code, lines, err = check_cli(capsys, "check", out)
    assert code == 0 and lines == ["PASS"], (lines, err)
    (out / "stream" / "s-one.json").write_text(json.dumps(hostile))
    before = _files(tmp_path)
    code, lines, err = check_cli(capsys, "check", out)
    assert code == 1 and _files(tmp_path) == before, (lines, err)


def test_a_full_disk_is_one_line_naming_the_path(stream_records, tmp_path, capsys, monkeypatch):
    """ENOSPC and EDQUOT while pack writes: one line naming the file of the package it was
    writing, exit 74, and neither the package nor its temporary folder is left."""
    import errno

    from hpcai_jax.submission import streams

    for number in (errno.ENOSPC, errno.EDQUOT):

        def full(*args, n=number):
            raise OSError(n, os.strerror(n))

        monkeypatch.setattr(streams, "write", full)
        out = tmp_path / f"pkg{number}"
        code, lines, err = check_cli(capsys, "pack", stream_records["s-one"], f"--out={out}")
        assert code == 74 and not lines and len(err) == 1, err
        assert f"{out / 'stream' / 's-one.json'}: no space left to write it" in err[0], err
        assert os.strerror(number) in err[0] and list(tmp_path.iterdir()) == []


def test_a_stream_run_packed_twice_fails(stream_package, tmp_path, capsys):
    """The same run under a second id, its README row and system.json entry written by pack."""
    copy = tmp_path / "twice"
    shutil.copytree(stream_package, copy)
    data = json.loads((copy / "stream" / "s-one.json").read_text())
    data["run_id"] = "s-one-again"
    (copy / "stream" / "s-one-again.json").write_text(json.dumps(data))
    shutil.copy(copy / "stream" / "s-one.txt", copy / "stream" / "s-one-again.txt")
    _rewrite(copy)
    code, out, err = check_cli(capsys, "check", copy)
    assert code == 1 and not err, (out, err)
    assert out == [
        "run s-one-again: the same kernel timings and set-up times as run s-one: one STREAM run "
        "packed twice under two ids"
    ], out


def _forged_acceptance(package: Path, tmp_path: Path, edit) -> Path:
    """A copy with s-each's acceptance section edited by `edit(JSON)` and its printed output
    decorated from the edited section, as the run would have printed it."""
    from hpcai_jax.stream import acceptance
    from hpcai_jax.stream.benchmark import StreamText

    copy = tmp_path / "accepted"
    shutil.copytree(package, copy)
    path = copy / "stream" / "s-each.json"
    data = json.loads(path.read_text())
    edit(data)
    record = records.read(data)
    text, fom = report.render(streamderive.printout(record, data["printed"]))
    text = acceptance.decorate(record, StreamText(text, (), fom, False)).stdout
    data["printed"] = text
    path.write_text(json.dumps(data))
    (copy / "stream" / "s-each.txt").write_text(text)
    _rewrite(copy)
    return copy


def _failed_expectation(data):
    data["acceptance"]["expectations"][0]["passed"] = False
    data["acceptance"]["passed"] = False


def _passed_expectation(data):  # the expectation raised past every device's figure, kept PASS
    data["config"]["stream"]["expect"] = "triad:1000000GB/s"


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (_failed_expectation, "acceptance is not what its figures and config.stream give"),
        (_passed_expectation, "acceptance is not what its figures and config.stream give"),
        (lambda d: d.update(acceptance=None), "acceptance is missing"),
    ],
    ids=["verdict flipped", "expectation raised, verdict kept", "section dropped"],
)
def test_an_acceptance_verdict_is_re_derived_never_read(
    stream_package, tmp_path, capsys, edit, fragment
):
    """The rule set's clauses, expectations and outliers (stream/acceptance.py) are derived
    again from the run's figures and settings: an edited verdict, printed consistently, FAILs."""
    code, out, err = check_cli(capsys, "check", _forged_acceptance(stream_package, tmp_path, edit))
    assert code == 1 and not err, (out, err)
    assert any(line.startswith("run s-each: ") and fragment in line for line in out), out


def test_pack_refuses_a_stream_run_check_would_fail(stream_records, tmp_path, capsys):
    """A record forged (Triad's bytes × 3, its bandwidth re-derived) or malformed (min_s 0): one
    line naming the file and check's first line, exit 2, nothing written."""
    data = json.loads(stream_records["s-one"].read_text())
    forgeries = {
        "bytes": (
            _chain(_set("kernels.triad.bytes_moved", lambda b: 3 * b), _rederive),
            "bytes_moved",
        ),
        "zero": (_set("kernels.copy.min_s", 0), "kernels.copy.min_s: expected a number > 0"),
    }
    for name, (edit, fragment) in forgeries.items():
        forged_data = json.loads(json.dumps(data))
        edit(forged_data)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(forged_data))
        code, out, err = check_cli(capsys, "pack", path, f"--out={tmp_path / 'pkg'}")
        assert code == 2 and not out and len(err) == 1, err
        assert f"{path}: STREAM run s-one would fail check: " in err[0] and fragment in err[0], err
        assert not (tmp_path / "pkg").exists()


def test_a_full_disk_is_recognised_however_a_library_words_it():
    """orbax and tensorstore (pack --with_weights) raise their own exceptions for ENOSPC: the
    words decide, and anything else stays a plain write error (exit 2)."""
    import errno

    from hpcai_jax.errors import is_full
    from hpcai_jax.submission import safe

    worded = ValueError("Error writing: [Errno 28] No space left on device: 'w/params'")
    for e, full in (
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), True),
        (worded, True),
        (OSError(errno.EACCES, os.strerror(errno.EACCES)), False),
        (ValueError("shape mismatch"), False),
    ):
        assert is_full(e) is full
        error = safe.written(Path("pkg/x.weights"), e)
        assert error.exit_code == (74 if full else 2)
        assert str(error).startswith("pkg/x.weights: ")
