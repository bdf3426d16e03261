#!/bin/sh
# Regenerates docs/example_report/: the records in records/ (real runs on this machine's CPU,
# forced host devices; two runs as 2 processes on 2 simulated nodes), then report.md and its
# PNGs. Run from the repository root: sh docs/example_report/regenerate.sh
set -e
R=docs/example_report/records
rm -rf "$R" && mkdir -p "$R"
COMMON="--model=resnet_small --batch_size=32 --steps=32 --train_examples=512 --eval_examples=1000
  --eval_batch_size=250 --eval_every_epochs=1 --lr_schedule=constant --learning_rate=0.05
  --target_quality=0.9 --members_per_device=1 --results_dir=$R"
devices() { XLA_FLAGS=--xla_force_host_platform_device_count=$1 JAX_PLATFORMS=cpu; export XLA_FLAGS JAX_PLATFORMS; }

devices 8
# STREAM at the size rule's own size (--array_size=auto: each array >= 4x the host's last-level
# cache), and once by hand below it, which the report marks.
python -m hpcai_jax.main --mode=stream --num_times=20 --stream_devices=one \
  --results_dir=$R --run_name=stream-cpu-1dev
python -m hpcai_jax.main --mode=stream --num_times=20 --stream_devices=all \
  --results_dir=$R --run_name=stream-cpu-8dev
python -m hpcai_jax.main --mode=stream --array_size=4194304 --allow_small_arrays --num_times=20 \
  --stream_devices=one --results_dir=$R --run_name=stream-cpu-1dev-small
# Scalability at P_degree = 1: M = 1, 2, 4. M = 2 also writes an MLLOG, M = 4 reads its
# roofline bandwidth from the STREAM record: output and input paths, not the experiment.
devices 1
python -m hpcai_jax.main $COMMON --ensemble_size=1 --parallel_degree=1 --run_name=cpu-M1-P1
devices 2
python -m hpcai_jax.main $COMMON --ensemble_size=2 --parallel_degree=1 --run_name=cpu-M2-P1 \
  --mllog=$R/cpu-M2-P1.mllog
devices 4
python -m hpcai_jax.main $COMMON --ensemble_size=4 --parallel_degree=1 --run_name=cpu-M4-P1 \
  --stream_record=$R/stream-cpu-8dev.json
# The trade-off at Sys_scale = 4 (with M = 4 above), on 2 nodes x 2 devices: M = 1 sends a
# quarter of its gradient ring across nodes, M = 2 nothing.
for MP in "1 4" "2 2"; do
  set -- $MP
  python launch/local.py --num_processes=2 --devices_per_process=2 --processes_per_node=1 -- \
    python -m hpcai_jax.main $COMMON --ensemble_size=$1 --parallel_degree=$2 \
    --run_name=cpu-M$1-P$2-2nodes
done
# Skipped by the report, each for its reason: a diverged run, another batch size.
devices 2
python -m hpcai_jax.main $COMMON --ensemble_size=2 --parallel_degree=1 --run_name=cpu-M2-P1-nan \
  --inject_nan=1@3 --divergence_check_every=5 || true
python -m hpcai_jax.main $COMMON --ensemble_size=2 --parallel_degree=1 --run_name=cpu-M2-P1-b64 \
  --batch_size=64
rm -f "$R"/*.mllog
python -m hpcai_jax.report $R --out docs/example_report
python -m hpcai_jax.report --compare $R/cpu-M2-P1.json $R/cpu-M1-P4-2nodes.json \
  --out docs/example_report
