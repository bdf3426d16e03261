"""Start N processes of one command on this machine, as a JAX multi-process job on CPU devices.

    python launch/local.py --num_processes=2 --devices_per_process=4 -- \\
        python -m hpcai_jax.main --flagfile=configs/quickstart.flags

For tests and demos (clusters use launch/slurm/). It watches the processes as a scheduler would,
since a JAX process whose peer has gone waits in a collective forever. What each process gets,
the options, signals and exit codes: `launch/README.md`, Local. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

NODE_ENV = "HPCAI_JAX_NODE"  # hpcai_jax/nodes.py reads it: the simulated node of a process
PREEMPTED = 75  # hpcai_jax.main's exit code after a signal-triggered checkpoint
# hpcai_jax.main's exit code for a lost or hung peer, and this launcher's for a process that a
# signal it did not send ended (killed, crashed): the job lost a process (transient).
LOST = 69
TIMED_OUT = 124  # as timeout(1)
POLL_S = 0.05
# Gloo's line per process and peer as the CPU collectives connect ("[Gloo] Rank 0 is connected
# to 7 peer ranks. Expected number of connected peer ranks is : 7"): 8 lines of noise at every
# start; --verbose keeps them.
GLOO_CONNECTED = b"[Gloo] Rank "


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="launch/local.py",
        description="Start N processes of COMMAND on localhost as one JAX job on CPU devices.",
        usage="%(prog)s --num_processes=N [--devices_per_process=K] [--processes_per_node=J] "
        "[--port=P] "
        "[--timeout_s=T] [--grace_s=G] -- COMMAND [ARG ...]",
    )
    parser.add_argument("--num_processes", type=int, required=True, help="processes to start")
    parser.add_argument(
        "--devices_per_process",
        type=int,
        default=1,
        help="forced host CPU devices per process (default 1)",
    )
    parser.add_argument(
        "--processes_per_node",
        type=int,
        default=0,
        help="processes that share one simulated node (HPCAI_JAX_NODE); default: all on one",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="coordinator port on 127.0.0.1 (default: a free port)"
    )
    parser.add_argument(
        "--timeout_s",
        type=float,
        default=None,
        help="stop everything and exit 124 after this many seconds",
    )
    parser.add_argument(
        "--grace_s",
        type=float,
        default=10.0,
        help="seconds between SIGTERM and SIGKILL when stopping (default 10)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="keep the Gloo connection lines every process prints at start (default: dropped)",
    )
    parser.add_argument(
        "--result",
        default="",
        help="write the job's outcome as JSON here (which process ended it, how, every code)",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="what each process runs, after --"
    )
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given (put it after --)")
    if args.num_processes < 1 or args.devices_per_process < 1:
        parser.error("--num_processes and --devices_per_process must be >= 1")
    if args.processes_per_node < 0:
        parser.error("--processes_per_node must be >= 0 (0: every process on one node)")
    if args.grace_s < 0 or (args.timeout_s is not None and args.timeout_s <= 0):
        parser.error("--grace_s must be >= 0 and --timeout_s > 0")
    return args


def free_port() -> int:
    """A port free now. Another program may take it before the coordinator binds: a small race
    that only costs a retry, and --port avoids it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(devices_per_process: int) -> dict[str, str]:
    env = dict(os.environ)
    # Drop any inherited device count (e.g. from a test's conftest) so ours is the only one.
    xla_flags = [
        f
        for f in env.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    xla_flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
    env["XLA_FLAGS"] = " ".join(xla_flags)
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("PYTHONUNBUFFERED", "1")  # a Python child's lines arrive as they are printed
    return env


def describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"{signal.Signals(-returncode).name} ({returncode})"
        except ValueError:
            return f"signal {-returncode} ({returncode})"
    if returncode == PREEMPTED:
        return f"code {returncode} (preempted)"
    return f"code {returncode}"


def as_exit_code(returncode: int) -> int:
    """The job's code for a process's own: LOST for one a signal ended, else its code."""
    return LOST if returncode < 0 else returncode


def cause_rank(returncode: int) -> int:
    """How likely an exit is to be the job's cause rather than a consequence of another's:
    0 a signal the launcher did not send (killed, crashed), 1 an error code of its own, 2 an
    abort (JAX's coordination client aborts a process whose peer is gone), 3 the lost-peer code
    (the process saw another go)."""
    if returncode == LOST:
        return 3
    if returncode == -signal.SIGABRT:
        return 2
    return 0 if returncode < 0 else 1


def first_cause(failed: dict[int, int]) -> int:
    """The process whose exit ended the job, of `failed` (index -> returncode, every process
    found ended with a non-zero code by one poll of all): a cause before its consequences, then
    the lower index. A consequence never exits before its cause, so one poll of every process
    after a failure was seen holds the cause: the choice does not depend on the order in which
    the others abort, nor on how late the launcher looked."""
    return min(failed, key=lambda i: (cause_rank(failed[i]), i))


class Job:
    """The N child processes, each in its own process group, with their output relayed."""

    def __init__(self, args: argparse.Namespace):
        port = args.port or free_port()
        env = child_env(args.devices_per_process)
        self._lock = threading.Lock()  # one whole line at a time on our stdout/stderr
        self._verbose = args.verbose
        self._readers: list[threading.Thread] = []
        self.procs: list[subprocess.Popen] = []
        per_node = args.processes_per_node or args.num_processes
        for i in range(args.num_processes):
            env = {**env, NODE_ENV: f"local-node{i // per_node}"}
            argv = [
                *args.command,
                f"--coordinator_address=127.0.0.1:{port}",
                f"--num_processes={args.num_processes}",
                f"--process_id={i}",
            ]
            # A new session per child: a terminal's Ctrl-C reaches only the launcher, which
            # forwards it once, and killpg also reaches anything the child started.
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError:
                self.stop(0.0)  # the ones already started
                raise
            self.procs.append(proc)
            for pipe, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                reader = threading.Thread(
                    target=self._relay, args=(pipe, sink, f"[p{i}] "), daemon=True
                )
                reader.start()
                self._readers.append(reader)

    def _relay(self, pipe, sink, prefix: str) -> None:
        for line in iter(pipe.readline, b""):
            if line.startswith(GLOO_CONNECTED) and not self._verbose:
                continue
            if not line.endswith(b"\n"):
                line += b"\n"
            with self._lock:
                sink.buffer.write(prefix.encode() + line)
                sink.flush()
        pipe.close()

    def say(self, message: str) -> None:
        with self._lock:
            print(f"launch/local.py: {message}", file=sys.stderr, flush=True)

    def running(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is None]

    def send(self, sig: int) -> None:
        for i in self.running():
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.killpg(self.procs[i].pid, sig)

    def stop(self, grace_s: float) -> None:
        """SIGTERM the running processes, SIGKILL whatever is left after grace_s, reap all."""
        self.send(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self.send(signal.SIGKILL)
        self.wait()

    def wait(self) -> None:
        for p in self.procs:
            p.wait()
        for reader in self._readers:
            reader.join(timeout=1.0)  # a grandchild outside the group could keep a pipe open


def all_preempted(job: Job) -> bool:
    return all(p.returncode == PREEMPTED for p in job.procs)


def failed_now(job: Job) -> dict[int, int]:
    """Every process that has ended with a non-zero code, by one poll of each."""
    job.running()  # polls each process
    return {i: p.returncode for i, p in enumerate(job.procs) if p.returncode not in (None, 0)}


def write_result(path: str, job: Job, code: int, reason: str, first: int | None) -> None:
    """The job's outcome for a program to read (tests, a wrapper script): which process ended
    it and how, and every process's own exit; written whole (a temporary name, then renamed)."""
    if not path:
        return

    def entry(i: int) -> dict:
        rc = job.procs[i].returncode
        name = signal.Signals(-rc).name if rc is not None and rc < 0 else None
        return {"process": i, "returncode": rc, "signal": name}

    outcome = {
        "exit_code": code,
        "reason": reason,
        "first": None if first is None else entry(first),
        "processes": [entry(i) for i in range(len(job.procs))],
    }
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(outcome, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def watch(job: Job, args: argparse.Namespace, received: list[int]) -> tuple[int, str, int | None]:
    """Waits for the job's end: (exit code, reason, the process that ended it, if one did)."""
    deadline = None if args.timeout_s is None else time.monotonic() + args.timeout_s
    forwarded_at = None  # when the first received signal was forwarded to the processes
    while running := job.running():
        if received and forwarded_at is None:
            forwarded_at = time.monotonic()
            job.send(received[0])
        elif forwarded_at is not None:
            if len(received) > 1 or time.monotonic() > forwarded_at + args.grace_s:
                job.send(signal.SIGKILL)  # a second Ctrl-C, or the grace period is over
        elif failed_now(job):
            failed = failed_now(job)  # a second poll: the cause of any failure seen is in it
            first = first_cause(failed)
            code = job.procs[first].returncode
            job.say(
                f"process {first} exited with {describe(code)}; "
                f"stopping the other {len(job.running())} process(es)"
            )
            job.stop(args.grace_s)
            return (PREEMPTED if all_preempted(job) else as_exit_code(code)), "failed", first
        elif deadline is not None and time.monotonic() > deadline:
            job.say(f"timeout after {args.timeout_s:g} s; stopping {len(running)} process(es)")
            job.stop(args.grace_s)
            return TIMED_OUT, "timeout", None
        time.sleep(POLL_S)
    return ended(job, received)


def ended(job: Job, received: list[int]) -> tuple[int, str, int | None]:
    """The outcome of a job whose processes all ended before the launcher acted."""
    if all_preempted(job):
        return PREEMPTED, "preempted", None
    if received:
        job.say(f"stopped by {signal.Signals(received[0]).name}")
        return 128 + received[0], "signal", None  # as a shell reports what its signal ended
    if failed := failed_now(job):  # noticed only once every process had ended
        first = first_cause(failed)
        code = job.procs[first].returncode
        job.say(f"process {first} exited with {describe(code)}")
        return as_exit_code(code), "failed", first
    return 0, "complete", None


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    received: list[int] = []  # signals the launcher got; the loop in watch() acts on them

    def on_signal(signum, _frame):
        received.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    try:
        job = Job(args)
    except OSError as e:
        print(f"launch/local.py: cannot start {args.command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127  # as a shell's "command not found"
    try:
        code, reason, first = watch(job, args, received)
    finally:
        job.stop(0.0)  # reaps; on an unexpected error, leaves no child behind
    write_result(args.result, job, code, reason, first)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
