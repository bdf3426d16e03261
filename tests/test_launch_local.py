"""launch/local.py: N processes on localhost, output prefixed, failures and signals propagated.

The children are small `python -c` scripts, except the one `multiprocess` test that starts two
real JAX processes. Each child learns its index from the `--process_id=i` the launcher appends.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[1] / "launch" / "local.py"
# Prepended to every child script: its process index, from the flags the launcher appends.
PREAMBLE = "import os, sys, time\nI = int(sys.argv[-1].split('=')[1])\n"


def child(*parts: str) -> list[str]:
    """`python -c` the preamble and the parts, each dedented on its own."""
    return [sys.executable, "-c", "\n".join([PREAMBLE, *map(textwrap.dedent, parts)])]


# A hang's guard for a launcher and its children, not a figure under test: python's start-up alone
# takes seconds on a loaded 2-core machine.
HANG_S = 120


def launch(
    *options: str, command: list[str], timeout: float = HANG_S
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), *options, "--", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_launcher(*options: str, command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(LAUNCHER), *options, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_pids(directory: Path, count: int, timeout_s: float = HANG_S) -> list[int]:
    """The pids the children wrote to directory/<i>.pid once they were ready: a poll with a
    deadline, since the files are the children's only sign of being ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = sorted(directory.glob("*.pid"))
        if len(files) == count and all(f.read_text().endswith("\n") for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"the children did not all start within {timeout_s} s")


def write_pid(directory: Path) -> str:
    """Child code that writes its pid to directory/<I>.pid (newline last: the file is complete)."""
    path = f"os.path.join({str(directory)!r}, f'{{I}}.pid')"
    return f"open({path}, 'w').write(f'{{os.getpid()}}\\n')"


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
def test_every_line_is_prefixed_and_whole():
    # Each child writes a long line in pieces, with pauses, on both streams: the relayed lines
    # must each come out whole, behind their process's prefix, never mixed with the other's.
    script = """
        for stream in (sys.stdout, sys.stderr):
            for _ in range(5):
                # A pause between the pieces lets the other child's write in between them,
                # if the relay let it: what is tested is that it never does.
                stream.write(str(I) * 1000); stream.flush(); time.sleep(0.01)
            stream.write("\\n")
        print("no newline at the end", end="")
    """
    result = launch("--num_processes=2", command=child(script))
    assert result.returncode == 0, result.stderr
    for i in (0, 1):
        assert f"[p{i}] {str(i) * 5000}\n" in result.stdout
        assert f"[p{i}] {str(i) * 5000}\n" in result.stderr
        assert f"[p{i}] no newline at the end\n" in result.stdout
    assert len(result.stdout.splitlines()) == 4
    assert len(result.stderr.splitlines()) == 2


@pytest.mark.slow
def test_appends_the_distributed_flags_and_forces_cpu_devices():
    script = """
        import json
        print(json.dumps([sys.argv[1:], os.environ["XLA_FLAGS"], os.environ["JAX_PLATFORMS"]]))
    """
    result = launch(
        "--num_processes=3", "--devices_per_process=4", "--port=12345", command=child(script)
    )
    assert result.returncode == 0, result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        prefix, _, payload = line.partition(" ")
        seen[prefix] = json.loads(payload)
    assert sorted(seen) == ["[p0]", "[p1]", "[p2]"]
    for i in range(3):
        argv, xla_flags, platforms = seen[f"[p{i}]"]
        assert argv == [
            "--coordinator_address=127.0.0.1:12345",
            "--num_processes=3",
            f"--process_id={i}",
        ]
        # conftest's own device count (8) is replaced, not merely followed, by ours.
        assert xla_flags.count("--xla_force_host_platform_device_count") == 1
        assert "--xla_force_host_platform_device_count=4" in xla_flags
        assert platforms == "cpu"


@pytest.mark.slow
def test_chooses_one_free_port_for_all_processes():
    result = launch("--num_processes=2", command=child("print(sys.argv[1])"))
    assert result.returncode == 0, result.stderr
    ports = {line.rsplit(":", 1)[1] for line in result.stdout.splitlines()}
    assert len(ports) == 1 and 1024 <= int(ports.pop()) < 65536


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ((), ["local-node0"] * 4),
        (("--processes_per_node=2",), ["local-node0", "local-node0", "local-node1", "local-node1"]),
        (("--processes_per_node=1",), [f"local-node{i}" for i in range(4)]),
    ],
)
def test_processes_per_node_names_each_process_node(options, expected):
    script = "print(I, os.environ['HPCAI_JAX_NODE'])"
    result = launch("--num_processes=4", *options, command=child(script))
    assert result.returncode == 0, result.stderr
    nodes = dict(line.split()[1:] for line in result.stdout.splitlines())
    assert [nodes[str(i)] for i in range(4)] == expected


