# Ours and the Hugging Face peer, alternating, each command alone on the 2-core machine.
cd /work/wt_bench
. /work/venv/bin/activate
D=/work/runs/bench_methods
G=/work/shared/data/glue
OURS="python -m tf_transfer.bench --task=mrpc --preset=all_minilm_l6_v2_en --data_dir=$G --max_train_examples=512 --batch_size=32 --steps=16 --repeats=3"
HF="python benchmarks/hf_baseline.py --data_dir=$G --max_train_examples=512 --batch_size=32"
export PYTHONPATH=.
python ../shared/tools/machine_speed.py > $D/speed_before.json 2>/dev/null
for row in \
  "full|$OURS --trainable_layers=all|$HF --trainable_layers=all" \
  "last2_cached|$OURS --trainable_layers=2 --cache_frozen|$HF --trainable_layers=2" \
  "lora8_all|$OURS --method=lora --lora_rank=8|$HF --method=lora --lora_rank=8" \
  "lora8_last2_cached|$OURS --method=lora --lora_rank=8 --trainable_layers=2 --cache_frozen|" \
  "bitfit|$OURS --method=bitfit|$HF --method=bitfit" ; do
  name=${row%%|*}; rest=${row#*|}; ours=${rest%%|*}; hf=${rest#*|}
  echo "{\"row\": \"$name\", \"system\": \"ours\", \"result\": $($ours 2>/dev/null | tail -1)}" >> $D/results.jsonl
  if [ -n "$hf" ]; then echo "{\"row\": \"$name\", \"system\": \"hf\", \"result\": $($hf 2>/dev/null | tail -1)}" >> $D/results.jsonl; fi
done
python ../shared/tools/machine_speed.py > $D/speed_after.json 2>/dev/null
echo done >> $D/results.jsonl
