"""Fast unit tests of hpcai_jax/distributed.py: cluster detection, device ids, flag checks and
the start-up path, on hand-made environments. jax.distributed.initialize is never called: the
start-up tests replace it with a recorder."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from hpcai_jax import distributed as D
from hpcai_jax.distributed import DistributedConfig, detect_cluster, local_device_ids
from hpcai_jax.errors import UsageError

# What `srun` sets in each task of a 2-node step; values as SLURM writes them (strings).
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
)

# Eight tasks on two nodes, one per GPU (gpu.sbatch style): this is task 5, GPU 1 of node02.
SLURM_PER_GPU = {
    "SLURM_JOB_ID": "4321",
    "SLURM_STEP_NODELIST": "node[01-02]",
    "SLURM_NTASKS": "8",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS_PER_NODE": "4",
    "SLURM_GPUS_ON_NODE": "4",
}

# Two tasks on two nodes, one per node (gpu_node.sbatch style): this is task 1 on node02.
SLURM_PER_NODE = {
    "SLURM_JOB_ID": "4321",
    "SLURM_STEP_NODELIST": "node[01-02]",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_GPUS_ON_NODE": "4",
}

# Every variable detect_cluster or local_device_ids reads.
CLUSTER_VARS = (
    *SLURM_VARS,
    "SLURM_NTASKS_PER_NODE",
    "SLURM_GPUS_ON_NODE",
    "CUDA_VISIBLE_DEVICES",
    "OMPI_COMM_WORLD_SIZE",
    "TPU_WORKER_HOSTNAMES",
    "MEGASCALE_COORDINATOR_ADDRESS",
)


# --- detect_cluster ---------------------------------------------------------------------------


def test_no_cluster_variables_is_a_single_process():
    assert detect_cluster({}) is None


@pytest.mark.parametrize("env", [SLURM_PER_GPU, SLURM_PER_NODE], ids=["per_gpu", "per_node"])
def test_slurm_step_of_several_tasks_is_detected(env):
    assert detect_cluster(env) == "slurm"


def test_slurm_step_of_one_task_is_a_single_process():
    assert detect_cluster(dict(SLURM_PER_GPU, SLURM_NTASKS="1")) is None


@pytest.mark.parametrize("missing", SLURM_VARS)
def test_slurm_with_a_variable_missing_is_not_detected(missing):
    env = {k: v for k, v in SLURM_PER_GPU.items() if k != missing}
    assert detect_cluster(env) is None


def test_sbatch_allocation_outside_an_srun_step_is_not_detected():
    # The batch script itself has SLURM_JOB_ID and SLURM_NTASKS but no step variables.
    assert detect_cluster({"SLURM_JOB_ID": "4321", "SLURM_NTASKS": "8"}) is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OMPI_COMM_WORLD_SIZE": "4"}, "ompi"),
        ({"OMPI_COMM_WORLD_SIZE": "1"}, None),
        ({"TPU_WORKER_HOSTNAMES": "t0,t1"}, "tpu_pod"),
        ({"TPU_WORKER_HOSTNAMES": "t0"}, None),  # one host: a single process
        ({"MEGASCALE_COORDINATOR_ADDRESS": "t0:8080"}, "tpu_pod"),
        ({"MEGASCALE_COORDINATOR_ADDRESS": ""}, None),
    ],
)
def test_other_launchers(env, expected):
    assert detect_cluster(env) == expected


@pytest.mark.parametrize("name", ["SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"])
def test_empty_counts_read_as_one_process(name):
    env = {**SLURM_PER_GPU, name: ""} if name.startswith("SLURM") else {name: ""}
    assert detect_cluster(env) is None


def test_slurm_is_checked_before_open_mpi_and_tpu():
    env = dict(SLURM_PER_GPU, OMPI_COMM_WORLD_SIZE="8", TPU_WORKER_HOSTNAMES="t0,t1")
    assert detect_cluster(env) == "slurm"


def test_default_environment_is_os_environ(monkeypatch):
    for name in CLUSTER_VARS:
        monkeypatch.delenv(name, raising=False)
    assert detect_cluster() is None
    for name, value in SLURM_PER_GPU.items():
        monkeypatch.setenv(name, value)
    assert detect_cluster() == "slurm"


# --- local_device_ids -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "expected"),
    [("0,1,2,3", [0, 1, 2, 3]), ("3", [3]), ("2, 0", [2, 0]), ("", None)],
)
def test_explicit_ids_are_parsed_as_given(flag, expected):
    config = DistributedConfig(local_device_ids=flag)
    assert local_device_ids(config, None, {}) == expected


def test_all_takes_every_visible_gpu():
    config = DistributedConfig(local_device_ids="all")
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6", "SLURM_GPUS_ON_NODE": "8"}
    # Visible devices are renumbered from 0 by CUDA; CUDA_VISIBLE_DEVICES wins over SLURM's count.
    assert local_device_ids(config, None, env) == [0, 1, 2]


def test_all_falls_back_to_slurm_gpu_count():
    config = DistributedConfig(local_device_ids="all")
    assert local_device_ids(config, None, {"SLURM_GPUS_ON_NODE": "4"}) == [0, 1, 2, 3]
    assert local_device_ids(
        config, None, {"CUDA_VISIBLE_DEVICES": "", "SLURM_GPUS_ON_NODE": "2"}
    ) == [0, 1]


@pytest.mark.parametrize("env", [{}, {"SLURM_GPUS_ON_NODE": ""}, {"SLURM_GPUS_ON_NODE": "0"}])
def test_all_without_gpu_information_lets_jax_decide(env):
    assert local_device_ids(DistributedConfig(local_device_ids="all"), None, env) is None


def test_slurm_one_task_per_gpu_leaves_the_choice_to_jax():
    # JAX's SLURM detection then gives this task GPU SLURM_LOCALID.
    assert local_device_ids(DistributedConfig(), "slurm", SLURM_PER_GPU) is None


@pytest.mark.parametrize("per_node", ["1", "1(x2)"])
def test_slurm_one_task_per_node_takes_every_gpu_of_the_node(per_node):
    env = dict(SLURM_PER_NODE, SLURM_NTASKS_PER_NODE=per_node)
    assert local_device_ids(DistributedConfig(), "slurm", env) == [0, 1, 2, 3]


def test_slurm_one_task_per_node_counts_visible_gpus_first():
    env = dict(SLURM_PER_NODE, CUDA_VISIBLE_DEVICES="0,1")
    assert local_device_ids(DistributedConfig(), "slurm", env) == [0, 1]


def test_one_task_per_node_only_matters_under_slurm():
    assert local_device_ids(DistributedConfig(), None, SLURM_PER_NODE) is None
    assert local_device_ids(DistributedConfig(), "ompi", SLURM_PER_NODE) is None


def test_explicit_ids_beat_one_task_per_node():
    config = DistributedConfig(local_device_ids="1,3")
    assert local_device_ids(config, "slurm", SLURM_PER_NODE) == [1, 3]


def test_local_device_ids_default_environment_is_os_environ(monkeypatch):
    for name in CLUSTER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    assert local_device_ids(DistributedConfig(local_device_ids="all"), None) == [0, 1]


# --- DistributedConfig.validate ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"coordinator_address": "10.0.0.1:1234", "num_processes": 2, "process_id": 0},
        {"coordinator_address": "node01:61665", "num_processes": 4, "process_id": 3},
        {"local_device_ids": "all"},
        {"local_device_ids": "0,1,2,3"},
        {"local_device_ids": " 0, 1"},
        {"timeout_s": 1},
    ],
)
def test_valid_settings_pass(kwargs):
    DistributedConfig(**kwargs).validate()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"timeout_s": -5},
            "--distributed_timeout_s=-5: expected seconds >= 1, or 0 for the rule by process count",
        ),
        (
            {"coordinator_address": "10.0.0.1:1234", "num_processes": 2, "process_id": 2},
            "--process_id=2: expected 0 <= id < --num_processes=2",
        ),
        (
            {"coordinator_address": "10.0.0.1", "num_processes": 2, "process_id": 0},
            "--coordinator_address=10.0.0.1: expected HOST:PORT",
        ),
        (
            {"local_device_ids": "0,a"},
            "--local_device_ids=0,a: expected comma-separated integers or 'all'",
        ),
        (
            {"local_device_ids": "0,,1"},
            "--local_device_ids=0,,1: expected comma-separated integers or 'all'",
        ),
        (
            {"local_device_ids": "-1"},
            "--local_device_ids=-1: expected comma-separated integers or 'all'",
        ),
        (
            {"local_device_ids": "ALL"},
            "--local_device_ids=ALL: expected comma-separated integers or 'all'",
        ),
    ],
)
def test_bad_values_name_the_flag(kwargs, message):
    with pytest.raises(UsageError) as info:
        DistributedConfig(**kwargs).validate()
    assert str(info.value) == message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"coordinator_address": "10.0.0.1:1234"},
        {"num_processes": 2},
        {"process_id": 0},
        {"coordinator_address": "10.0.0.1:1234", "num_processes": 2},
        {"num_processes": 2, "process_id": 1},
    ],
)
def test_explicit_flags_go_together(kwargs):
    with pytest.raises(UsageError) as info:
        DistributedConfig(**kwargs).validate()
    assert str(info.value) == (
        "--coordinator_address, --num_processes and --process_id go together: "
        "give all three, or none for auto-detection"
    )


# --- initialize: which path is taken (jax.distributed.initialize replaced) -------------------


@pytest.fixture
def started(monkeypatch):
    """A clean cluster environment and a recorder in place of jax.distributed.initialize."""
    for name in CLUSTER_VARS:
        monkeypatch.delenv(name, raising=False)
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))
    return calls


def _set_env(monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_single_process_starts_nothing(started):
    assert D.initialize(DistributedConfig()) == "single process"
    assert started == []


def test_single_task_slurm_step_starts_nothing(started, monkeypatch):
    _set_env(monkeypatch, dict(SLURM_PER_GPU, SLURM_NTASKS="1"))
    assert D.initialize(DistributedConfig()) == "single process"
    assert started == []


def test_slurm_one_task_per_gpu_is_auto_detected(started, monkeypatch):
    _set_env(monkeypatch, SLURM_PER_GPU)
    assert D.initialize(DistributedConfig(timeout_s=30)) == "auto-detected slurm"
    assert started == [{"local_device_ids": None, "initialization_timeout": 30}]


def test_slurm_one_task_per_node_is_auto_detected_with_every_gpu(started, monkeypatch):
    _set_env(monkeypatch, SLURM_PER_NODE)
    assert D.initialize(DistributedConfig()) == "auto-detected slurm"
    assert started == [{"local_device_ids": [0, 1, 2, 3], "initialization_timeout": 300}]


def test_open_mpi_is_auto_detected(started, monkeypatch):
    _set_env(monkeypatch, {"OMPI_COMM_WORLD_SIZE": "2"})
    assert D.initialize(DistributedConfig(local_device_ids="0")) == "auto-detected ompi"
    assert started == [{"local_device_ids": [0], "initialization_timeout": 300}]


def test_explicit_flags_win_over_slurm(started, monkeypatch):
    _set_env(monkeypatch, SLURM_PER_GPU)
    config = DistributedConfig(
        coordinator_address="10.0.0.1:1234", num_processes=3, process_id=2, timeout_s=7
    )
    assert D.initialize(config) == "flags"
    assert started == [
        {
            "coordinator_address": "10.0.0.1:1234",
            "num_processes": 3,
            "process_id": 2,
            "local_device_ids": None,
            "initialization_timeout": 7,
        }
    ]


def test_explicit_flags_without_a_cluster(started):
    config = DistributedConfig(
        coordinator_address="127.0.0.1:5000", num_processes=2, process_id=0, local_device_ids="0,1"
    )
    assert D.initialize(config) == "flags"
    assert started == [
        {
            "coordinator_address": "127.0.0.1:5000",
            "num_processes": 2,
            "process_id": 0,
            "local_device_ids": [0, 1],
            "initialization_timeout": 300,
        }
    ]


def test_the_start_up_timeout_grows_with_the_processes_unless_given():
    assert [D.startup_timeout_s(n) for n in (0, 1, 2, 1000, 1001, 10000)] == [
        300,
        300,
        300,
        300,
        360,
        840,
    ]
    assert D.expected_processes(DistributedConfig(), {"SLURM_NTASKS": "2500"}) == 2500
    assert D.expected_processes(DistributedConfig(), {"OMPI_COMM_WORLD_SIZE": "8"}) == 8
    assert D.expected_processes(DistributedConfig(), {}) == 0
    flags = DistributedConfig(coordinator_address="h:1", num_processes=4608, process_id=0)
    assert D.timeout_for(flags, {}) == 300 + 4 * 60
    assert D.timeout_for(dataclasses.replace(flags, timeout_s=45), {}) == 45  # the flag wins


def test_a_collective_that_lost_its_peer_is_told_from_other_errors(monkeypatch):
    """What ends a process with the lost-peer code (69, requeued) instead of a traceback: only
    in a job of several processes, only errors that say a peer is gone."""
    import jax

    from hpcai_jax import distributed

    gloo = RuntimeError(
        "UNKNOWN: Gloo AllGather failed: [pair.cc:547] Connection closed by peer [127.0.0.1]:3493"
    )
    assert distributed.lost_peer(gloo) is None  # one process: nobody to lose
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    assert distributed.lost_peer(gloo).startswith("RuntimeError: UNKNOWN: Gloo AllGather failed")
    heartbeat = RuntimeError("UNAVAILABLE: Task 1 heartbeat timeout.\nmore")
    assert (
        distributed.lost_peer(heartbeat) == "RuntimeError: UNAVAILABLE: Task 1 heartbeat timeout."
    )
    assert distributed.lost_peer(ValueError("shapes (3,) and (4,) do not match")) is None


class _Store:
    """JAX's coordination key-value store as process 0 sees it: marks appear at given polls."""

    def __init__(self, marks_at_poll, fails=False):
        self.marks_at_poll, self.fails, self.polls = marks_at_poll, fails, 0

    def key_value_dir_get(self, prefix):
        assert prefix == D.EXIT_MARKS
        if self.fails:
            raise RuntimeError("UNAVAILABLE")
        self.polls += 1
        seen = sum(1 for at in self.marks_at_poll if at <= self.polls)
        return [(f"{prefix}{i}", "exit") for i in range(seen)]


def _fake_time():
    now = [0.0]
    return (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def test_process_zero_waits_for_all_marks_but_the_lost_one():
    clock, pause = _fake_time()
    store = _Store(marks_at_poll=[1, 5])  # processes 2 and 3 of 4 mark; process 1 is gone
    assert D.await_exit_marks(store, 4, wait_s=20, clock=clock, pause=pause) == 2
    assert store.polls == 5


def test_process_zero_waits_no_longer_than_its_bound():
    clock, pause = _fake_time()
    store = _Store(marks_at_poll=[1])  # two processes gone: the second mark never comes
    assert D.await_exit_marks(store, 4, wait_s=3, clock=clock, pause=pause) == 1
    assert clock() == pytest.approx(3, abs=0.06)


def test_a_store_that_does_not_answer_ends_the_wait():
    clock, pause = _fake_time()
    assert D.await_exit_marks(_Store([], fails=True), 4, clock=clock, pause=pause) == 0
    assert clock() == 0