@pytest.mark.slow
@pytest.mark.parametrize(("codes", "expected"), [((0, 0), 0), ((75, 75), 75), ((0, 5), 5)])
def test_exit_code_follows_the_children(codes, expected):
    result = launch("--num_processes=2", command=child(f"sys.exit({list(codes)}[I])"))
    assert result.returncode == expected, result.stderr


def after_sibling(directory: Path) -> str:
    """Child code defining wait_for_sibling(): a poll, with a deadline, for process 0's pid file
    (the sibling's start is another process's event, and no pipe joins the two children)."""
    path = f"os.path.join({str(directory)!r}, '0.pid')"
    return f"""
        def wait_for_sibling():
            deadline = time.monotonic() + 60
            while not os.path.exists({path}) and time.monotonic() < deadline:
                time.sleep(0.01)
    """


# A child that never ends by itself: it waits for a signal (an ignored one does not end it).
FOREVER = "import signal\nsignal.pause()"


def outcome(path: Path) -> dict:
    """The launcher's --result: which process ended the job and how, every process's code."""
    return json.loads(path.read_text())


@pytest.mark.slow
def test_a_failure_stops_the_others_at_once(tmp_path):
    script = """
        if I == 1:
            wait_for_sibling()
            sys.exit(3)
    """
    result = launch(
        "--num_processes=2",
        f"--result={tmp_path / 'job.json'}",
        command=child(write_pid(tmp_path), after_sibling(tmp_path), script, FOREVER),
    )
    assert result.returncode == 3
    assert "process 1 exited with code 3; stopping the other 1 process(es)" in result.stderr
    # The sibling, which would wait forever, was ended by the launcher's SIGTERM.
    job = outcome(tmp_path / "job.json")
    assert job["first"] == {"process": 1, "returncode": 3, "signal": None}
    assert job["processes"][0] == {"process": 0, "returncode": -15, "signal": "SIGTERM"}
    for pid in wait_for_pids(tmp_path, 2):
        assert_gone(pid)


@pytest.mark.slow
def test_a_sibling_that_ignores_sigterm_is_killed_after_grace(tmp_path):
    script = """
        if I == 1:
            wait_for_sibling()
            sys.exit(4)
    """
    ignore_sigterm = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)"
    command = child(ignore_sigterm, write_pid(tmp_path), after_sibling(tmp_path), script, FOREVER)
    result = launch(
        "--num_processes=2", "--grace_s=1", f"--result={tmp_path / 'job.json'}", command=command
    )
    assert result.returncode == 4
    # Deaf to SIGTERM, it ended by the SIGKILL that follows the grace period.
    job = outcome(tmp_path / "job.json")
    assert job["processes"][0] == {"process": 0, "returncode": -9, "signal": "SIGKILL"}
    for pid in wait_for_pids(tmp_path, 2):
        assert_gone(pid)


@pytest.mark.slow
def test_a_child_killed_by_a_signal(tmp_path):
    script = """
        if I == 1:
            wait_for_sibling()
            os.kill(os.getpid(), 9)
    """
    command = child(write_pid(tmp_path), after_sibling(tmp_path), script, FOREVER)
    result = launch("--num_processes=2", f"--result={tmp_path / 'job.json'}", command=command)
    assert result.returncode == 69  # the job lost a process: transient, requeued on SLURM
    assert "process 1 exited with SIGKILL (-9); stopping the other 1 process(es)" in result.stderr
    assert outcome(tmp_path / "job.json")["first"] == {
        "process": 1,
        "returncode": -9,
        "signal": "SIGKILL",
    }


@pytest.mark.slow
def test_sigint_to_the_launcher_stops_every_child(tmp_path):
    launcher = start_launcher("--num_processes=2", command=child(write_pid(tmp_path), FOREVER))
    pids = wait_for_pids(tmp_path, 2)
    launcher.send_signal(signal.SIGINT)
    _, stderr = launcher.communicate(timeout=HANG_S)
    assert launcher.returncode == 130
    assert "stopped by SIGINT" in stderr
    for pid in pids:
        assert_gone(pid)


