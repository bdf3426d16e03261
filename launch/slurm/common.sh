# shellcheck shell=bash
# Sourced by gpu.sbatch and gpu_node.sbatch: the environment contract checks, the command a task
# runs, and the step runner that requeues a preempted job. Not meant to be run on its own.
#
# Parameters (environment variables, defaults in brackets; relative paths are relative to REPO):
#   REPO            the repository checkout, on a filesystem every node sees [$SLURM_SUBMIT_DIR]
#   FLAGFILE        the run's flagfile [configs/synthetic_resnet50.flags]
#   VENV            virtual environment with `pip install -e '.[cuda]'` done [.venv]
#   CONTAINER       an Apptainer image (launch/hpcai_jax.def) to run instead of VENV [unset]
#   CHECKPOINT_DIR  shared directory; a requeued job resumes from it [checkpoints/$SLURM_JOB_NAME]
#   RESULTS_DIR     where process 0 writes the JSON record [results]
#   LOG_DIR         per-rank logs, <job name>-<job id>-<rank>.out [logs]
#   EXTRA_FLAGS     more hpcai_jax flags, split on spaces, e.g. "--epochs=2 --seed=1" [empty]
#   GPU_SETTINGS    XLA flags and variables set before JAX starts, by name (docs/gpu_settings.md):
#                   default, none, or e.g. "default,-latency_hiding" [default]
#   MAX_REQUEUES    requeues of a step that lost a process or hung (exit 69, or a task ended by a
#                   signal: srun's 128 + signal) or found the disk full (74) before the job gives
#                   up [3]
#   STAGE_DIR       a node-local directory: before training, one task per node copies the run's
#                   tfds data there (python -m hpcai_jax.data.stage; an earlier copy is checked,
#                   not copied again) and the run reads it: --data_dir=STAGE_DIR, after
#                   EXTRA_FLAGS. What is copied is the run's --data_dir (EXTRA_FLAGS's, else
#                   FLAGFILE's, else $TFDS_DATA_DIR or ~/tensorflow_datasets). With CONTAINER,
#                   STAGE_DIR must be bound into it (APPTAINER_BIND). docs/reliability.md, Data at
#                   scale [unset: read --data_dir in place]
# Site-specific NCCL variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) set in the environment reach
# every task unchanged; the records state them (provenance.environment).

PREEMPTED=75  # hpcai_jax.main's exit code after saving a checkpoint on SIGTERM
HUNG=69       # its exit code for a lost or hung peer (docs/reliability.md, Exit codes)
NO_SPACE=74   # its exit code for a full disk or quota: space is often freed by the next start

die() {
  echo "launch/slurm: error: $*" >&2
  exit 2
}

# Tasks per node as a number ("4", or "4(x2)" in some SLURM variables), empty if not set.
tasks_per_node() {
  local n="${SLURM_NTASKS_PER_NODE:-}"
  echo "${n%%(*}"
}

