# shellcheck shell=bash
# Sourced by the one-accelerator scripts (acceptance.sh, benchmarks/device_check.sh): the
# runtimes' own visibility variables select device DEVICE [0], unless the caller set them.
DEVICE="${DEVICE:-0}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-$DEVICE}"
export HIP_VISIBLE_DEVICES="${HIP_VISIBLE_DEVICES:-$DEVICE}"
export TPU_VISIBLE_CHIPS="${TPU_VISIBLE_CHIPS:-$DEVICE}"
export TPU_CHIPS_PER_PROCESS_BOUNDS="${TPU_CHIPS_PER_PROCESS_BOUNDS:-1,1,1}"
export TPU_PROCESS_BOUNDS="${TPU_PROCESS_BOUNDS:-1,1,1}"