@pytest.mark.slow
def test_sigterm_with_children_that_checkpoint_exits_75(tmp_path):
    # The children behave like hpcai_jax.main on preemption: save, then exit 75.
    script = """
        import signal
        signal.signal(signal.SIGTERM, lambda *_: (print("checkpoint saved"), sys.exit(75)))
    """
    command = child(script, write_pid(tmp_path), FOREVER)
    launcher = start_launcher("--num_processes=2", command=command)
    wait_for_pids(tmp_path, 2)
    launcher.send_signal(signal.SIGTERM)
    stdout, _ = launcher.communicate(timeout=HANG_S)
    assert launcher.returncode == 75
    assert "[p0] checkpoint saved" in stdout and "[p1] checkpoint saved" in stdout


@pytest.mark.slow
def test_timeout_stops_everything_and_exits_124(tmp_path):
    command = child(write_pid(tmp_path), FOREVER)
    result = launch("--num_processes=2", "--timeout_s=1", command=command)
    assert result.returncode == 124
    assert "timeout after 1 s; stopping 2 process(es)" in result.stderr
    for pid in wait_for_pids(tmp_path, 2):
        assert_gone(pid)


@pytest.mark.slow
def test_a_command_that_does_not_exist():
    result = launch("--num_processes=2", command=["/nonexistent/program"])
    assert result.returncode == 127
    assert "cannot start '/nonexistent/program'" in result.stderr


@pytest.mark.slow
def test_no_command_is_a_usage_error():
    result = subprocess.run(
        [sys.executable, str(LAUNCHER), "--num_processes=2"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "no command given" in result.stderr


# Seconds two JAX processes may take to start and join: a loaded machine can spend minutes on
# importing JAX alone. Every outer limit is larger still, and nothing is asserted about speed.
JOIN_S = 300


@pytest.mark.multiprocess
def test_two_jax_processes_make_one_eight_device_job():
    script = f"""
        import jax
        from jax.experimental import multihost_utils
        flags = dict(arg[2:].split("=") for arg in sys.argv[1:])
        jax.distributed.initialize(
            flags["coordinator_address"], int(flags["num_processes"]), I,
            initialization_timeout={JOIN_S},
        )
        ids = multihost_utils.process_allgather(jax.numpy.array([I]))
        # One write of the whole line: Gloo's C++ logging shares the pipe, and a print's
        # pieces were seen split around its lines on a loaded machine.
        line = f"result {{jax.process_count()}} {{jax.device_count()}} {{ids.ravel().tolist()}}"
        os.write(1, (line + "\\n").encode())
    """
    result = launch(
        "--num_processes=2",
        "--devices_per_process=4",
        f"--timeout_s={JOIN_S + 120}",
        command=child(script),
        timeout=JOIN_S + 180,  # past the launcher's own timeout and its 10 s of grace
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for i in (0, 1):
        lines = [line for line in result.stdout.splitlines() if line.startswith(f"[p{i}] ")]
        assert any(line.endswith("result 2 8 [0, 1]") for line in lines), result.stdout


@pytest.mark.slow
def test_gloo_connection_lines_are_dropped_unless_verbose():
    script = """
        print(f"[Gloo] Rank {I} is connected to 1 peer ranks. Expected number of connected peer ranks is : 1", flush=True)
        print(f"process {I} trains", flush=True)
    """
    quiet = launch("--num_processes=2", command=child(script))
    assert quiet.returncode == 0 and "[Gloo]" not in quiet.stdout
    assert "[p0] process 0 trains" in quiet.stdout and "[p1] process 1 trains" in quiet.stdout
    verbose = launch("--num_processes=2", "--verbose", command=child(script))
    assert "[p1] [Gloo] Rank 1 is connected" in verbose.stdout


def _launcher_module():
    spec = importlib.util.spec_from_file_location("launch_local", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("failed", "first"),
    [
        # The CI failure of 443740a: the killed process and a peer's lost-peer exit found in
        # one poll; the lower index (0) is the consequence.
        ({0: 69, 1: -9}, 1),
        ({0: 69, 1: -9, 3: -6}, 1),  # and an abort from JAX's coordination client
        ({2: -6, 3: 69}, 2),  # an abort with no signal beside it: the abort
        ({1: 69, 2: 3}, 2),  # an error of its own before a lost peer
        ({1: -11, 2: 3}, 1),  # a crash before an error code
        ({3: 69, 1: 69}, 1),  # only consequences: the lower index
    ],
)
def test_the_first_cause_is_named_whatever_order_the_others_end_in(failed, first):
    local = _launcher_module()
    assert local.first_cause(failed) == first
    assert local.first_cause(dict(reversed(failed.items()))) == first
