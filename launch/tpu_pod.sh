#!/usr/bin/env bash
# hpcai_jax on a Cloud TPU VM pod slice: every worker runs the same command and JAX finds the
# pod by itself (jax.distributed.initialize() with no arguments). Run from the repository root.
#
#   TPU_NAME=my-v5e-32 ZONE=us-west4-a launch/tpu_pod.sh install
#   TPU_NAME=my-v5e-32 ZONE=us-west4-a launch/tpu_pod.sh run [--dry-run] [FLAG ...]
#
#   install   ship the committed tree (git archive HEAD) to every worker, unpack it in REPO,
#             create REPO/.venv and pip install -e '.[tpu]' there
#   run       python -m hpcai_jax.main --flagfile=FLAGFILE [FLAG ...] on every worker
#   --dry-run print the commands instead of running them (no gcloud needed)
#
# Environment: TPU_NAME, ZONE (required); PROJECT [gcloud's default]; REPO, the directory on
# the workers [hpcai_jax, under the remote home]; PYTHON on the workers, 3.11 or newer [python3];
# FLAGFILE [configs/synthetic_resnet50.flags]; CHECKPOINT_DIR [unset], which must be a gs://
# bucket or a filesystem every worker shares, so that a rerun after preemption (exit 75) resumes.
set -euo pipefail

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

die() {
  echo "tpu_pod.sh: error: $*" >&2
  exit 2
}

dry_run=0
action=""
flags=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h | --help) usage ;;
    install | run) if [ -z "$action" ]; then action="$arg"; else flags+=("$arg"); fi ;;
    *) flags+=("$arg") ;;
  esac
done
[ -n "$action" ] || usage
[ -n "${TPU_NAME:-}" ] || die "set TPU_NAME to the TPU VM's name"
[ -n "${ZONE:-}" ] || die "set ZONE to the TPU VM's zone"
REPO="${REPO:-hpcai_jax}"
PYTHON="${PYTHON:-python3}"
FLAGFILE="${FLAGFILE:-configs/synthetic_resnet50.flags}"
if [ "$dry_run" -eq 0 ]; then
  command -v gcloud >/dev/null || die "gcloud not found: install the Google Cloud CLI (or use --dry-run)"
fi

gcloud_tpu=(gcloud compute tpus tpu-vm)
where=("--zone=$ZONE" --worker=all)
if [ -n "${PROJECT:-}" ]; then where+=("--project=$PROJECT"); fi

# The words as one shell command line: plain words as they are, others in single quotes.
quote() {
  local word words=()
  for word in "$@"; do
    if [[ "$word" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      words+=("$word")
    else
      words+=("'${word//\'/\'\\\'\'}'")
    fi
  done
  echo "${words[*]}"
}

# Run "$@", or under --dry-run print it, ready to paste.
execute() {
  if [ "$dry_run" -eq 1 ]; then quote "$@"; else "$@"; fi
}

case "$action" in
  install)
    [ -f pyproject.toml ] || die "run from the hpcai_jax repository root"
    [ "${#flags[@]}" -eq 0 ] || die "install takes no flags: ${flags[*]}"
    archive="/tmp/hpcai_jax-$(git rev-parse --short HEAD).tar.gz"
    echo "shipping commit $(git rev-parse --short HEAD) (uncommitted changes are not included)" >&2
    execute git archive --format=tar.gz -o "$archive" HEAD
    execute "${gcloud_tpu[@]}" scp "$archive" "$TPU_NAME:/tmp/" "${where[@]}"
    # A worker whose Python is older than 3.11 stops here with a message, before pip runs.
    remote="$(quote "$PYTHON") -c \"import sys; sys.exit(sys.version_info < (3, 11))\""
    remote+=" || { echo \"hpcai_jax needs Python >= 3.11: set PYTHON, e.g. PYTHON=python3.11\" >&2; exit 2; }"
    remote+=" ; mkdir -p $(quote "$REPO") && tar -xzf $(quote "$archive") -C $(quote "$REPO")"
    remote+=" && cd $(quote "$REPO") && $(quote "$PYTHON") -m venv .venv && . .venv/bin/activate"
    remote+=' && pip install -q -e ".[tpu]"'
    execute "${gcloud_tpu[@]}" ssh "$TPU_NAME" "${where[@]}" --command="$remote"
    ;;
  run)
    # Checked here: the workers hold the same commit (install ships it).
    [ -f "$FLAGFILE" ] || die "flagfile not found: FLAGFILE=$FLAGFILE"
    task=(python -m hpcai_jax.main "--flagfile=$FLAGFILE")
    if [ -n "${CHECKPOINT_DIR:-}" ]; then task+=("--checkpoint_dir=$CHECKPOINT_DIR"); fi
    task+=("${flags[@]}")
    execute "${gcloud_tpu[@]}" ssh "$TPU_NAME" "${where[@]}" \
      --command="cd $(quote "$REPO") && . .venv/bin/activate && $(quote "${task[@]}")"
    ;;
esac
