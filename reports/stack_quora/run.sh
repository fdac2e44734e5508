#!/bin/bash
# Stack-and-finetune on the CS224N Quora sample, all-MiniLM-L6-v2, 4,000 training pairs, pinned to one core.
# From the repository root:
#   bash reports/stack_quora/run.sh OUT [CORE] [SET] [SEEDS]
# SET=grid (the default; the committed table of issue #7): the linear, bimpm and bilstm heads under all three
#   strategies, seed 0.
# SET=paper (issue 19; committed in runs/paper/): the paper's Quora comparison, BERT + Sim-Transformer and BERT + BiMPM trained
#   with stack-and-finetune against its fine-tune-only baseline, [CLS] and two fully connected layers
#   (flags/stack_quora_mlp.flags), 3 seeds each. A seed also draws the validation split (the same for the three
#   models of that seed); the 4,000 training pairs are then the first of the rest in file order, so seeds share
#   most of their training pairs. Seed 0 of bimpm_stack_and_finetune has the settings of the grid's
#   bimpm_stack_and_finetune.
# SEEDS (SET=paper only, default "0 1 2") lets two cores share the comparison, e.g. "0 1" on one and "2" on the
#   other; the report is written after every call from the seeds finished so far.
# Each run resumes if interrupted (rerun the script); finished runs are not trained again.
set -u
OUT=${1:-runs/stack/quora_sample}
CORE=${2:-1}
SET=${3:-grid}
SEEDS=${4:-"0 1 2"}
D=../shared/data/cs224n_minbert/quora-dev.csv
COMMON="--data=$D --preset=all_minilm_l6_v2_en --precision=mixed_bfloat16 --max_train_examples=4000"
case $SET in
  grid)
    for head in linear bimpm bilstm; do
      for strategy in stack_and_finetune finetune_only stack_only; do
        taskset -c "$CORE" python -m tf_transfer.stack --flagfile=flags/stack_quora_$head.flags $COMMON \
          --strategy=$strategy --output_dir="$OUT/${head}_$strategy"
      done
    done
    runs=$(for head in linear bilstm bimpm; do for s in stack_and_finetune finetune_only stack_only; do
      printf '%s,' "$OUT/${head}_$s"; done; done)
    python -m tf_transfer.stack --report="${runs%,}"
    ;;
  paper)
    MODELS="sim_transformer_stack_and_finetune bimpm_stack_and_finetune mlp_finetune_only"
    for seed in $SEEDS; do
      for model in $MODELS; do
        head=${model%%_stack_and_finetune}; head=${head%%_finetune_only}
        # stack_quora_mlp.flags sets --strategy=finetune_only; the other two keep stack_common's stack_and_finetune.
        taskset -c "$CORE" python -m tf_transfer.stack --flagfile=flags/stack_quora_$head.flags $COMMON \
          --seed=$seed --output_dir="$OUT/$model/seed$seed"
        echo "$model seed $seed: exit $?"
      done
    done
    runs=$(for model in $MODELS; do for seed in 0 1 2; do
      [ -f "$OUT/$model/seed$seed/summary.json" ] && printf '%s,' "$OUT/$model/seed$seed"; done; done)
    python -m tf_transfer.stack --report="${runs%,}"
    ;;
  *)
    echo "SET must be grid or paper, got $SET" >&2; exit 2 ;;
esac
