"""BabelStream's CUDA build beside the engine (hpcai_jax/acceptance/babelstream_cuda.py): its CSV
read from the CUDA model's real output format, the ratio table and items, the interleaved rounds
within a budget, the skip line without nvcc, a stand-in cuda-stream run end to end against the
engine's STREAM on a CPU, the vendored source unchanged, and, where nvcc exists, its build."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcai_jax.acceptance import babelstream_cuda as bs
from hpcai_jax.acceptance.items import FAIL, PASS, WARN
from hpcai_jax.acceptance.sizes import SMOKE
from hpcai_jax.nodecheck.budget import Budget
from hpcai_jax.nodecheck.rows import NA

# `cuda-stream --arraysize 134217728 --csv` as the CUDA model prints it: its device lines go to
# stdout before the table even under --csv; the numbers in C++'s default stream format.
CUDA_CSV = """\
CUDA Driver: 13000
CUDA Device 0: "NVIDIA H200" 132 SMs(9,0) Memory: 3201 MHz x 6144-bit = 4917.25 GB/s PEAK, ECC is ON
Memory Allocation: DEFAULT
Parallel for kernel config: thread blocks of size 256
Reduction kernel config: 528 groups of (fixed) size 1024
function,num_times,n_elements,sizeof,max_MB_per_sec,min_runtime,max_runtime,avg_runtime
Copy,100,134217728,8,4.01942e+06,0.000534277,0.000551108,0.000541043
Mul,100,134217728,8,3.98126e+06,0.000539398,0.000556012,0.000546571
Add,100,134217728,8,4.10244e+06,0.000785197,0.000801327,0.000791842
Triad,100,134217728,8,4.10971e+06,0.000783808,0.000799131,0.000790117
Dot,100,134217728,8,4.35759e+06,0.000492814,0.000519876,0.000503328
"""


def test_the_cuda_models_csv_is_read_past_its_device_lines():
    runs = bs.parse_csv(CUDA_CSV)
    assert list(runs) == ["Copy", "Mul", "Add", "Triad", "Dot"]
    copy = runs["Copy"]
    assert (copy.num_times, copy.n_elements, copy.sizeof) == (100, 134217728, 8)
    assert copy.min_s == pytest.approx(0.000534277)
    for run, printed_mb_per_s in zip(
        runs.values(), (4.01942e6, 3.98126e6, 4.10244e6, 4.10971e6, 4.35759e6), strict=True
    ):
        # The rate recomputed from the fastest call is the one BabelStream printed.
        assert run.bytes_per_s == pytest.approx(printed_mb_per_s * 1e6, rel=1e-5)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("Function    MBytes/sec\nCopy 1.0 0.1 0.1 0.1\n", "no BabelStream CSV table"),
        ("function,num_times\n", "a BabelStream CSV header with no rows"),
        (CUDA_CSV.replace("Copy,100", "Copy,many"), "not a BabelStream CSV row"),
        (CUDA_CSV.replace("Dot,", "Nope,"), "not a BabelStream CSV row"),
        (CUDA_CSV.replace("0.000534277", "0"), "not a BabelStream CSV row"),
    ],
)
def test_what_is_not_babelstreams_table_is_refused(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        bs.parse_csv(text)


def _round(engine_first, engine, babel):
    return bs.Round(engine_first, 1024, engine, babel)


def test_the_comparison_takes_medians_and_each_rounds_ratio():
    rounds = [
        _round(True, {"Copy": 9.0e12, "Dot": 2.0e12}, {"Copy": 10.0e12, "Dot": 4.0e12}),
        _round(False, {"Copy": 12.0e12, "Dot": 2.0e12}, {"Copy": 10.0e12, "Dot": 4.0e12}),
        _round(True, {"Copy": 10.0e12, "Dot": 2.0e12}, {"Copy": 10.0e12, "Dot": 4.0e12}),
    ]
    copy, dot = bs.compare(rounds)
    assert (copy.kernel, copy.engine, copy.babelstream) == ("Copy", 10.0e12, 10.0e12)
    assert copy.per_round == pytest.approx((0.9, 1.2, 1.0)) and copy.ratio == 1.0
    assert dot.ratio == 0.5
    text = bs.table([copy, dot], "heading")
    assert text.splitlines()[0] == "heading"
    assert "engine / BS" in text.splitlines()[1]
    assert text.splitlines()[2].split() == ["Copy", "10000.0", "10000.0", "1.000"] + [
        "0.900",
        "1.200",
        "1.000",
    ]
    items = bs.comparison_items([copy, dot], "BabelStream CUDA", "n")
    assert [(i.name, i.verdict) for i in items] == [
        ("babelstream copy: engine / BabelStream", PASS),
        ("babelstream dot: engine / BabelStream", WARN),  # below RATIO_PASS: a WARN, not a FAIL
    ]
    assert items[0].ratio == 1.0 and items[1].ratio == 0.5 and items[0].unit == "B/s"
    assert "per round 0.900, 1.200, 1.000" in items[0].note


def test_rounds_alternate_who_goes_first_and_stop_when_the_budget_says_no():
    calls, grants = [], iter([True, True, False])

    def engine():
        calls.append("engine")
        return {"Copy": 1.0}, 4096, True

    def babelstream(elements):
        calls.append(f"babelstream {elements}")
        return bs.parse_csv(CUDA_CSV)

    rounds = bs.measure_rounds(engine, babelstream, lambda s: next(grants), rounds=3)
    assert [r.engine_first for r in rounds] == [True, False]
    # The engine's first run fixes the size BabelStream is given.
    assert calls == ["engine", "babelstream 4096", "babelstream 4096", "engine"]
    assert rounds[0].babelstream["Copy"] == bs.parse_csv(CUDA_CSV)["Copy"].bytes_per_s


def test_arch_comes_from_the_compute_capability():
    assert bs.arch_of("9.0") == "sm_90"
    assert bs.arch_of("10.0") == "sm_100"
    assert bs.arch_of(None) == "native" and bs.arch_of("n/a") == "native"


def test_the_nvcc_command_is_upstreams_cuda_model_with_the_devices_arch(tmp_path):
    command = bs.nvcc_command(Path("nvcc"), "sm_90", tmp_path / "b", tmp_path, compat=False)
    assert command[0] == "nvcc" and "-arch=sm_90" in command
    for flag in ("-O3", "--extended-lambda", "-DCUDA", "-DDEFAULT", "-DGRID_STRIDE"):
        assert flag in command
    assert command[-2:] == ["-o", str(tmp_path / "b")] and "-lnvidia-ml" in command
    assert not any("compat" in c for c in command)
    compat = bs.nvcc_command(Path("nvcc"), "sm_90", tmp_path / "b", tmp_path, compat=True)
    assert f"-I{bs.SOURCE / 'compat'}" in compat


def test_the_vendored_source_is_upstreams_unchanged():
    """The blob ids the vendored README lists are those of the files (git hash-object)."""
    listed = {}
    for line in (bs.SOURCE / "README.md").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[1]) == 40:
            listed[parts[0]] = parts[1]
    assert set(listed) == {"LICENSE"} | {s for s in bs.SOURCES if s.startswith("src/")}
    for name, blob in listed.items():
        data = (bs.SOURCE / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name


@pytest.fixture
def no_nvcc(monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for name in ("CUDA_HOME", "CUDA_PATH", bs.PREBUILT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(bs, "PLACES", ())
    monkeypatch.setattr(bs, "WHEEL_GLOB", "no-such-folder/nvcc")


def _ctx(tmp_path, backend="cpu"):
    return SimpleNamespace(sizes=SMOKE, backend=backend, out_dir=tmp_path)


def _allotment(seconds=600.0):
    return Budget(seconds, {"babelstream": 1.0}).start("babelstream")


def test_without_nvcc_the_group_is_one_row_saying_so(no_nvcc, tmp_path, monkeypatch):
    assert bs.find_nvcc() is None
    [item] = bs.babelstream_items(_ctx(tmp_path), _allotment())
    assert (item.name, item.verdict, item.value) == (bs.BUILD_ITEM, NA, None)
    assert item.note.startswith("skipped: no nvcc (PATH, $CUDA_HOME")
    assert bs.PREBUILT_ENV in item.note and "\n" not in item.note
    # On a CUDA GPU the missing comparison is a WARN.
    monkeypatch.setattr(bs, "compute_capability", lambda: "9.0")
    [item] = bs.babelstream_items(_ctx(tmp_path, "gpu"), _allotment())
    assert item.verdict == WARN and item.note.startswith("skipped: no nvcc")


def test_the_build_command_line_skips_in_one_line_without_nvcc(no_nvcc, tmp_path, capsys):
    assert bs.main([str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err
    assert err == "babelstream_cuda: skipped: no nvcc found\n"


def test_nvcc_is_found_in_a_pip_wheels_folder(no_nvcc, tmp_path, monkeypatch):
    wheel_bin = tmp_path / "site" / "nvidia" / "cu13" / "bin"
    wheel_bin.mkdir(parents=True)
    (wheel_bin / "nvcc").write_text("#!/bin/sh\n")
    (wheel_bin / "nvcc").chmod(0o755)
    monkeypatch.setattr(bs, "WHEEL_GLOB", "nvidia/cu*/bin/nvcc")
    assert bs.find_nvcc(site_dirs=[str(tmp_path / "site")]) == wheel_bin / "nvcc"


FAKE_NVCC = """#!/bin/sh
case "$1" in
  --version) echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0 ;;
  -E) exit 0 ;;
