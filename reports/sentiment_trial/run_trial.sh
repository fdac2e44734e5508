#!/bin/bash
# Smoke-sized trial of the README's sentiment commands on a Kaggle-format CSV made from SST-2 (not a reproduction).
# Run from the repository root: bash reports/sentiment_trial/run_trial.sh /tmp/sentiment_trial
# The unfrozen model is killed with SIGKILL once its second seed has finished an epoch, then the same command is run
# again; frozen is run a second time to show that a finished model is not trained again.
set -u
DIR=${1:-/tmp/sentiment_trial}
DATA=$DIR/train.csv
OUT=$DIR/hart
LOGS=$DIR/logs
mkdir -p "$LOGS"
python reports/sentiment_trial/make_kaggle_csv.py --sst2=../shared/data/glue/SST-2/train.tsv --rows_per_class=200 \
    --output="$DATA"
sha256sum "$DATA"
S="nice -n 10 python -m tf_transfer.sentiment"
BERT="--preset=all_minilm_l6_v2_en --runs=2 --data=$DATA --output_dir=$OUT"

step() {  # name, command...: runs it, keeps stdout/stderr, prints the exit status and the wall time
    local name=$1; shift
    local start=$SECONDS
    "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
    echo "$name: exit $? in $((SECONDS - start)) s"
}

step sparse $S --flagfile=flags/hart_sparse.flags --data="$DATA" --output_dir="$OUT"
step frozen $S --flagfile=flags/hart_bert_frozen.flags $BERT
step frozen_again $S --flagfile=flags/hart_bert_frozen.flags $BERT

# Unfrozen: kill -9 after seed 1's first epoch is saved, then the same command again.
start=$SECONDS
$S --flagfile=flags/hart_bert_unfrozen.flags $BERT >"$LOGS/unfrozen_killed.out" 2>"$LOGS/unfrozen_killed.err" &
pid=$!
summary=$OUT/bert_unfrozen_cls.in_progress/summary.json
until python - "$summary" <<'PY' 2>/dev/null
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if s["seed"] == 1 and len(s["epochs"]) >= 1 else 1)
PY
do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
kill -9 "$pid"; wait "$pid"
echo "unfrozen_killed: exit $? (SIGKILL) after $((SECONDS - start)) s"
cp "$summary" "$LOGS/unfrozen_in_progress_at_kill.json"
ls "$OUT/bert_unfrozen_cls.in_progress" >"$LOGS/unfrozen_in_progress_files.txt"
step unfrozen_resumed $S --flagfile=flags/hart_bert_unfrozen.flags $BERT

step top2 $S --flagfile=flags/hart_bert_top2.flags $BERT
step different_settings $S --flagfile=flags/hart_bert_top2.flags $BERT --precision=mixed_bfloat16
step report $S --approach=report --output_dir="$OUT"

# The same unfrozen command without the kill, in another folder: the resumed seed should give the same numbers.
step unfrozen_uninterrupted $S --flagfile=flags/hart_bert_unfrozen.flags --preset=all_minilm_l6_v2_en --runs=2 \
    --data="$DATA" --output_dir="$DIR/unfrozen_uninterrupted"
python - "$OUT/bert_unfrozen_cls.json" "$DIR/unfrozen_uninterrupted/bert_unfrozen_cls.json" <<'PY'
import json, sys
resumed, straight = (json.load(open(path)) for path in sys.argv[1:])
for a, b in zip(straight["runs"], resumed["runs"]):
    print(f"seed {a['seed']}: uninterrupted accuracy {a['accuracy']:.4f} F1 {a['f1']:.4f} losses "
          f"{[e['loss'] for e in a['epochs']]}; killed+resumed accuracy {b['accuracy']:.4f} F1 {b['f1']:.4f} losses "
          f"{[e['loss'] for e in b['epochs']]}; resumed after epoch "
          f"{[r['after_epoch'] for r in b.get('resumes', [])]}")
PY
