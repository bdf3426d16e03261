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

# shellcheck source=benchmarks/accelerator/one_device.sh
. benchmarks/accelerator/one_device.sh
exec "${PYTHON:-python}" -m hpcai_jax.main --flagfile=configs/check.flags "$@"
