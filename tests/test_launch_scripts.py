"""launch/slurm/*.sbatch and launch/tpu_pod.sh, run with bash here: no SLURM, no gcloud.

The sbatch scripts run with faked SLURM_* variables and stub `srun`/`scontrol` on PATH that
record their arguments, so the environment contract checks, the srun command line and the
requeue-on-75 logic are tested; whether a real SLURM honours the options is not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SBATCH = ["launch/slurm/gpu.sbatch", "launch/slurm/gpu_node.sbatch"]
# Every shell script the project ships, the benchmarks' too.
SHELL_SCRIPTS = [
    *SBATCH,
    "launch/slurm/common.sh",
    "launch/slurm/stream.sbatch",
    "launch/tpu_pod.sh",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "benchmarks").rglob("*.sh")),
]
# A stub that records its arguments, one per line, in $STUB_DIR/<name>.args.
STUB = '#!/bin/sh\nprintf "%s\\n" "$@" > "$STUB_DIR/$(basename "$0").args"\n'


BASH = shutil.which("bash")


@pytest.fixture
def cluster(tmp_path):
    """A fake SLURM batch environment: stubs on PATH, a venv, and a submit directory under
    tmp_path that links to the repository's code and configs, so outputs stay in tmp_path."""
    submit_dir = tmp_path / "repo"
    submit_dir.mkdir()
    for name in ("hpcai_jax", "launch", "configs"):
        (submit_dir / name).symlink_to(REPO / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, rc in (("srun", "${STUB_SRUN_RC:-0}"), ("scontrol", "0"), ("apptainer", "0")):
        (bin_dir / name).write_text(STUB + f"exit {rc}\n")
        (bin_dir / name).chmod(0o755)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    # An interpreter with hpcai_jax installed: a wrapper that execs it, not a symlink (a link
    # to a venv's python is outside that venv: Python looks for pyvenv.cfg beside the link).
    (venv_bin / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv_bin / "python").chmod(0o755)
    (venv_bin / "activate").write_text(f'PATH="{venv_bin}:$PATH"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JAX_"))}
    for name in (
        "REPO",
        "FLAGFILE",
        "VENV",
        "CONTAINER",
        "CHECKPOINT_DIR",
        "RESULTS_DIR",
        "LOG_DIR",
        "EXTRA_FLAGS",
    ):
        env.pop(name, None)
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        STUB_DIR=str(tmp_path),
        SLURM_JOB_ID="4321",
        SLURM_JOB_NAME="bench",
        SLURM_SUBMIT_DIR=str(submit_dir),
        SLURM_JOB_NUM_NODES="2",
        SLURM_GPUS_ON_NODE="4",
        SLURM_CPUS_PER_TASK="8",
        FLAGFILE="configs/quickstart.flags",
        VENV=str(tmp_path / "venv"),
        EXTRA_FLAGS="--epochs=1 --seed=3",
    )
    return env


def run(script: str, env: dict[str, str], **changes: str | None) -> subprocess.CompletedProcess:
    env = dict(env)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    # From another directory, as sbatch runs a spooled copy: the script must find the repo itself.
    return subprocess.run(
        [BASH, str(REPO / script)], env=env, cwd="/", capture_output=True, text=True, timeout=30
    )


def recorded(env: dict[str, str], name: str) -> list[str] | None:
    path = Path(env["STUB_DIR"]) / f"{name}.args"
    return path.read_text().splitlines() if path.exists() else None


@pytest.mark.slow
@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_bash_parses_every_script(script):
    subprocess.run(["bash", "-n", str(REPO / script)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_scripts_are_shellcheck_clean():
    result = subprocess.run(
        ["shellcheck", "-x", *SHELL_SCRIPTS], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_gpu_sbatch_runs_one_task_per_gpu_with_the_contract(cluster):
    result = run("launch/slurm/gpu.sbatch", cluster, SLURM_NTASKS_PER_NODE="4")
    assert result.returncode == 0, result.stderr
    assert recorded(cluster, "srun") == [
        "--output=logs/%x-%j-%t.out",
        "--open-mode=append",
        "--kill-on-bad-exit=0",
        "--wait=60",
        "--gpu-bind=none",
        "python",
        "-m",
        "hpcai_jax.main",
        "--flagfile=configs/quickstart.flags",
        "--checkpoint_dir=checkpoints/bench",  # one per job name: a requeued job resumes
        "--results_dir=results",
        "--gpu_settings=default",
        "--epochs=1",
        "--seed=3",
    ]
    assert recorded(cluster, "scontrol") is None
    submit_dir = Path(cluster["SLURM_SUBMIT_DIR"])
    assert all((submit_dir / d).is_dir() for d in ("checkpoints/bench", "results", "logs"))
    assert "port 61665" in result.stdout  # 4321 % 4096 + 61440, JAX's SLURM rule


@pytest.mark.slow
def test_gpu_node_sbatch_gives_the_task_all_local_gpus(cluster):
    result = run("launch/slurm/gpu_node.sbatch", cluster, SLURM_NTASKS_PER_NODE="1")
    assert result.returncode == 0, result.stderr
    srun_args = recorded(cluster, "srun")
    # Before EXTRA_FLAGS, which come last so that a user's flag wins.
    assert srun_args[-3:] == ["--local_device_ids=all", "--epochs=1", "--seed=3"]


@pytest.mark.slow
def test_gpu_node_sbatch_without_extra_flags(cluster):
    result = run(
        "launch/slurm/gpu_node.sbatch", cluster, EXTRA_FLAGS=None, SLURM_NTASKS_PER_NODE="1(x2)"
    )
    assert result.returncode == 0, result.stderr
    assert recorded(cluster, "srun")[-2:] == ["--gpu_settings=default", "--local_device_ids=all"]


@pytest.mark.slow
def test_gpu_settings_reach_every_task(cluster):
    result = run("launch/slurm/gpu.sbatch", cluster, GPU_SETTINGS="none", SLURM_NTASKS_PER_NODE="4")
    assert result.returncode == 0, result.stderr
    assert "--gpu_settings=none" in recorded(cluster, "srun")


@pytest.mark.slow
def test_output_directories_can_be_moved(cluster, tmp_path):
    dirs = {
        name: str(tmp_path / name.lower()) for name in ("CHECKPOINT_DIR", "RESULTS_DIR", "LOG_DIR")
    }
    result = run("launch/slurm/gpu.sbatch", cluster, **dirs)
    assert result.returncode == 0, result.stderr
    srun_args = recorded(cluster, "srun")
    assert f"--output={dirs['LOG_DIR']}/%x-%j-%t.out" in srun_args
    assert f"--checkpoint_dir={dirs['CHECKPOINT_DIR']}" in srun_args
    assert f"--results_dir={dirs['RESULTS_DIR']}" in srun_args


@pytest.mark.slow
@pytest.mark.parametrize("script", SBATCH)
def test_a_preempted_step_requeues_the_job(cluster, script):
    result = run(script, cluster, STUB_SRUN_RC="75")
    assert result.returncode == 75
    assert recorded(cluster, "scontrol") == ["requeue", "4321"]
    assert "requeueing job 4321" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("script", SBATCH)
@pytest.mark.parametrize("code", ["69", "137"])  # lost or hung; a task killed (128 + SIGKILL)
def test_a_lost_or_hung_step_is_requeued_up_to_max_requeues(cluster, script, code):
    result = run(script, cluster, STUB_SRUN_RC=code, SLURM_RESTART_COUNT="2")
    assert result.returncode == int(code)
    assert recorded(cluster, "scontrol") == ["requeue", "4321"]
    assert f"step lost a process or hung (exit {code}), restart 2 of 3" in result.stdout
    (Path(cluster["STUB_DIR"]) / "scontrol.args").unlink()
    result = run(script, cluster, STUB_SRUN_RC=code, SLURM_RESTART_COUNT="3")
    assert result.returncode == int(code) and recorded(cluster, "scontrol") is None


@pytest.mark.slow
@pytest.mark.parametrize("script", SBATCH)
def test_a_full_disk_is_requeued_up_to_max_requeues(cluster, script):
    """Exit 74 (errors.DiskFull): space is often freed by the next start (a purge, another
    job's files removed); the job resumes from its last complete checkpoint."""
    result = run(script, cluster, STUB_SRUN_RC="74", SLURM_RESTART_COUNT="1")
    assert result.returncode == 74
    assert recorded(cluster, "scontrol") == ["requeue", "4321"]
    assert "step found no space left on device (exit 74), restart 1 of 3" in result.stdout
    (Path(cluster["STUB_DIR"]) / "scontrol.args").unlink()
    result = run(script, cluster, STUB_SRUN_RC="74", SLURM_RESTART_COUNT="3")
    assert result.returncode == 74 and recorded(cluster, "scontrol") is None


@pytest.mark.slow
@pytest.mark.parametrize("script", SBATCH)
@pytest.mark.parametrize("code", ["1", "2", "65"])  # invalid run, usage error, bad data
def test_a_failed_step_is_not_requeued(cluster, script, code):
    result = run(script, cluster, STUB_SRUN_RC=code)
    assert result.returncode == int(code)
    assert recorded(cluster, "scontrol") is None
    assert f"step failed with exit code {code}" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("script", SBATCH)
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"FLAGFILE": "configs/missing.flags"},
            "flagfile not found: FLAGFILE=configs/missing.flags",
        ),
        ({"SLURM_GPUS_ON_NODE": None}, "no GPUs allocated to the job"),
        ({"SLURM_GPUS_ON_NODE": "0"}, "no GPUs allocated to the job"),
        ({"VENV": "/nonexistent/venv"}, "no virtual environment at VENV=/nonexistent/venv"),
        ({"SLURM_JOB_ID": None}, "submit this script with sbatch"),
        ({"CONTAINER": "/nonexistent.sif"}, "container image not found"),
    ],
)
def test_a_broken_contract_fails_before_srun(cluster, script, changes, message):
    result = run(script, cluster, **changes)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert recorded(cluster, "srun") is None


