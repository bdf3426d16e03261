#!/usr/bin/env bash
# One accelerator judged in one command (docs/acceptance.md): the environment, STREAM's five
# kernels, matmul peaks per dtype, the node check's items, the ResNet-50 step at 1, 2 and 4
# members per device, float16/bfloat16/int8 steps, the full-size detector, the JPEG input path
# on all host cores, NVML energy and the GPU settings. Writes OUT_DIR/acceptance.json,
# acceptance.md, the journal and the log; prints the summary; ends within the budget plus a
# minute (420 s + 60 s = 8 minutes by default). Exit 0 when no item FAILs, 1 when one does, 2 for
# bad arguments.
#
#   bash benchmarks/accelerator/acceptance.sh OUT_DIR                     # the node's own JAX
#   bash benchmarks/accelerator/acceptance.sh OUT_DIR --wheelhouse=WHL    # offline: install first
#   bash benchmarks/accelerator/acceptance.sh OUT_DIR --smoke             # toy sizes, any CPU
#
# Options: --smoke, --budget_s=S (seconds for the measuring, > 0), --wheelhouse=DIR (a wheelhouse
# from wheelhouse.sh, installed into $TMPDIR first), --gpu_settings=SPEC (as hpcai_jax.main's),
# --groups=NAME,... (only these groups of the plan: a rerun of what an earlier run cut or failed).
# Environment: PYTHON [python3]; DEVICE [0], the one accelerator to use (as device_check.sh);
# JAX_COMPILATION_CACHE_DIR [.cache/acceptance-xla in the repository], so a second try reuses
# the first one's compiles.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"

die() {
  echo "acceptance.sh: error: $*" >&2
  exit 2
}

OUT="" SMOKE=() BUDGET="" WHEELHOUSE="" SETTINGS=() ONLY=()
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=(--smoke) ;;
    --budget_s=*) BUDGET="${arg#*=}" ;;
    --wheelhouse=*) WHEELHOUSE="${arg#*=}" ;;
    --gpu_settings=*) SETTINGS=("$arg") ;;
    --groups=*) ONLY=("$arg") ;;
    -*) die "unknown option $arg (expected --smoke, --budget_s=S, --wheelhouse=DIR, --gpu_settings=SPEC, --groups=NAME,...)" ;;
    *)
      [ -z "$OUT" ] || die "one OUT_DIR expected, got $OUT and $arg"
      OUT="$arg"
      ;;
  esac
done
[ -n "$OUT" ] || die "no OUT_DIR: usage: acceptance.sh OUT_DIR [--smoke] [--budget_s=S] [--wheelhouse=DIR]"
if [ -z "$BUDGET" ]; then
  if [ ${#SMOKE[@]} -gt 0 ]; then BUDGET=120; else BUDGET=420; fi
fi
if ! [[ "$BUDGET" =~ ^[0-9]+$ ]] || [ "$BUDGET" -eq 0 ]; then
  die "--budget_s=$BUDGET: expected a whole number of seconds > 0"
fi
[ ! -e "$OUT" ] || [ -d "$OUT" ] || die "OUT_DIR $OUT exists and is not a directory"
[ ! -e "$OUT/acceptance.journal.jsonl" ] ||
  die "OUT_DIR $OUT holds an earlier acceptance run; choose another directory"
[ -z "$WHEELHOUSE" ] || [ -d "$WHEELHOUSE" ] || die "--wheelhouse=$WHEELHOUSE: not a directory"
CREATED=0
[ -e "$OUT" ] || CREATED=1
mkdir -p "$OUT" || die "cannot create OUT_DIR $OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/acceptance.log"

START=$SECONDS
# The measuring process gets the budget; the command as a whole ends within it plus GRACE_S
# (start-up, the last group's overrun, the summary).
GRACE_S=45
DEADLINE=$((START + BUDGET + GRACE_S))

if [ -n "$WHEELHOUSE" ]; then
  SITE="${TMPDIR:-/tmp}/hpcai_jax_site"
  bash "$REPO/benchmarks/accelerator/install.sh" "$WHEELHOUSE" --target="$SITE" 2>&1 | tee -a "$LOG" ||
    echo "acceptance.sh: the install step reported missing modules: the items that need them WARN" | tee -a "$LOG"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$REPO/.cache/acceptance-xla}"
# shellcheck source=benchmarks/accelerator/one_device.sh
. "$REPO/benchmarks/accelerator/one_device.sh"

# A measuring process that dies (a crash in a group, or the time limit) leaves its journal;
# the next one reports the group it died in and runs the rest, while time remains.
resume=()
rc=0
for attempt in 1 2 3; do
  left=$((DEADLINE - SECONDS))
  budget=$((left - GRACE_S))
  if [ "$attempt" -eq 1 ]; then budget=$BUDGET; fi
  [ "$budget" -ge 10 ] || break
  set +e
  timeout --kill-after=10 "$left" "$PYTHON" -m hpcai_jax.acceptance "$OUT" "${SMOKE[@]}" \
    --budget_s="$budget" "${SETTINGS[@]}" "${ONLY[@]}" "${resume[@]}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -le 2 ]; then
    # Arguments only the measuring process can judge (a group's name): leave nothing behind.
    if [ "$rc" -eq 2 ] && [ "$attempt" -eq 1 ] && [ "$CREATED" -eq 1 ]; then rm -rf "$OUT"; fi
    exit "$rc"
  fi
  # Past the deadline the process was cut by `timeout` (124, or 137 after --kill-after).
  if [ "$SECONDS" -ge "$DEADLINE" ]; then rc=124; fi
  echo "acceptance.sh: the measuring process ended with exit $rc; $((DEADLINE - SECONDS)) s left" | tee -a "$LOG"
  resume=(--resume_after_exit="$rc")
done
"$PYTHON" -m hpcai_jax.acceptance.render "$OUT" --interrupted_exit="$rc" 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
