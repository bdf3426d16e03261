"""Multi-process start-up with JAX's own runtime (docs/design.md, facts 5, 6).

Order of precedence: explicit flags; then a cluster JAX detects by itself (a SLURM step, Open MPI,
a TPU pod); then a single process. Every process logs which path it took, its index, the process
count and its devices, and tags every later log line with its index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging as std_logging
import os
import re
import sys
import threading
import time

import numpy as np
from absl import logging

from hpcai_jax.errors import LOST_EXIT_CODE, UsageError, end_process
from hpcai_jax.fields import setting


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    coordinator_address: str = setting(
        "", "HOST:PORT of process 0. Explicit flags win over cluster auto-detection."
    )
    num_processes: int = setting(0, "Number of processes.")
    process_id: int = setting(-1, "This process's index.")
    local_device_ids: str = setting(
        "",
        "Devices this process owns: '0,1,2,3', 'all' (one task per node), or empty for JAX's "
        "choice.",
    )
    timeout_s: int = setting(
        0,
        "Seconds to wait for every process to join; 0: 300 plus 60 per 1,000 processes beyond "
        "the first 1,000 (docs/scale.md).",
        flag="distributed_timeout_s",
    )

    def validate(self) -> None:
        if self.timeout_s < 0:
            raise UsageError(
                f"--distributed_timeout_s={self.timeout_s}: expected seconds >= 1, or 0 for "
                "the rule by process count"
            )
        explicit = (bool(self.coordinator_address), self.num_processes > 0, self.process_id >= 0)
        if any(explicit) and not all(explicit):
            raise UsageError(
                "--coordinator_address, --num_processes and --process_id go together: "
                "give all three, or none for auto-detection"
            )
        if self.num_processes and not 0 <= self.process_id < self.num_processes:
            raise UsageError(
                f"--process_id={self.process_id}: expected 0 <= id < "
                f"--num_processes={self.num_processes}"
            )
        if self.coordinator_address and ":" not in self.coordinator_address:
            raise UsageError(
                f"--coordinator_address={self.coordinator_address}: expected HOST:PORT"
            )
        ids = self.local_device_ids
        if ids and ids != "all" and not all(p.strip().isdigit() for p in ids.split(",")):
            raise UsageError(
                f"--local_device_ids={ids}: expected comma-separated integers or 'all'"
            )


def _env_count(env, name: str, default: int) -> int:
    """A count from the environment; an empty or malformed value (SLURM exports some empty)
    reads as the default rather than stopping the job with a traceback."""
    m = re.match(r"\s*(\d+)", env.get(name, ""))
    return int(m.group(1)) if m else default


# JAX's own initialization timeout, and what each 1,000 processes add to it: thousands of
# processes importing JAX and this package from one shared file system at once take minutes
# (docs/scale.md, Start-up).
BASE_TIMEOUT_S = 300
PER_THOUSAND_PROCESSES_S = 60


def startup_timeout_s(processes: int) -> int:
    """Seconds to wait for every process to join: BASE_TIMEOUT_S, plus
    PER_THOUSAND_PROCESSES_S per started 1,000 processes beyond the first 1,000."""
    return BASE_TIMEOUT_S + PER_THOUSAND_PROCESSES_S * max(0, (processes - 1) // 1000)


def expected_processes(config: DistributedConfig, env: dict | None = None) -> int:
    """The job's process count before it starts: the flag, else the launcher's environment
    (SLURM, Open MPI), else 0 (unknown: a TPU pod, or a single process)."""
    env = os.environ if env is None else env
    if config.num_processes:
        return config.num_processes
    return max(_env_count(env, "SLURM_NTASKS", 0), _env_count(env, "OMPI_COMM_WORLD_SIZE", 0))


def timeout_for(config: DistributedConfig, env: dict | None = None) -> int:
    """--distributed_timeout_s where given, else the rule by the expected process count."""
    return config.timeout_s or startup_timeout_s(expected_processes(config, env))


def detect_cluster(env: dict | None = None) -> str | None:
    """The multi-process launcher JAX can auto-detect, or None (a single process)."""
    env = os.environ if env is None else env
    slurm_vars = (
        "SLURM_JOB_ID",
        "SLURM_STEP_NODELIST",
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURM_LOCALID",
    )
    if all(v in env for v in slurm_vars) and _env_count(env, "SLURM_NTASKS", 1) > 1:
        return "slurm"
    if _env_count(env, "OMPI_COMM_WORLD_SIZE", 1) > 1:
        return "ompi"
    if "," in env.get("TPU_WORKER_HOSTNAMES", "") or env.get("MEGASCALE_COORDINATOR_ADDRESS"):
        return "tpu_pod"
    return None


def _gpus_on_node(env) -> int:
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    return _env_count(env, "SLURM_GPUS_ON_NODE", 0)


def local_device_ids(config: DistributedConfig, cluster: str | None, env: dict | None = None):
    """Device ids this process should own, or None to let JAX decide.

    SLURM's auto-detection gives each process GPU number SLURM_LOCALID, right for one task per
    GPU but wrong for one task per node: then (or with --local_device_ids=all) the process takes
    every GPU of its node.
    """
    env = os.environ if env is None else env
    ids = config.local_device_ids
    one_task_per_node = (
        cluster == "slurm" and env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] == "1"
    )
    if ids == "all" or (not ids and one_task_per_node):
        count = _gpus_on_node(env)
        return list(range(count)) if count else None
    return [int(p) for p in ids.split(",")] if ids else None


class _ProcessTag(std_logging.Filter):
    def __init__(self, tag: str):
        super().__init__()
        self._tag = tag

    def filter(self, record: std_logging.LogRecord) -> bool:
        record.msg = f"{self._tag} {record.msg}"
        return True


def initialize(config: DistributedConfig) -> str:
    """Starts JAX's distributed runtime if this is a multi-process run; returns the path taken.

    Must run before anything touches a JAX backend. A peer that never arrives makes JAX abort
    the process after `timeout_s` (it does not raise); the log line before says what it waited for.
    """
    import jax  # here, not at the top: config.py imports DistributedConfig without JAX

    cluster = detect_cluster()
    ids = local_device_ids(config, cluster)
    timeout = timeout_for(config)
    if config.coordinator_address:
        path = "flags"
        logging.info(
            "jax.distributed: process %d of %d, coordinator %s, waiting up to %d s for peers",
            config.process_id,
            config.num_processes,
            config.coordinator_address,
            timeout,
        )
        jax.distributed.initialize(
            coordinator_address=config.coordinator_address,
            num_processes=config.num_processes,
            process_id=config.process_id,
            local_device_ids=ids,
            initialization_timeout=timeout,
        )
    elif cluster:
        path = f"auto-detected {cluster}"
        logging.info("jax.distributed: %s, waiting up to %d s for peers", path, timeout)
        jax.distributed.initialize(local_device_ids=ids, initialization_timeout=timeout)
    else:
        path = "single process"
    index, count = jax.process_index(), jax.process_count()
    if count > 1:
        logging.get_absl_logger().addFilter(_ProcessTag(f"[p{index}/{count}]"))
    logging.info(
        "start-up: %s; process %d of %d; %d local devices %s; %d global devices (%s)",
        path,
        index,
        count,
        jax.local_device_count(),
        [d.id for d in jax.local_devices()],
        jax.device_count(),
        jax.devices()[0].device_kind,
    )
    return path


# What a collective or the coordination service says when a process of the job is gone: Gloo's
# closed or reset connections (CPU), NCCL's errors, the coordination service's heartbeats.
_LOST_PEER = re.compile(
    r"Connection (closed|reset) by peer|Gloo \w+ failed|NCCL (error|operation)|heartbeat|"
    r"coordination service|UNAVAILABLE|DEADLINE_EXCEEDED|Socket closed",
    re.IGNORECASE,
)


def lost_peer(error: BaseException) -> str | None:
    """The first line of `error` when it says that another process of the job is gone (None in
    a single process, or for any other error: a bug must still show its traceback)."""
    import jax

    if jax.process_count() < 2:
        return None
    text = str(error)
    if not _LOST_PEER.search(text):
        return None
    return f"{type(error).__name__}: {text.strip().splitlines()[0][:300]}"


def exit_if_lost(error: BaseException) -> None:
    """Ends this process at once with the lost-peer code when `error` says another process of
    the job is gone: one line, no clean-up. A clean-up would wait on the dead peer (a checkpoint
    save's barrier, JAX's shutdown barrier) or be aborted by JAX's coordination client midway,
    and the launcher would then read an abort instead of the loss (launch/README.md, Local)."""
    if (why := lost_peer(error)) is None:
        return
    import jax

    end_in_order(
        f"hpcai_jax: error: process {jax.process_index()} lost a peer ({why}); the job can "
        f"resume from its last checkpoint; exit {LOST_EXIT_CODE}",
        LOST_EXIT_CODE,
    )


# Process 0 hosts JAX's coordination service. Once it has exited, JAX's coordination client
# aborts (SIGABRT) every process still connected to it, which the launcher would then report
# instead of the loss. So a process that ends the job leaves a mark in the service's key-value
# store first, and process 0 waits, at most EXIT_WAIT_S, for the marks of all the others but
# the one that is gone before its own exit (docs/reliability.md, Exit codes).
EXIT_MARKS = "hpcai_jax/exit/"
EXIT_WAIT_S = 20.0
_MARK_TIMEOUT_S = 5.0


def _client():
    """JAX's coordination client, or None in a single process (no public API holds it)."""
    from jax._src import distributed as jax_distributed

    return jax_distributed.global_state.client