@pytest.mark.slow
def test_gpu_sbatch_wants_one_task_per_gpu(cluster):
    result = run("launch/slurm/gpu.sbatch", cluster, SLURM_NTASKS_PER_NODE="2")
    assert result.returncode == 2
    assert "one task per GPU: --ntasks-per-node=2 but 4 GPU(s) per node" in result.stderr
    result = run("launch/slurm/gpu.sbatch", cluster, SLURM_GPUS_PER_TASK="1")
    assert result.returncode == 2 and "--gpus-per-task" in result.stderr


@pytest.mark.slow
def test_gpu_node_sbatch_wants_one_task_per_node(cluster):
    result = run("launch/slurm/gpu_node.sbatch", cluster, SLURM_NTASKS_PER_NODE="4")
    assert result.returncode == 2
    assert "one task per node" in result.stderr


@pytest.mark.slow
def test_the_container_replaces_the_venv(cluster, tmp_path):
    image = tmp_path / "hpcai_jax.sif"
    image.touch()
    result = run("launch/slurm/gpu.sbatch", cluster, CONTAINER=str(image), VENV="/nonexistent")
    assert result.returncode == 0, result.stderr
    srun_args = recorded(cluster, "srun")
    i = srun_args.index("apptainer")
    assert srun_args[i : i + 5] == [
        "apptainer",
        "run",
        "--nv",
        str(image),
        "--flagfile=configs/quickstart.flags",
    ]


