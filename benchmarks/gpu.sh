#!/usr/bin/env bash
# GPU kit: on a machine with an NVIDIA GPU, installs TensorFlow with CUDA as BUILD.md says, checks that TensorFlow
# sees the GPU, and measures every row below with `python -m tf_transfer.bench`, appending one JSON line per row
# (the benchmark's result plus `row` and `kit`) to one file. Run from anywhere, on an otherwise idle machine:
#
#   GLUE_DIR=../shared/data/glue bash benchmarks/gpu.sh                  # install, check, measure every row
#   bash benchmarks/gpu.sh --no_install --rows=bs32_all_fp32,bs32_all_fp32_mirrored --out=/tmp/gpu.jsonl
#   bash benchmarks/gpu.sh --list                                        # the rows and their commands; runs nothing
#   bash benchmarks/gpu.sh --cpu_smoke --rows=bs32_all_fp32              # no GPU: checks the kit, measures nothing
#
# Rows: batch 32 and batch 1; all layers trained, or the last 2 blocks on the frozen-prefix cache (`k2cache`);
# float32 and mixed_float16; XLA off and on (`_xla`); at batch 1 also --steps_per_execution=32 (`_spe32`); and
# batch 32 float32 all layers under --distribution=mirrored (every GPU of the machine; CUDA_VISIBLE_DEVICES picks).
#
# Options (each also as --name value):
#   --out=FILE            JSON lines go here (default benchmarks/results/gpu-<date>.jsonl; appended to)
#   --rows=a,b            only these rows (names from --list)
#   --data_dir=DIR        GLUE folder in the original TSV layout (default $GLUE_DIR)
#   --preset=NAME         preset (default all_minilm_l6_v2_en, offline through the `offline` extra)
#   --max_train_examples=N  training examples the steps come from (default 512)
#   --no_install          skip the pip install (TensorFlow with CUDA already there)
#   --cpu_smoke           no GPU needed: skip the install and the GPU check, run the rows on the CPU with 2 timed
#                         steps each, and mark the lines `"kit": "cpu_smoke"` (they are not measurements)
#   --list                print `name<TAB>flags` for every row and stop
# Exit status: 0 done; 2 bad arguments or a failed row (the file keeps the rows before it); 3 no GPU (nothing run).
# Environment: NVIDIA_SMI (default nvidia-smi) is the command that lists the GPUs; PYTHON (default python).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"

die() { echo "gpu.sh: $1" >&2; exit "${2:-2}"; }

