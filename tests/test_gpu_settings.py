"""The GPU settings: chosen by name, applied before the backend starts, never over the user's
own, never a flag this jaxlib would abort on; documented from the table itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax import gpu_settings as g
from hpcai_jax.errors import UsageError


def names(settings) -> list[str]:
    return [s.name for s in settings]


def test_select_reads_default_none_additions_and_removals():
    assert names(g.select("default")) == list(g.DEFAULT)
    assert g.select("none") == ()
    chosen = names(g.select("default,-latency_hiding,no_command_buffers"))
    assert "latency_hiding" not in chosen and chosen[-1] == "no_command_buffers"
    assert names(g.select("no_triton_gemm")) == ["no_triton_gemm"]
    for bad in ("fast", "default,bogus", "none,latency_hiding", ""):
        with pytest.raises(UsageError, match="--gpu_settings="):
            g.select(bad)


def _all_known(flags):
    return dict.fromkeys(flags, True)


def test_apply_sets_flags_and_variables_and_leaves_the_users_alone():
    env = {
        "XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=false",
        "NCCL_DEBUG": "INFO",
    }
    done = g.apply(g.select("default,no_command_buffers"), env, on_gpu=True, known=_all_known)
    assert env["XLA_FLAGS"].split() == [
        "--xla_gpu_enable_latency_hiding_scheduler=false",  # the user's, kept
        "--xla_gpu_enable_highest_priority_async_stream=true",
        "--xla_gpu_enable_command_buffer=",
    ]
    assert env["NCCL_DEBUG"] == "INFO" and env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.90"
    left = dict(done.left_out)
    assert "already in XLA_FLAGS" in left["latency_hiding"]
    assert "already set" in left["nccl_warnings"]
    assert "memory_fraction" in done.applied and "no_command_buffers" in done.applied


def test_apply_does_nothing_off_gpus_and_skips_flags_this_jaxlib_lacks():
    env: dict[str, str] = {}
    done = g.apply(g.select("default"), env, on_gpu=False)
    assert env == {} and done.applied == ()
    assert {why for _, why in done.left_out} == {"no GPU backend"}
    done = g.apply(
        g.select("latency_hiding,memory_fraction"),
        env,
        on_gpu=True,
        known=lambda flags: dict.fromkeys(flags, False),
    )
    assert "XLA_FLAGS" not in env and done.applied == ("memory_fraction",)
    assert "this jaxlib has no --xla_gpu_enable_latency_hiding_scheduler" in done.summary()
    env = {}
    done = g.apply(g.select("latency_hiding"), env, on_gpu=True, known=dict.fromkeys)
    assert env == {} and "no XLA binary" in done.summary()


def test_the_installed_jaxlib_carries_every_flag_of_the_table_and_no_invented_one():
    flags = [s.key for s in g.SETTINGS if s.kind == g.XLA]
    known = g.known_xla_flags([*flags, "xla_gpu_no_such_flag_at_all"])
    assert known == {**dict.fromkeys(flags, True), "xla_gpu_no_such_flag_at_all": False}


@pytest.mark.slow
def test_xla_starts_with_every_flag_the_table_applies():
    """XLA aborts a process on a flag it does not know: the flags apply builds start a backend."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    g.apply(g.SETTINGS, env, on_gpu=True)
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", "import jax; print(float(jax.numpy.ones(3).sum()))"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "3.0", proc.stderr[-2000:]
    assert "--xla_gpu_enable_command_buffer=" in env["XLA_FLAGS"]


def test_compiler_options_reach_one_compile():
    import jax

    options = g.compiler_options(g.select("no_command_buffers,latency_hiding,memory_fraction"))
    assert options == {
        "xla_gpu_enable_command_buffer": "",
        "xla_gpu_enable_latency_hiding_scheduler": True,
    }
    options["xla_gpu_all_reduce_combine_threshold_bytes"] = g.compiler_options(
        g.select("all_reduce_combine_128mib")
    )["xla_gpu_all_reduce_combine_threshold_bytes"]
    assert options["xla_gpu_all_reduce_combine_threshold_bytes"] == 128 << 20
    compiled = jax.jit(lambda x: x * 2).lower(1.0).compile(compiler_options=options)
    assert float(compiled(2.0)) == 4.0


def test_a_bad_gpu_settings_flag_is_one_line():
    proc = run_in_process("--mode=stream", "--gpu_settings=turbo")
    assert_one_line_error(proc, "--gpu_settings=turbo", "'turbo'")


def test_records_state_the_environment_the_backend_started_with():
    env = {"XLA_FLAGS": "--a", "NCCL_DEBUG": "WARN", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"}
    assert g.environment(env) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "NCCL_DEBUG": "WARN",
        "XLA_FLAGS": "--a",
    }


def test_the_docs_list_the_table():
    assert g.markdown_table() in (ROOT / "docs" / "gpu_settings.md").read_text()