# GPUs this job has on each node: SLURM_GPUS_ON_NODE, else the count in --gpus-per-node
# (which may carry a type, as in "a100:4").
gpus_per_node() {
  if [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    echo "$SLURM_GPUS_ON_NODE"
  elif [ -n "${SLURM_GPUS_PER_NODE:-}" ]; then
    echo "${SLURM_GPUS_PER_NODE##*:}"
  else
    echo 0
  fi
}

# Fail fast, with a message that says what to do, before any node's time is spent.
check_contract() {
  [ -n "${SLURM_JOB_ID:-}" ] || die "SLURM_JOB_ID is not set: submit this script with sbatch"
  REPO="${REPO:-${SLURM_SUBMIT_DIR:-$PWD}}"
  cd "$REPO" 2>/dev/null || die "REPO=$REPO is not a directory"
  [ -d hpcai_jax ] || die "REPO=$REPO is not the hpcai_jax repository: sbatch from its root or set REPO"
  FLAGFILE="${FLAGFILE:-configs/synthetic_resnet50.flags}"
  [ -f "$FLAGFILE" ] || die "flagfile not found: FLAGFILE=$FLAGFILE (relative to $REPO)"
  CHECKPOINT_DIR="${CHECKPOINT_DIR:-checkpoints/${SLURM_JOB_NAME:-hpcai_jax}}"
  RESULTS_DIR="${RESULTS_DIR:-results}"
  LOG_DIR="${LOG_DIR:-logs}"
  read -r -a EXTRA <<<"${EXTRA_FLAGS:-}"

  local gpus
  gpus="$(gpus_per_node)"
  [ "$gpus" -gt 0 ] 2>/dev/null ||
    die "no GPUs allocated to the job: request them with #SBATCH --gpus-per-node=<gpus per node>"
  GPUS_PER_NODE="$gpus"

  if [ -n "${CONTAINER:-}" ]; then
    [ -f "$CONTAINER" ] || die "container image not found: CONTAINER=$CONTAINER"
    command -v apptainer >/dev/null || die "CONTAINER is set but apptainer is not on PATH (module load apptainer?)"
    # --nv: the host's NVIDIA driver inside the container. SLURM_* variables pass through, so
    # JAX's auto-detection works unchanged; the current directory is bound by default.
    RUN=(apptainer run --nv "$CONTAINER")
    STAGE=(apptainer exec "$CONTAINER" python -m hpcai_jax.data.stage)
  else
    VENV="${VENV:-.venv}"
    [ -f "$VENV/bin/activate" ] ||
      die "no virtual environment at VENV=$VENV: python3.11 -m venv $VENV && . $VENV/bin/activate && pip install -e '.[cuda]'"
    # shellcheck disable=SC1091  # the venv's own script, known only at run time
    . "$VENV/bin/activate"
    command -v python >/dev/null || die "no python in VENV=$VENV"
    python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("hpcai_jax") is None)' ||
      die "hpcai_jax is not installed in VENV=$VENV: pip install -e '.[cuda]'"
    RUN=(python -m hpcai_jax.main)
    STAGE=(python -m hpcai_jax.data.stage)
  fi
  if [ -n "${STAGE_DIR:-}" ]; then
    STAGE_SRC="$(source_data_dir)"
    [ -d "$STAGE_SRC" ] ||
      die "STAGE_DIR is set, but the data directory to stage is not a directory: $STAGE_SRC (the --data_dir of EXTRA_FLAGS or FLAGFILE)"
  fi
  mkdir -p "$CHECKPOINT_DIR" "$RESULTS_DIR" "$LOG_DIR" || die "cannot create the output directories"
}

# The --data_dir the run would read: the last one in EXTRA_FLAGS, else in FLAGFILE (a flagfile
# it includes is not read), else tfds's default.
source_data_dir() {
  local dir="" line arg
  while read -r line || [ -n "$line" ]; do
    case "$line" in --data_dir=*) dir="${line#--data_dir=}" ;; esac
  done <"$FLAGFILE"
  for arg in "${EXTRA[@]}"; do
    case "$arg" in --data_dir=*) dir="${arg#--data_dir=}" ;; esac
  done
  echo "${dir:-${TFDS_DATA_DIR:-$HOME/tensorflow_datasets}}"
}

# CMD: what every task runs. EXTRA_FLAGS come last, so they override the flagfile and these;
# only STAGE_DIR's --data_dir follows them, as the staged copy is what the run must read.
build_command() {
  CMD=("${RUN[@]}" "--flagfile=$FLAGFILE" "--checkpoint_dir=$CHECKPOINT_DIR"
    "--results_dir=$RESULTS_DIR" "--gpu_settings=${GPU_SETTINGS:-default}" "$@" "${EXTRA[@]}")
  if [ -n "${STAGE_DIR:-}" ]; then CMD+=("--data_dir=$STAGE_DIR"); fi
}

# With STAGE_DIR set: one task on each node copies STAGE_SRC to STAGE_DIR, or checks the copy
# already there (a requeued job on the same nodes copies nothing); a stage of another job into
# the same directory on that node is waited for (the stage's lock). One log per node. A failed
# copy ends the job with the stage's exit code, before training.
stage_data() {
  [ -n "${STAGE_DIR:-}" ] || return 0
  local nodes="${SLURM_JOB_NUM_NODES:-1}" rc=0
  local logs="$LOG_DIR/${SLURM_JOB_NAME:-}-$SLURM_JOB_ID-stage-<node>.out"
  echo "staging $STAGE_SRC to $STAGE_DIR on each of $nodes node(s); logs: $logs"
  srun --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 \
    --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --output="$LOG_DIR/%x-%j-stage-%n.out" \
    --open-mode=append "${STAGE[@]}" "$STAGE_SRC" "$STAGE_DIR" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "staging failed with exit code $rc on some node: see ${logs/<node>/*}" >&2
    exit "$rc"
  fi
}

