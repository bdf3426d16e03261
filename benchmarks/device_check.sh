#!/usr/bin/env bash
# One accelerator in under five minutes: STREAM (BabelStream's five kernels), the matmul peak and
# a ResNet-50 synthetic training step, each printed as a ratio to the device's datasheet figure.
#
#   bash benchmarks/device_check.sh                 # GPU/TPU: device 0 of this machine
#   DEVICE=3 bash benchmarks/device_check.sh        # another device
#   bash benchmarks/device_check.sh --dry           # any machine (a CPU too): tiny sizes, checks
#                                                   # that every step runs and the summary prints
#   bash benchmarks/device_check.sh --out=DIR       # where the records go (default results/...)
#
# Steps (each a normal run of the engine, so each leaves its JSON record in the output folder):
#   1. python -m hpcai_jax.main --mode=stream: a quarter of the device's memory for the three
#      float64 arrays, 50 iterations; rates from the fastest call (docs/stream.md).
#   2+3. configs/synthetic_resnet50.flags, 30 steps of batch 256 in bfloat16 on synthetic 224x224
#      images; its record holds the matmul peak measured at start (chained 8192^2 bfloat16
#      matmuls) next to the datasheet peak, and the step's FLOP/s per device (MFU). The STREAM
#      record of step 1 is its roofline's bandwidth.
# Ratios: STREAM GB/s over the datasheet memory bandwidth (hpcai_jax/stream/datasheet.py),
# measured matmul and step FLOP/s over the datasheet bfloat16 peak (hpcai_jax/flops/peaks.py).
# Exit code: the first failing step's, else 0.
set -euo pipefail

DRY=0
OUT="results/device_check-$(date -u +%Y%m%dT%H%M%SZ)"
for arg in "$@"; do
  case "$arg" in
    --dry) DRY=1 ;;
    --out=*) OUT="${arg#--out=}" ;;
    *) echo "device_check.sh: unknown argument $arg (expected --dry, --out=DIR)" >&2; exit 2 ;;
  esac
done
PYTHON="${PYTHON:-python}"
cd "$(dirname "$0")/.."
mkdir -p "$OUT"

# One accelerator: the runtimes' own visibility variables, unless the caller set them.
DEVICE="${DEVICE:-0}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-$DEVICE}"
export HIP_VISIBLE_DEVICES="${HIP_VISIBLE_DEVICES:-$DEVICE}"
export TPU_VISIBLE_CHIPS="${TPU_VISIBLE_CHIPS:-$DEVICE}"
export TPU_CHIPS_PER_PROCESS_BOUNDS="${TPU_CHIPS_PER_PROCESS_BOUNDS:-1,1,1}"
export TPU_PROCESS_BOUNDS="${TPU_PROCESS_BOUNDS:-1,1,1}"

if [ "$DRY" = 1 ]; then
  STREAM_SIZE=(--array_size=65536 --num_times=3)
  TRAIN_SIZE=(--model=resnet_small --image_size=32 --num_classes=10 --batch_size=8 --steps=3
              --timing_warmup_steps=1 --dtype=float32)
else
  STREAM_SIZE=(--array_fraction=0.25 --num_times=50)
  TRAIN_SIZE=(--steps=30 --timing_warmup_steps=5)
fi

echo "== 1/2 STREAM ($OUT/stream.json)"
"$PYTHON" -m hpcai_jax.main --mode=stream --flagfile=configs/stream.flags "${STREAM_SIZE[@]}" \
  --results_dir="$OUT" --run_name=stream --overwrite

echo "== 2/2 matmul peak and ResNet-50 synthetic training step ($OUT/resnet50.json)"
"$PYTHON" -m hpcai_jax.main --flagfile=configs/synthetic_resnet50.flags "${TRAIN_SIZE[@]}" \
  --log_every=10 --stream_record="$OUT/stream.json" --results_dir="$OUT" --run_name=resnet50 \
  --overwrite

echo "== summary"
"$PYTHON" - "$OUT" <<'EOF'
import json
import sys
from pathlib import Path

from hpcai_jax.stream.datasheet import memory_bandwidth

out = Path(sys.argv[1])
stream = json.loads((out / "stream.json").read_text())
train = json.loads((out / "resnet50.json").read_text())
kind = stream["placement"]["device_kind"]
peaks = train["peak_flops"]
bandwidth = memory_bandwidth(kind)


def ratio(value, reference):
    return f"{value / reference:.3f}" if value and reference else "n/a"


def show(value, scale, digits):
    return f"{value / scale:16.{digits}f}" if value else f"{'-':>16}"


print(f"device: {kind} ({stream['placement']['platform']}); records in {out}")
if bandwidth is None:
    print(f"  no datasheet memory bandwidth for {kind!r}: STREAM ratios n/a")
else:
    print(f"  datasheet memory bandwidth {bandwidth[0] / 1e9:.0f} GB/s ({bandwidth[1]})")
print(f"{'figure':34}{'measured':>16}{'datasheet':>16}{'ratio':>8}")
for key, k in stream["kernels"].items():
    rate = k["gb_per_s_per_device"] * 1e9
    sheet = bandwidth[0] if bandwidth else None
    label = f"STREAM {k['label']} [GB/s]"
    print(f"{label:34}{show(rate, 1e9, 1)}{show(sheet, 1e9, 1)}{ratio(rate, sheet):>8}")
sheet = peaks.get("datasheet_per_device")
for label, value in (
    (f"matmul peak {peaks['dtype']} [TFLOP/s]", peaks.get("measured_per_device")),
    ("ResNet-50 step [TFLOP/s]", train["metrics"].get("flops_per_s_per_device")),
):
    print(f"{label:34}{show(value, 1e12, 3)}{show(sheet, 1e12, 3)}{ratio(value, sheet):>8}")
print(f"{'ResNet-50 images/s':34}{show(train['metrics']['images_per_s'], 1, 1)}")
valid = stream["validation"]["passed"] and train["status"] == "complete"
print("STREAM validation passed; training complete" if valid else "FAILED: see the records")
sys.exit(0 if valid else 1)
EOF
