#!/bin/bash
# A new user's check of the stack study's "each strategy x head combination runs from the documented commands": every head
# each task allows, under all three strategies, on a CoNLL-format file, a classification CSV and a Quora pair file
# (make_fixtures.py), plus a CNN + highway-LSTM ensemble; all-MiniLM-L6-v2, tiny sizes (it checks that the commands
# run and write complete summaries, not what the heads score). From the repository root:
#   bash reports/stack_matrix/run.sh /tmp/stack_matrix [CORE]
# Prints one line per run: task, head, strategy, exit status, seconds, and what its summary.json says.
set -u
DIR=${1:-/tmp/stack_matrix}
CORE=${2:-1}
python reports/stack_matrix/make_fixtures.py --out="$DIR"
SMALL="--preset=all_minilm_l6_v2_en --phase1_epochs=1 --max_epochs=2 --batch_size=8 --max_seq_length=32"
check() {  # output_dir: completed?, epochs with their phase, last validation scores
    python - "$1" <<'PY'
import json, os, sys
path = os.path.join(sys.argv[1], "ensemble.json")
if os.path.exists(path):
    e = json.load(open(path))
    print("ensemble", {k: round(v, 3) for k, v in (e.get("val") or {}).items()})
    sys.exit()
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
print("completed" if s.get("completed") else "NOT completed",
      "phases", [e.get("phase") for e in s["epochs"]],
      {k: round(v, 3) for k, v in s["epochs"][-1]["val"].items() if v is not None})
PY
}
run() {  # task, head (or ensemble), data flags...
    local task=$1 head=$2; shift 2
    local head_flag="--head=$head"
    case $head in *,*) head_flag="--ensemble=$head";; esac
    for strategy in stack_and_finetune finetune_only stack_only; do
        local out="$DIR/runs/${task}_${head/,/+}_$strategy" start=$SECONDS
        taskset -c "$CORE" python -m tf_transfer.stack --task=$task $head_flag --strategy=$strategy $SMALL "$@" \
            --output_dir="$out" >"$out.log" 2>&1
        local status=$?
        printf '%s %s %s: exit %s in %s s; %s\n' "$task" "$head" "$strategy" "$status" "$((SECONDS - start))" \
            "$( [ $status = 0 ] && check "$out" || tail -n 1 "$out.log")"
    done
}
mkdir -p "$DIR/runs"
for head in linear mlp bilstm highway_lstm transformer; do
    run conll_ner $head --data="$DIR/conll.txt"
done
for head in linear mlp bilstm cnn highway_lstm transformer cnn,highway_lstm; do
    run classification $head --data="$DIR/classification.csv"
done
for head in linear mlp bilstm cnn highway_lstm transformer bimpm sim_transformer; do
    run quora $head --data="$DIR/quora.csv"
done