# What the job is about to do, in its batch log ($1: the process layout).
describe_job() {
  local port="${JAX_COORDINATOR_PORT:-$((SLURM_JOB_ID % 4096 + 61440))}"
  echo "job $SLURM_JOB_ID (${SLURM_JOB_NAME:-}), restart ${SLURM_RESTART_COUNT:-0}:" \
    "${SLURM_JOB_NUM_NODES:-?} node(s) x $GPUS_PER_NODE GPU(s), $1"
  echo "  coordinator: first node of the step, port $port (JAX: JAX_COORDINATOR_PORT, else SLURM_JOB_ID % 4096 + 61440)"
  echo "  per-rank logs: $LOG_DIR/${SLURM_JOB_NAME:-}-$SLURM_JOB_ID-<rank>.out"
  echo "  command: ${CMD[*]}"
}

# srun "$@" (srun options) "${CMD[@]}", then requeue the job if the step was preempted: every
# task saved a checkpoint on SIGTERM and exited 75. The requeued job keeps its id, name and
# CHECKPOINT_DIR, so it resumes. Returns the step's exit code.
#   --output: one log per rank (%t), appended to across requeues.
#   --kill-on-bad-exit=0 --wait=60: when the first task ends, the others get 60 s to end too
#     before SLURM stops them. Stopping them at once (KillOnBadExit=1, a common site default)
#     could kill tasks still exiting after a collective checkpoint and hide the step's exit 75;
#     not stopping them at all would leave a crashed task's peers waiting in a collective until
#     the time limit.
run_step() {
  local rc=0
  # srun does not take --cpus-per-task from the job on every SLURM version (22.05 stopped, 23.11
  # restored it); SRUN_CPUS_PER_TASK makes it explicit.
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"; fi
  srun --output="$LOG_DIR/%x-%j-%t.out" --open-mode=append --kill-on-bad-exit=0 --wait=60 \
    "$@" "${CMD[@]}" || rc=$?
  if [ "$rc" -eq "$PREEMPTED" ]; then
    echo "step preempted (exit $rc), checkpoint in $CHECKPOINT_DIR: requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID" || echo "scontrol requeue failed: resubmit to resume" >&2
  elif [ "$rc" -eq "$NO_SPACE" ] && [ "${SLURM_RESTART_COUNT:-0}" -lt "${MAX_REQUEUES:-3}" ]; then
    echo "step found no space left on device (exit $rc), restart ${SLURM_RESTART_COUNT:-0} of" \
      "${MAX_REQUEUES:-3}: requeueing job $SLURM_JOB_ID to resume from $CHECKPOINT_DIR"
    scontrol requeue "$SLURM_JOB_ID" || echo "scontrol requeue failed: resubmit to resume" >&2
  elif { [ "$rc" -eq "$HUNG" ] || [ "$rc" -gt 128 ]; } &&
    [ "${SLURM_RESTART_COUNT:-0}" -lt "${MAX_REQUEUES:-3}" ]; then
    # A lost or hung peer (69), or a task a signal ended (srun: 128 + signal; a node lost, a
    # process killed): the job resumes from its last periodic checkpoint on new nodes.
    echo "step lost a process or hung (exit $rc), restart ${SLURM_RESTART_COUNT:-0} of" \
      "${MAX_REQUEUES:-3}: requeueing job $SLURM_JOB_ID to resume from $CHECKPOINT_DIR"
    scontrol requeue "$SLURM_JOB_ID" || echo "scontrol requeue failed: resubmit to resume" >&2
  elif [ "$rc" -ne 0 ]; then
    echo "step failed with exit code $rc: see $LOG_DIR/${SLURM_JOB_NAME:-}-$SLURM_JOB_ID-*.out" >&2
  fi
  return "$rc"
}
