"""STREAM's tools: the datasheet table, the comparison against BabelStream itself (parsing,
ratios, a fake BabelStream binary end to end, the skip without one). The one-accelerator check
is --mode=check now (tests/test_nodecheck.py)."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import ROOT

from hpcai_jax.stream.datasheet import memory_bandwidth

sys.path.insert(0, str(ROOT / "benchmarks"))
import stream_vs_babelstream as vs  # noqa: E402

BABELSTREAM_CSV = """BabelStream banner line
function,num_times,n_elements,sizeof,max_MB_per_sec,min_runtime,max_runtime,avg_runtime
Copy,5,1000000,8,0,0.001,0.002,0.0015
Triad,5,1000000,8,0,0.002,0.003,0.0025
Dot,5,1000000,8,0,0.0008,0.001,0.0009
"""


@pytest.mark.parametrize(
    "kind, tb_per_s",
    [
        ("NVIDIA H200", 4.8),
        ("NVIDIA H100 80GB HBM3", 3.35),
        ("NVIDIA H100 PCIe", 2.0),
        ("NVIDIA A100-SXM4-80GB", 2.039),
        ("NVIDIA A100-SXM4-40GB", 1.555),
        ("AMD Instinct MI300X", 5.3),
        ("TPU v4", 1.2),
        ("TPU v5 lite", 0.819),
        ("TPU v5", 2.765),
        ("TPU v6 lite", 1.638),
    ],
)
def test_datasheet_bandwidth_by_device_kind(kind, tb_per_s):
    rate, source = memory_bandwidth(kind)
    assert rate == pytest.approx(tb_per_s * 1e12) and source


def test_no_datasheet_row_for_a_cpu():
    assert memory_bandwidth("cpu") is None


def test_rates_from_either_csv_are_weight_times_bytes_over_the_fastest_call():
    rates = vs.rates_from_csv(BABELSTREAM_CSV)
    # Copy: 2 x 1e6 x 8 B / 1 ms = 16 GB/s; Triad: 3 x 8e6 / 2 ms = 12; Dot: 2 x 8e6 / 0.8 ms = 20.
    assert rates == pytest.approx({"Copy": 16.0, "Triad": 12.0, "Dot": 20.0})
    with pytest.raises(ValueError, match="no CSV header"):
        vs.rates_from_csv("Function MBytes/sec\nCopy 1.0")


def test_summary_gives_each_kernels_median_ratio_and_range():
    pairs = [
        {"jax": {"Copy": 9.0}, "babelstream": {"Copy": 10.0}},
        {"jax": {"Copy": 12.0}, "babelstream": {"Copy": 10.0}},
        {"jax": {"Copy": 10.0}, "babelstream": {"Copy": 10.0}},
    ]
    s = vs.summarize(pairs)["Copy"]
    assert s["ratios"] == pytest.approx([0.9, 1.2, 1.0])
    assert (s["ratio_median"], s["ratio_min"], s["ratio_max"]) == pytest.approx((1.0, 0.9, 1.2))
    assert (s["jax_gb_per_s"], s["babelstream_gb_per_s"]) == (10.0, 10.0)
    assert "| Copy | 10.0 | 10.0 | 1.00 | 0.90–1.20 | 0.90, 1.20, 1.00 |" in vs.format_summary(
        vs.summarize(pairs)
    )


def test_without_babelstream_it_skips_and_says_how_to_run_it(capsys):
    assert vs.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("stream_vs_babelstream: skipped: no BabelStream given")
    assert "--babelstream=PATH" in out and "stream_vs_numpy.py" in out


# First processor's block of /proc/cpuinfo on three hosts (x86 lines trimmed to the ones read).
CPUINFO_AMD_KVM = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu vme avx2

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
"""
CPUINFO_INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
stepping\t: 8
"""
CPUINFO_GRACE = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0
"""