esac
echo "CUDAStream.cu(8): error: something the fake compiler cannot do" >&2
exit 1
"""


@pytest.mark.slow
def test_a_failed_build_is_one_row_with_nvccs_first_error(no_nvcc, tmp_path, monkeypatch):
    fake = tmp_path / "empty-bin" / "nvcc"
    fake.write_text(FAKE_NVCC)
    fake.chmod(0o755)
    monkeypatch.setattr(bs, "CACHE", tmp_path / "cache")
    [item] = bs.babelstream_items(_ctx(tmp_path), _allotment())
    assert item.verdict == NA and item.note.startswith("skipped: the build failed: ")
    assert "error: something the fake compiler cannot do" in item.note
    assert "fake compiler" in (tmp_path / "cache" / "sm_90" / "build.log").read_text()


# A stand-in for cuda-stream: checks its arguments, records them, prints the CUDA model's CSV
# for the size it was given at 1 ms per Copy call (so that its rates are known).
FAKE_CUDA_STREAM = """#!{python}
import sys
args = sys.argv[1:]
open({log!r}, "a").write(" ".join(args) + "\\n")
if {fail!r}:
    print({fail!r}, file=sys.stderr)
    sys.exit(1)
n = int(args[args.index("--arraysize") + 1])
times = int(args[args.index("--numtimes") + 1])
size = 4 if "--float" in args else 8
print("CUDA Driver: 13000")
print("function,num_times,n_elements,sizeof,max_MB_per_sec,min_runtime,max_runtime,avg_runtime")
for name, weight in (("Copy", 2), ("Mul", 2), ("Add", 3), ("Triad", 3), ("Dot", 2)):
    print(f"{{name}},{{times}},{{n}},{{size}},{{weight * n * size / 1e3:g}},0.001,0.002,0.0015")