def tpu(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TPU_NAME", "ZONE", "PROJECT")}
    return subprocess.run(
        [BASH, "launch/tpu_pod.sh", *args],
        env={**base, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.slow
def test_tpu_pod_run_dry_run_prints_one_command_for_all_workers():
    result = tpu("--dry-run", "run", "--epochs=2", TPU_NAME="pod", ZONE="us-west4-a")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "gcloud compute tpus tpu-vm ssh pod --zone=us-west4-a --worker=all "
        "'--command=cd hpcai_jax && . .venv/bin/activate && python -m hpcai_jax.main "
        "--flagfile=configs/synthetic_resnet50.flags --epochs=2'"
    )


@pytest.mark.slow
def test_tpu_pod_install_dry_run_ships_the_commit_and_pip_installs_tpu():
    result = tpu("install", "--dry-run", TPU_NAME="pod", ZONE="z", PROJECT="proj")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("git archive --format=tar.gz")
    assert lines[1].startswith("gcloud compute tpus tpu-vm scp ")
    assert "--project=proj" in lines[2] and "--worker=all" in lines[2]
    assert 'pip install -q -e ".[tpu]"' in lines[2]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--dry-run", "run"], {"ZONE": "z"}, "set TPU_NAME"),
        (["--dry-run", "run"], {"TPU_NAME": "t"}, "set ZONE"),
        (
            ["--dry-run", "run"],
            {"TPU_NAME": "t", "ZONE": "z", "FLAGFILE": "no.flags"},
            "flagfile not found",
        ),
        # Only builtins run before this check: an empty PATH hides gcloud, if installed.
        (["run"], {"TPU_NAME": "t", "ZONE": "z", "PATH": "/nonexistent"}, "gcloud not found"),
    ],
)
def test_tpu_pod_checks_its_inputs(args, env, message):
    result = tpu(*args, **env)
    assert result.returncode == 2
    assert message in result.stderr