@pytest.mark.parametrize(
    "text, vendor, model, described",
    [
        (
            CPUINFO_AMD_KVM,
            "AuthenticAMD",
            "AMD EPYC",
            "AuthenticAMD AMD EPYC (family 25, model 1, stepping 1)",
        ),
        (
            CPUINFO_INTEL,
            "GenuineIntel",
            "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
            "GenuineIntel Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz "
            "(family 6, model 143, stepping 8)",
        ),
        (CPUINFO_GRACE, "Arm", "part 0xd4f", "Arm part 0xd4f"),
    ],
)
def test_the_host_cpu_is_named_by_vendor_and_model_from_cpuinfo(text, vendor, model, described):
    from hpcai_jax.stream.placement import cpu_identity

    got = cpu_identity(text)
    assert (got["vendor"], got["model"], got["described"]) == (vendor, model, described)
    assert got["source"] == "/proc/cpuinfo"


def test_without_cpuinfo_the_cpu_is_platforms_guess(monkeypatch):
    from hpcai_jax.stream import placement

    monkeypatch.setattr(placement.platform, "processor", lambda: "x86_64")
    got = placement.cpu_identity("")
    assert (got["vendor"], got["model"], got["source"]) == ("unknown vendor", "x86_64", "platform")


def test_the_comparisons_header_and_table_name_the_host_cpu(tmp_path, monkeypatch, capsys):
    """Named before anything can fail (here: a path BabelStream is not at), and above the
    summary table that the docs quote."""
    from hpcai_jax.stream import placement

    real = placement.cpu_identity
    monkeypatch.setattr(placement, "cpu_identity", lambda: real(CPUINFO_AMD_KVM))
    assert vs.main([f"--babelstream={tmp_path}"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith(
        "# host CPU: AuthenticAMD AMD EPYC (family 25, model 1, stepping 1), "
    )
    assert "expected an executable or a BabelStream source tree" in captured.err
    host = vs.host_cpu()
    assert host["vendor"] == "AuthenticAMD" and host["logical_cores"] >= 1
    pairs = [{"jax": {"Copy": 9.0}, "babelstream": {"Copy": 10.0}}]
    assert vs.format_summary(vs.summarize(pairs), host).startswith(
        "\nJAX / BabelStream on AuthenticAMD AMD EPYC (family 25, model 1, stepping 1), "
    )


@pytest.mark.slow
def test_against_a_fake_babelstream_end_to_end(tmp_path, capsys):
    """A stand-in binary that prints BabelStream's CSV, and fails its own validation at 8,192
    elements as BabelStream's Dot does at 2^28: the script says so and both sides go on at
    4,096 (the JAX CLI really runs, below the rule, so with --allow_small_arrays); both are
    parsed, and the ratio is JAX's rate over the stand-in's."""
    fake = tmp_path / "omp-stream"
    fake.write_text(
        "#!/bin/sh\n"
        'test "$3" = 8192 && { echo "FAILED validation of sum" >&2; exit 1; }\n'
        'test "$1" = --csv && test "$3" = 4096 || exit 3\n'
        "echo function,num_times,n_elements,sizeof,max_MB_per_sec,min_runtime,max_runtime,"
        "avg_runtime\n"
        "echo Triad,2,4096,8,0,0.001,0.001,0.001\n"
    )
    fake.chmod(0o755)
    json_path = tmp_path / "pairs.json"
    code = vs.main(
        [
            f"--babelstream={fake}",
            "--array_size=8192",
            "--num_times=2",
            "--pairs=1",
            "--jax_args=--stream_kernels=triad",
            f"--json={json_path}",
        ]
    )
    assert code == 0
    saved = json.loads(json_path.read_text())
    [pair] = saved["pairs"]
    assert pair["babelstream"] == {"Triad": pytest.approx(3 * 4096 * 8 / 0.001 * 1e-9)}
    ratio = saved["summary"]["Triad"]["ratio_median"]
    assert ratio == pytest.approx(pair["jax"]["Triad"] / pair["babelstream"]["Triad"])
    out = capsys.readouterr().out
    assert "| Triad |" in out
    assert saved["host_cpu"]["model"] and f"# host CPU: {saved['host_cpu']['described']}" in out
    assert (
        "# BabelStream's own validation fails at 8192 elements: FAILED validation of sum\n"
        "# BabelStream validates 4096 elements: both sides run at that size" in out
    )
    assert saved["args"]["array_size"] == 4096


def test_its_default_size_is_the_rule_and_is_checked_against_memory(monkeypatch, capsys):
    from hpcai_jax.stream import cache, placement

    monkeypatch.setattr(cache, "cpu_cache", lambda: cache.CacheInfo(300 << 20, "test L3", "host"))
    args = vs.parse_args(["--babelstream=x"])
    monkeypatch.setattr(placement, "mem_available_bytes", lambda: 64 << 30)
    assert vs.sized(args) == 1 << 28  # 4 x 300 MiB = 1,200 MiB per array: 2^28 doubles
    assert capsys.readouterr().out.startswith(
        "# size: 268435456 float64 elements per array (the rule's; one array >= 4 x 300 MiB "
        "(test L3) needs 268435456)"
    )
    monkeypatch.setattr(placement, "mem_available_bytes", lambda: 4 << 30)
    with pytest.raises(RuntimeError, match=r"--array_size=268435456: three arrays need 6,144 MiB"):
        vs.sized(args)


def test_stream_vs_numpy_refuses_arrays_larger_than_free_memory(monkeypatch):
    """Its four contenders hold their arrays at once: 2^28 doubles took 23 GB and the OOM
    killer before this check; now one line, before anything is allocated."""
    import stream_vs_numpy

    from hpcai_jax.stream import placement

    monkeypatch.setattr(placement, "mem_available_bytes", lambda: 22_000 << 20)
    args = stream_vs_numpy.argparse.Namespace(array_size=1 << 28, no_c=False)
    assert stream_vs_numpy.too_large(args) == (
        "--array_size=268435456: 4 contenders x 3 float64 arrays need 24,576 MiB at once, more "
        "than the 22,000 MiB available (MemAvailable); give a smaller --array_size"
    )
    assert (
        stream_vs_numpy.too_large(stream_vs_numpy.argparse.Namespace(array_size=1 << 25, no_c=True))
        == ""
    )


@pytest.mark.parametrize(
    "root, name, operands",
    [
        (
            "%multiply_add_fusion = f64[16777216]{0} fusion(%b.1, %c.1), kind=kLoop, "
            "calls=%fused_computation, sharding={replicated}",
            "multiply_add_fusion",
            ["b", "c"],
        ),
        # Add is compiled without XLA:CPU's fusion emitters: one elemental instruction.
        ("%add.2 = f64[16777216]{0} add(%a.1, %b.1), sharding={replicated}", "add.2", ["a", "b"]),
    ],
)
def test_stream_runtime_finds_each_kernels_loop_in_xlas_dump(tmp_path, root, name, operands):
    """benchmarks/stream_runtime.py links XLA's loop for every kernel of the run order, the
    elemental Add as well as the fusions (it once stopped at Add)."""
    import stream_runtime

    partitions = ', backend_config={"outer_dimension_partitions":["2"]}'
    text = f"HloModule m\n\nENTRY %main {{\n  ROOT {root}{partitions}\n}}\n"
    (tmp_path / "module_0000.jit__k.cpu_after_optimizations.txt").write_text(text)
    assert stream_runtime._loop(tmp_path, "jit__k") == (name, operands, 2)
    (tmp_path / "module_0000.jit__k.cpu_after_optimizations.txt").write_text(
        text.replace(root, "%t = (f64[4]{0}, f64[4]{0}) tuple(%a.1, %b.1)")
    )
    with pytest.raises(SystemExit, match="not one loop"):
        stream_runtime._loop(tmp_path, "jit__k")
