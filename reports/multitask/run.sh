#!/bin/bash
# The multi-task minBERT comparison (issue #8): the paper's rows with all-MiniLM-L6-v2, EXAMPLES training examples
# per task, EPOCHS epochs, 64 tokens, mixed_bfloat16, pinned to one core. From the repository root:
#   bash reports/multitask/run.sh OUT [CORE] [EXAMPLES] [EPOCHS] [ROWS]
# ROWS (a space-separated list of flagfile names) defaults to one row of each group of rows with the same settings.
# The rows after the paper's baseline use its order para, sts, sst and its mean or mixed pooling (docs/multitask.md);
# the committed baseline rows were made before issue 19 (with the flagfiles and this script of then), the five
# issue-19 rows (li_pooling_mean, li_pooling_mixed, li_llrd, li_llrd_mixed, li_summed) at commit a430241.
# Each row resumes if interrupted (rerun the script); finished rows are not trained again, and a folder holding a
# row with other settings is refused (use a fresh OUT).
set -u
OUT=${1:-runs/multitask_cpu}
CORE=${2:-0}
EXAMPLES=${3:-1000}
EPOCHS=${4:-4}
# li_heads_then_finetune starts from li_heads_first's best epoch, so that row comes first.
ROWS=${5:-"li_heads_first li_heads_then_finetune li_finetune li_pooling_mean li_pooling_mixed li_llrd li_llrd_mixed li_summed li_concat"}
D=../shared/data/cs224n_minbert
for row in $ROWS; do
  extra=""
  [ $row = li_heads_then_finetune ] && extra="--init_from=$OUT/li_heads_first"
  taskset -c "$CORE" python -m tf_transfer.multitask --flagfile=flags/$row.flags --data_dir=$D \
      --preset=all_minilm_l6_v2_en --precision=mixed_bfloat16 \
      --max_train_examples=$EXAMPLES --max_epochs=$EPOCHS --max_seq_length=64 \
      --output_dir="$OUT/$row" $extra
  echo "$row: exit $?"
done
runs=$(for row in $ROWS; do printf '%s,' "$OUT/$row"; done)
python -m tf_transfer.multitask --report="${runs%,}"
