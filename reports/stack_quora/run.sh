#!/bin/bash
# The stack-and-finetune comparison on the CS224N Quora sample (issue #7): three strategies x the linear, bilstm and
# bimpm heads, all-MiniLM-L6-v2, 4,000 training pairs, one seed, pinned to one core. From the repository root:
#   bash reports/stack_quora/run.sh /work/runs/stack_quora [CORE]
# Each run resumes if interrupted (rerun the script); finished runs are not trained again.
set -u
OUT=${1:-runs/stack/quora_sample}
CORE=${2:-1}
D=../shared/data/cs224n_minbert/quora-dev.csv
for head in linear bimpm bilstm; do
  for strategy in stack_and_finetune finetune_only stack_only; do
    taskset -c "$CORE" python -m tf_transfer.stack --flagfile=flags/stack_quora_$head.flags --data=$D \
      --strategy=$strategy --preset=all_minilm_l6_v2_en --precision=mixed_bfloat16 --max_train_examples=4000 \
      --output_dir="$OUT/${head}_$strategy"
  done
done
runs=$(for head in linear bilstm bimpm; do for s in stack_and_finetune finetune_only stack_only; do
  printf '%s,' "$OUT/${head}_$s"; done; done)
python -m tf_transfer.stack --report="${runs%,}"
