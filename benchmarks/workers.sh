#!/usr/bin/env bash
# Threads or processes: one `tf_transfer.bench` process on every core against one pinned process per core side by
# side (their rates summed), all layers and the last 2 over the cache, 512 examples of a user's file. Run from the
# repository root on an otherwise idle machine:
#
#   bash benchmarks/workers.sh data.csv text target     # the file, its text column, its label column
#
# benchmarks/README.md ("One core or two") used the first 6,090 rows of the CS224N SST training file as
# `id,text,target`. Prints one line per process: examples per second, CPU cores used, padding efficiency.
set -euo pipefail
file=${1:?give the training file}; text=${2:-text}; label=${3:-target}
cores=$(python -c "import os; print(' '.join(map(str, sorted(os.sched_getaffinity(0)))))")
common="--train_file=$file --text_columns=$text --label_column=$label --preset=all_minilm_l6_v2_en
  --max_train_examples=512 --batch_size=32 --steps=16 --warmup_steps=3 --repeats=3"
rate() {
  python -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(f\"{d['train_examples_per_s']:.1f} examples/s, CPU {d['cpu_utilization']:.2f} cores, padding {d['padding_efficiency']:.2f}, commit {d['code']['commit'][:7]}\")" "$1"
}
out=$(mktemp -d)
for round in 1 2; do
  for setting in "--trainable_layers=all --nocache_frozen" "--trainable_layers=2 --cache_frozen"; do
    echo "== round $round, $setting: one process, every core"
    python -m tf_transfer.bench $common $setting 2>/dev/null > "$out/all.json"; rate "$out/all.json"
    echo "== round $round, $setting: one process per core, side by side"
    for core in $cores; do
      taskset -c "$core" python -m tf_transfer.bench $common $setting 2>/dev/null > "$out/core$core.json" &
    done
    wait
    for core in $cores; do rate "$out/core$core.json"; done
  done
done