# srun that records every call (one "<end>" line after each) and runs a staging step for real:
# its srun options dropped, the rest (python -m hpcai_jax.data.stage SRC DST) run here.
STAGING_SRUN = """#!/bin/sh
{ printf "%s\\n" "$@"; echo "<end>"; } >> "$STUB_DIR/srun.calls"
case "$*" in
  *hpcai_jax.data.stage*)
    while [ "${1#--}" != "$1" ]; do shift; done
    "$@"
    exit $? ;;
esac
exit "${STUB_SRUN_RC:-0}"
"""


@pytest.fixture
def staging(cluster, tmp_path):
    """The fake cluster with that srun, and a tfds-like data directory to stage."""
    srun = tmp_path / "bin" / "srun"
    srun.write_text(STAGING_SRUN)
    source = tmp_path / "tfds"
    (source / "foo" / "1.0.0").mkdir(parents=True)
    for name in ("foo-train.array_record-00000-of-00001", "dataset_info.json"):
        (source / "foo" / "1.0.0" / name).write_text(name)
    return cluster


def srun_calls(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["STUB_DIR"]) / "srun.calls"
    calls, call = [], []
    for line in path.read_text().splitlines() if path.exists() else []:
        if line == "<end>":
            calls.append(call)
            call = []
        else:
            call.append(line)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("script", SBATCH)
def test_stage_dir_stages_once_per_node_then_trains_from_the_copy(staging, script, tmp_path):
    source, local = tmp_path / "tfds", tmp_path / "local" / "tfds"
    result = run(
        script,
        staging,
        STAGE_DIR=str(local),
        EXTRA_FLAGS=f"--epochs=1 --data_dir={source}",
        SLURM_NTASKS_PER_NODE=None,
    )
    assert result.returncode == 0, result.stderr
    stage, train = srun_calls(staging)
    assert stage == [
        "--nodes=2",  # SLURM_JOB_NUM_NODES: one task on each node
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=8",
        "--output=logs/%x-%j-stage-%n.out",
        "--open-mode=append",
        "python",
        "-m",
        "hpcai_jax.data.stage",
        str(source),
        str(local),
    ]
    # After EXTRA_FLAGS' own --data_dir: the run reads the staged copy.
    assert train[-2:] == [f"--data_dir={source}", f"--data_dir={local}"]
    assert (local / "foo" / "1.0.0" / "dataset_info.json").read_text() == "dataset_info.json"
    assert f"staging {source} to {local} on each of 2 node(s)" in result.stdout