def _mark_exit(client, index: int) -> None:
    """Tells process 0 that process `index` is leaving: in a thread bounded by _MARK_TIMEOUT_S,
    so that a service already gone cannot hold the exit."""

    def mark():
        with contextlib.suppress(Exception):  # the service is gone: nothing left to tell
            client.key_value_set(f"{EXIT_MARKS}{index}", "exit")

    thread = threading.Thread(target=mark, name="exit-mark", daemon=True)
    thread.start()
    thread.join(_MARK_TIMEOUT_S)


def await_exit_marks(
    client, processes: int, wait_s: float | None = None, clock=time.monotonic, pause=time.sleep
) -> int:
    """Process 0's wait before its exit: until `processes` - 2 others have marked theirs (all but
    itself and the one that is gone), or `wait_s` (EXIT_WAIT_S) has passed; returns the marks
    seen. More than one process gone costs the whole wait, and no more."""
    deadline = clock() + (EXIT_WAIT_S if wait_s is None else wait_s)
    while True:
        try:
            seen = len(client.key_value_dir_get(EXIT_MARKS))
        except Exception:  # the store does not answer: waiting cannot help
            return 0
        if seen >= processes - 2 or clock() >= deadline:
            return seen
        pause(0.05)


def end_in_order(line: str, code: int) -> None:
    """`errors.end_process(line, code)` for a process of a multi-process job ending it (a lost
    peer, the watchdog): the
    others mark their exit in the coordination service, process 0 waits for their marks first
    (EXIT_MARKS), so none is aborted by the service's disappearance."""
    import jax

    if line:
        print(line, file=sys.stderr, flush=True)
    client = _client() if jax.process_count() > 1 else None
    if client is not None and jax.process_index() == 0:
        await_exit_marks(client, jax.process_count())
    elif client is not None:
        _mark_exit(client, jax.process_index())
    end_process("", code)


def from_process_zero(text: str, size: int = 256) -> str:
    """Process 0's `text` on every process (at most `size` UTF-8 bytes; a collective): a value
    each process would make its own way, such as a run id stamped with the time and pid."""
    import jax

    if jax.process_count() == 1:
        return text
    data = np.zeros(size, np.uint8)
    raw = text.encode()[:size]
    data[: len(raw)] = np.frombuffer(raw, np.uint8)
    first = allgather(data)[0]
    return bytes(first[first != 0]).decode()


def barrier(name: str) -> None:
    """All processes meet here (no-op for one process)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def allgather(values) -> np.ndarray:
    """Every process's `values` (same shape and dtype everywhere), stacked in process order on a
    new leading axis; [1, ...] in a single process. A collective: every process must call it."""
    import jax

    values = np.asarray(values)
    if jax.process_count() == 1:
        return values[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values))