"""


def _fake_cuda_stream(tmp_path, fail=""):
    fake = tmp_path / "prebuilt" / "cuda-stream"
    fake.parent.mkdir()
    fake.write_text(
        FAKE_CUDA_STREAM.format(python=sys.executable, log=str(tmp_path / "calls"), fail=fail)
    )
    fake.chmod(0o755)
    (fake.parent / "build.json").write_text(json.dumps({"arch": "sm_90", "nvcc": "13.0.88"}))
    return fake


@pytest.mark.slow
def test_a_prebuilt_cuda_stream_runs_beside_the_engine_in_interleaved_rounds(
    no_nvcc, tmp_path, monkeypatch
):
    """The GPU path on a CPU: the engine's STREAM really runs (the smoke sizes), the stand-in
    for cuda-stream gets the same size, iterations and precision, and every kernel is a row."""
    fake = _fake_cuda_stream(tmp_path)
    monkeypatch.setenv(bs.PREBUILT_ENV, str(fake))
    monkeypatch.setattr(bs, "compute_capability", lambda: "9.0")
    items = bs.babelstream_items(_ctx(tmp_path, "gpu"), _allotment())
    build, *kernels = items
    assert build.verdict == PASS and "prebuilt" in build.note and "sm_90" in build.note
    assert "no nvcc" in build.note  # why the node's own build was not used
    assert [i.name for i in kernels] == [
        f"babelstream {k}: engine / BabelStream" for k in ("copy", "mul", "add", "triad", "dot")
    ]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == bs.ROUNDS
    elements = SMOKE.stream_mib * 2**20 // 8  # float64
    assert calls[0] == f"--arraysize {elements:.0f} --numtimes {SMOKE.stream_times} --csv"
    for item, weight in zip(kernels, (2, 2, 3, 3, 2), strict=True):
        assert item.reference_value == pytest.approx(weight * elements * 8 / 0.001)
        assert item.value > 0 and item.ratio == pytest.approx(item.value / item.reference_value)
        assert f"medians of {bs.ROUNDS} rounds" in item.note
    files = tmp_path / "babelstream"
    assert (files / "round-1.csv").read_text().startswith("CUDA Driver")
    assert (files / "comparison.txt").read_text().startswith("babelstream: engine / BabelStream")


@pytest.mark.slow
@pytest.mark.parametrize(
    "stderr, verdict",
    [
        ("FAILED validation of a[0]: 0.1 (is) != 0.2 (should)", FAIL),
        ("CUDA Error at CUDAStream.cu:86: out of memory (2)", WARN),
    ],
)
def test_a_cuda_stream_that_fails_is_a_row_with_its_first_line(
    no_nvcc, tmp_path, monkeypatch, stderr, verdict
):
    monkeypatch.setenv(bs.PREBUILT_ENV, str(_fake_cuda_stream(tmp_path, fail=stderr)))
    monkeypatch.setattr(bs, "compute_capability", lambda: "9.0")
    build, run = bs.babelstream_items(_ctx(tmp_path, "gpu"), _allotment())
    assert build.verdict == PASS
    assert (run.name, run.verdict) == (bs.RUN_ITEM, verdict)
    assert run.note == f"cuda-stream exit 1: {stderr}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_the_vendored_source_builds_with_nvcc(tmp_path, monkeypatch, capsys):
    """A real check that the vendored source compiles and links (for sm_90; it runs only on a
    GPU), through the command line with a relative folder (nvcc runs in a scratch folder), and
    that a second build with the same inputs is the first one's binary. One nvcc build (8.5
    CPU-s): the command line's, whose Build is read as it returns."""
    monkeypatch.chdir(tmp_path)
    builds = []
    real_build = bs.build
    monkeypatch.setattr(
        bs, "build", lambda *a, **k: builds.append(real_build(*a, **k)) or builds[-1]
    )
    assert bs.main(["b", "--arch=sm_90"]) == 0, capsys.readouterr().err
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"{tmp_path / 'b' / bs.BINARY}: {bs.UPSTREAM}, -DMODEL=cuda, sm_90")
    nvcc = bs.find_nvcc()
    cached = real_build(nvcc, "sm_90", Path("b"))
    assert cached.binary == tmp_path / "b" / bs.BINARY and cached.cached
    (built,) = builds
    assert built.binary.is_file() and not built.cached
    assert b"libnvidia-ml.so.1" in built.binary.read_bytes()  # the driver's, at run time
    record = json.loads((tmp_path / "b" / "build.json").read_text())
    assert record["arch"] == "sm_90" and "-arch=sm_90" in record["command"]
    assert str(tmp_path / "b" / bs.BINARY) in record["command"]
    again = real_build(nvcc, "sm_90", tmp_path / "b")
    assert again.cached and again.seconds == 0.0 and again.command == built.command
