#!/bin/sh
# Regenerates docs/example_ranking/: four submission packages made from real tiny runs on this
# machine's CPU (forced host devices), then the list built from them. CPU examples, not systems:
# their figures rank nothing. Run from the repository root: sh docs/example_ranking/regenerate.sh
# (the list alone, from the shipped packages: the last command).
set -e
E=docs/example_ranking
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu
CLS="--model=resnet_small --ensemble_size=4 --members_per_device=2 --parallel_degree=4
  --batch_size=16 --steps=4 --train_examples=32 --eval_examples=300 --eval_batch_size=128
  --eval_every_epochs=1 --lr_schedule=constant --target_quality=0.1 --submission_status=onprem"
run() { python -m hpcai_jax.main --results_dir="$W/r" --mllog="$W/r/$1.mllog" --run_name="$@"; }
# Centre A: one configuration run twice (its spread), and a BabelStream run of the host.
run cpu-a-1 $CLS --submission_org="Example CPU Centre A" --submission_platform=cpu-example-a
run cpu-a-2 $CLS --submission_org="Example CPU Centre A" --submission_platform=cpu-example-a
# Centre B: the regression workload, packed with its weights (check --reevaluate: level L2).
run cpu-b --workload=regression --model=mlp --dataset=friedman1 --ensemble_size=4 \
  --members_per_device=1 --parallel_degree=2 --batch_size=16 --train_examples=256 \
  --eval_examples=64 --steps=64 --eval_every_epochs=1 --target_quality=0.3 \
  --submission_status=onprem --submission_org="Example CPU Centre B" \
  --submission_platform=cpu-example-b
# Centre C: M = 8 members; its package copied as centre D with one figure edited (below).
run cpu-c $CLS --ensemble_size=8 --members_per_device=4 --parallel_degree=4 \
  --submission_org="Example CPU Centre C" --submission_platform=cpu-example-c
P=$E/packages
rm -rf "$P" && mkdir -p "$P"
site() {
  printf '{"system": "cpu-example-%s", "organisation": "Example CPU Centre %s", "interconnect": "none: one host (a CPU example, not a system)"}\n' "$1" "$2" > "$W/cpu-example-$1.json"
}
site a A && site b B && site c C
python -m hpcai_jax.submission pack "$W/r/cpu-a-1.json" "$W/r/cpu-a-2.json" \
  docs/example_report/records/stream-cpu-1dev.json --out=$P/centre-a --system_json="$W/cpu-example-a.json"
python -m hpcai_jax.submission pack "$W/r/cpu-b.json" --with_weights --out=$P/centre-b \
  --system_json="$W/cpu-example-b.json"
python -m hpcai_jax.submission pack "$W/r/cpu-c.json" --out=$P/centre-c \
  --system_json="$W/cpu-example-c.json"
# Centre D: centre C's package with its VFLOPS doubled in the record alone: check fails it.
cp -r $P/centre-c $P/centre-d-edited
python - <<'PY'
import json
path = "docs/example_ranking/packages/centre-d-edited/cpu-c.json"
record = json.load(open(path))
record["metrics"]["vflops_per_s"] *= 2
json.dump(record, open(path, "w"), indent=2)
PY
python -m hpcai_jax.ranking $P/centre-a $P/centre-b $P/centre-c $P/centre-d-edited \
  --out=$E/list --overwrite --date=2026-12-07 --cpu_examples