out="" rows="" data_dir="${GLUE_DIR:-}" preset="all_minilm_l6_v2_en" max_train_examples=512
install=1 smoke=0 list=0
while [ $# -gt 0 ]; do
  arg="$1"; shift
  case "$arg" in
    --no_install) install=0 ;;
    --cpu_smoke) smoke=1 ;;
    --list) list=1 ;;
    --out=*|--rows=*|--data_dir=*|--preset=*|--max_train_examples=*) name="${arg%%=*}"; value="${arg#*=}" ;;
    --out|--rows|--data_dir|--preset|--max_train_examples)
      [ $# -gt 0 ] || die "$arg needs a value"
      name="$arg"; value="$1"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $arg (see --help)" ;;
  esac
  case "$arg" in
    --out*) out="$value" ;;
    --rows*) rows="$value" ;;
    --data_dir*) data_dir="$value" ;;
    --preset*) preset="$value" ;;
    --max_train_examples*)
      [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "--max_train_examples must be a positive integer, got '$value'"
      max_train_examples="$value" ;;
  esac
done

# The rows: name -> the benchmark's own flags.
declare -A ROWS=()
names=()
add() { ROWS[$1]="$2"; names+=("$1"); }
for batch in 32 1; do
  if [ "$batch" = 32 ]; then timing="--steps=16 --warmup_steps=2"; else timing="--steps=192 --warmup_steps=32"; fi
  for part in all k2cache; do
    if [ "$part" = all ]; then layers="--trainable_layers=all"; else layers="--trainable_layers=2 --cache_frozen"; fi
    for precision in fp32 fp16; do
      if [ "$precision" = fp32 ]; then prec="--precision=float32"; else prec="--precision=mixed_float16"; fi
      for xla in off on; do
        name="bs${batch}_${part}_${precision}"; jit="--jit_compile=false"
        if [ "$xla" = on ]; then name="${name}_xla"; jit="--jit_compile=true"; fi
        # Padded batches in every row (the benchmark packs by default, but not under XLA): XLA on and off compare.
        jit="$jit --padding=bucket"
        add "$name" "--task=mrpc --batch_size=$batch $layers $prec $jit $timing --steps_per_execution=1"
        if [ "$batch" = 1 ]; then
          add "${name}_spe32" "--task=mrpc --batch_size=1 $layers $prec $jit $timing --steps_per_execution=32"
        fi
      done
    done
  done
done
# Several replicas: one share of each batch of 32 per GPU (docs/distributed.md); XLA off (see there).
add bs32_all_fp32_mirrored "--task=mrpc --batch_size=32 --trainable_layers=all --precision=float32 --jit_compile=false --padding=bucket --steps=16 --warmup_steps=2 --steps_per_execution=1 --distribution=mirrored"

if [ "$list" = 1 ]; then
  for name in "${names[@]}"; do printf '%s\t%s\n' "$name" "${ROWS[$name]}"; done
  exit 0
fi

chosen=()
if [ -n "$rows" ]; then
  IFS=, read -r -a chosen <<< "$rows"
  for name in "${chosen[@]}"; do [ -n "${ROWS[$name]+x}" ] || die "unknown row '$name' (see --list)"; done
else
  chosen=("${names[@]}")
fi
[ -n "$data_dir" ] || die "set GLUE_DIR or pass --data_dir: a GLUE folder in the original TSV layout"
[ -d "$data_dir" ] || die "--data_dir $data_dir does not exist"
data_dir="$(cd "$data_dir" && pwd)"
[ ! -d "$preset" ] || preset="$(cd "$preset" && pwd)"  # a local preset folder, not a name
[ -n "$out" ] || out="$root/benchmarks/results/gpu-$(date +%Y%m%d-%H%M%S).jsonl"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$(dirname "$out")"

cd "$root"
kit=gpu
device="cpu"
if [ "$smoke" = 1 ]; then
  kit=cpu_smoke
  echo "gpu.sh: --cpu_smoke: the rows run briefly on the CPU to check the kit; nothing here is a GPU measurement" >&2
else
  if ! gpus="$("$NVIDIA_SMI" -L 2>/dev/null)" || ! grep -q "^GPU" <<< "$gpus"; then
    die "no NVIDIA GPU found ('$NVIDIA_SMI -L' lists none): nothing installed or measured. This kit measures GPUs; --cpu_smoke checks it on the CPU." 3
  fi
  echo "$gpus" >&2
  if [ "$install" = 1 ]; then
    # BUILD.md, "Install on an NVIDIA GPU machine".
    "$PYTHON" -m pip install -c constraints.txt -e ".[offline,test]" "tensorflow[and-cuda]==2.21.*"
  fi
  seen="$("$PYTHON" -c 'import tensorflow as tf; print(len(tf.config.list_physical_devices("GPU")))' 2>/dev/null | tail -n 1)" || seen=0
  [ "${seen:-0}" -gt 0 ] 2>/dev/null || die "nvidia-smi lists a GPU but TensorFlow sees none (driver too old for TensorFlow 2.21's CUDA? see BUILD.md): nothing measured" 3
  device="$(head -n 1 <<< "$gpus")"
  echo "gpu.sh: TensorFlow sees $seen GPU(s)" >&2
fi

base="-m tf_transfer.bench --preset=$preset --data_dir=$data_dir --max_train_examples=$max_train_examples"
for name in "${chosen[@]}"; do
  flags="${ROWS[$name]}"
  if [ "$smoke" = 1 ]; then
    # Two timed steps after one (at 32 steps per execution: one call of each), once.
    flags="$(sed -E 's/--steps=[0-9]+/--steps=2/; s/--warmup_steps=[0-9]+/--warmup_steps=1/' <<< "$flags") --repeats=1"
  fi
  echo "== $name: python $base $flags" >&2
  log="$(mktemp)"
  # shellcheck disable=SC2086  # the flags are words
  if ! "$PYTHON" $base $flags > "$log.out" 2> "$log"; then
    tail -n 20 "$log" >&2
    rm -f "$log" "$log.out"
    die "row $name failed (its stderr above); $out keeps the rows before it"
  fi
  # The benchmark's last line is its result; the line written adds which row and kit made it.
  if ! tail -n 1 "$log.out" | "$PYTHON" -c '
import json, sys
result = json.loads(sys.stdin.read())
assert isinstance(result, dict) and "train_examples_per_s" in result
result.update(row=sys.argv[1], kit=sys.argv[2], device=sys.argv[3])
print(json.dumps(result, sort_keys=True))' "$name" "$kit" "$device" >> "$out"; then
    rm -f "$log" "$log.out"
    die "row $name did not end with the benchmark's JSON line"
  fi
  rm -f "$log" "$log.out"
  "$PYTHON" -c 'import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(sys.argv[2], round(d["train_examples_per_s"], 1), "examples/s")' "$out" "$name" >&2
done
echo "gpu.sh: ${#chosen[@]} row(s) in $out" >&2