@pytest.mark.slow
def test_the_data_directory_to_stage_comes_from_the_flagfile_unless_extra_flags_give_one(
    staging, tmp_path
):
    flagfile = tmp_path / "imagenet.flags"
    flagfile.write_text(f"--dataset=foo\n  --data_dir={tmp_path / 'tfds'}  \n--epochs=1\n")
    local = tmp_path / "local"
    result = run("launch/slurm/gpu.sbatch", staging, FLAGFILE=str(flagfile), STAGE_DIR=str(local))
    assert result.returncode == 0, result.stderr
    assert srun_calls(staging)[0][-2:] == [str(tmp_path / "tfds"), str(local)]
    (Path(staging["STUB_DIR"]) / "srun.calls").unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run(
        "launch/slurm/gpu.sbatch",
        staging,
        FLAGFILE=str(flagfile),
        STAGE_DIR=str(local),
        EXTRA_FLAGS=f"--data_dir={elsewhere}",
    )
    # The stage refuses a directory without a prepared set: the job ends before training.
    assert result.returncode == 2
    (stage,) = srun_calls(staging)
    assert stage[-2:] == [str(elsewhere), str(local)]
    assert "staging failed with exit code 2 on some node: see logs/bench-4321-stage-*.out" in (
        result.stderr
    )


@pytest.mark.slow
def test_stage_dir_without_a_data_directory_fails_before_srun(staging, tmp_path):
    result = run(
        "launch/slurm/gpu.sbatch",
        staging,
        STAGE_DIR=str(tmp_path / "local"),
        EXTRA_FLAGS=f"--data_dir={tmp_path / 'missing'}",
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"the data directory to stage is not a directory: {tmp_path / 'missing'}" in (
        result.stderr
    )
    assert srun_calls(staging) == []


@pytest.mark.slow
def test_without_stage_dir_nothing_is_staged(staging):
    result = run("launch/slurm/gpu_node.sbatch", staging)
    assert result.returncode == 0, result.stderr
    (train,) = srun_calls(staging)
    assert not any(arg.startswith("--data_dir") for arg in train)


@pytest.mark.slow
def test_the_container_stages_with_its_own_python(staging, tmp_path):
    image = tmp_path / "hpcai_jax.sif"
    image.touch()
    result = run(
        "launch/slurm/gpu.sbatch",
        staging,
        CONTAINER=str(image),
        STAGE_DIR=str(tmp_path / "local"),
        EXTRA_FLAGS=f"--data_dir={tmp_path / 'tfds'}",
    )
    assert result.returncode == 0, result.stderr
    stage = srun_calls(staging)[0]
    i = stage.index("apptainer")
    assert stage[i:] == [
        "apptainer",
        "exec",
        str(image),
        "python",
        "-m",
        "hpcai_jax.data.stage",
        str(tmp_path / "tfds"),
        str(tmp_path / "local"),
    ]


def run_stream(env: dict[str, str], **changes: str | None) -> subprocess.CompletedProcess:
    """launch/slurm/stream.sbatch on 4 tasks per node, its own flagfile."""
    changes = {"FLAGFILE": None, "SLURM_NTASKS_PER_NODE": "4", **changes}
    return run("launch/slurm/stream.sbatch", env, **changes)


@pytest.mark.slow
def test_stream_acceptance_dry_run_prints_the_step_and_the_report(cluster):
    result = run_stream(cluster, EXTRA_FLAGS=None, EXPECT="triad:3885301MB/s", DRY_RUN="1")
    assert result.returncode == 0, result.stderr
    command = next(x for x in result.stdout.splitlines() if x.startswith("  command: "))
    assert command.split()[1:] == [
        "python",
        "-m",
        "hpcai_jax.main",
        "--flagfile=configs/stream.flags",
        "--checkpoint_dir=checkpoints/bench",
        "--results_dir=results",
        "--gpu_settings=default",
        "--mode=stream",
        "--stream_devices=each",
        "--stream_rules=uknss",
        "--run_name=stream-accept-4321",
        "--overwrite",
        "--expect=triad:3885301MB/s",
    ]
    assert "  report: python -m hpcai_jax.stream.drain results/stream-accept-4321.json" in (
        result.stdout
    )
    assert recorded(cluster, "srun") is None and "dry run: nothing started" in result.stdout


@pytest.mark.slow
def test_stream_acceptance_without_a_record_keeps_the_steps_code(cluster):
    result = run_stream(cluster, STUB_SRUN_RC="3")
    assert result.returncode == 3
    assert "no record results/stream-accept-4321.json: the step ended with exit code 3" in (
        result.stderr
    )
    assert "--stream_devices=each" in recorded(cluster, "srun")
