#!/usr/bin/env bash
# One accelerator against its datasheet: `--mode=check` (docs/node_check.md) on one device.
# The mode does what this script did (STREAM, the matmul peak, a ResNet-50 synthetic step, each
# as a ratio to the datasheet) and more, within a time budget, and exits 1 when a row FAILs.
#
#   bash benchmarks/device_check.sh                   # device 0 of this machine
#   DEVICE=3 bash benchmarks/device_check.sh          # another device
#   bash benchmarks/device_check.sh --check_budget_s=300   # any flag of hpcai_jax.main
#
# Every node's devices at once: python -m hpcai_jax.main --flagfile=configs/check.flags
set -euo pipefail
cd "$(dirname "$0")/.."

# One accelerator: the runtimes' own visibility variables, unless the caller set them.
DEVICE="${DEVICE:-0}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-$DEVICE}"
export HIP_VISIBLE_DEVICES="${HIP_VISIBLE_DEVICES:-$DEVICE}"
export TPU_VISIBLE_CHIPS="${TPU_VISIBLE_CHIPS:-$DEVICE}"
export TPU_CHIPS_PER_PROCESS_BOUNDS="${TPU_CHIPS_PER_PROCESS_BOUNDS:-1,1,1}"
export TPU_PROCESS_BOUNDS="${TPU_PROCESS_BOUNDS:-1,1,1}"
exec "${PYTHON:-python}" -m hpcai_jax.main --flagfile=configs/check.flags "$@"
