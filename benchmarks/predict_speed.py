"""Rows per second of `predict` (the preset folder, bucketed or packed; the SavedModel's signature) against the GLUE
trainer's scoring step on the same rows, batch size and model, start-up apart.

The model is all-MiniLM-L6-v2 (the installed offline package) with a fresh two-class head: speed does not depend on
the head's weights. Each way scores every tenth row first (tracing: start-up, printed apart), then all the rows,
timed in wall and CPU seconds. The trainer tokenizes every split once, before training: its scoring pass is
`inputs.encode` then the scoring step, and the JSON line splits the two (`tokenize_cpu_s`, `step_cpu_s`); `predict`
tokenizes as it scores.

    python -c "import csv; rows = [r for r in csv.reader(open('../shared/data/glue/SST-2/dev.tsv'), delimiter='\t',
        quoting=csv.QUOTE_NONE)][1:]; w = csv.writer(open('/tmp/sst2_2000.csv', 'w')); w.writerow(['sentence']);
        w.writerows([rows[i % len(rows)][:1] for i in range(2000)])"
    taskset -c 1 python benchmarks/predict_speed.py --input=/tmp/sst2_2000.csv   # from the repository root

Prints one JSON line per way and a Markdown table; benchmarks/README.md has the measured numbers.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
import time


def _texts(path: str, column: str, rows: int) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t" if path.endswith(".tsv") else ",",
                                quoting=csv.QUOTE_NONE if path.endswith(".tsv") else csv.QUOTE_MINIMAL)
        return [row[column] for row in reader][:rows]


def _timed(score, texts: list) -> dict:
    """`score(rows)` on every tenth row first (tracing: start-up, apart), then timed on all of them: wall and CPU
    seconds (the machine is shared: CPU seconds are the steadier figure)."""
    start = time.perf_counter()
    score(texts[::10])
    warmup = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    score(texts)
    return {"warmup_s": warmup, "s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}


def _scoring_step(classifier, max_seq_length: int, batch_size: int):
    """The trainer's scoring (`feeds.Feed.predict`) of rows it tokenized before (`inputs.encode`, timed apart):
    sorted by length, bucketed, Keras' predict."""
    import keras
    import numpy as np

    from tf_transfer.data import examples, inputs

    # The trainer's model: the same backbone and head on the same features, without keras-hub's preprocessing.
    model = keras.Model(classifier.inputs, classifier.outputs)
    tokenizing = {}

    def score(texts):
        start = time.process_time()
        split = examples.Examples(texts, None, np.zeros(len(texts), np.int64), "rows")
        encoded = inputs.encode(split, classifier.preprocessor.tokenizer, max_seq_length)
        tokenizing["tokenize_cpu_s"] = time.process_time() - start
        plan = inputs.plan_eval_batches(encoded.lengths, batch_size, "bucket")
        start = time.process_time()
        inputs.predict(model, inputs.to_dataset(encoded, plan, "bucket", 16, with_labels=False))
        tokenizing["step_cpu_s"] = time.process_time() - start

    return score, tokenizing


def _saved_model(classifier, batch_size: int, folder: str):
    """The SavedModel's `serving_default`, loaded as a server would, called on batches of rows sorted by length."""
    from tf_transfer.models import export, serving

    serving.export_saved_model(classifier, folder, labels=["0", "1"], text_columns=["sentence"])
    score, meta = export.load_scorer(folder)
    return lambda texts: score(texts, None, batch_size, None, "bucket")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="CSV (or TSV) with a header row.")
    parser.add_argument("--column", default="sentence", help="The text column.")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--ways", default="scoring,predict_bucket,predict_pack,saved_model")
    args = parser.parse_args()

    import tf_transfer  # noqa: F401  (TensorFlow's settings and quiet start-up, as every command)
    import keras_hub

    from tf_transfer.models import backbones, export

    texts = _texts(args.input, args.column, args.rows)
    loaded = backbones.load_preset("all_minilm_l6_v2_en")
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        loaded.tokenizer, sequence_length=args.max_seq_length, truncate="round_robin")
    classifier = keras_hub.models.BertTextClassifier(backbone=loaded.backbone, num_classes=2, activation=None,
                                                     preprocessor=preprocessor)
    meta = {"labels": ["0", "1"], "regression": False}
    scoring, parts = _scoring_step(classifier, args.max_seq_length, args.batch_size)
    ways = {
        "scoring": lambda: scoring,
        "predict_bucket": lambda: lambda rows: export.predict(classifier, meta, rows, batch_size=args.batch_size),
        "predict_pack": lambda: lambda rows: export.predict(classifier, meta, rows, batch_size=args.batch_size,
                                                            padding="pack"),
        "saved_model": lambda: _saved_model(classifier, args.batch_size, os.path.join(tempfile.mkdtemp(), "served")),
    }
    results = []
    for name in args.ways.split(","):
        result = {"way": name, "rows": len(texts), "batch_size": args.batch_size, **_timed(ways[name](), texts)}
        if name == "scoring":
            result.update(parts)  # the last (timed) pass's split
        result["rows_per_s"], result["rows_per_cpu_s"] = len(texts) / result["s"], len(texts) / result["cpu_s"]
        print(json.dumps(result), flush=True)
        results.append(result)
    print("\n| way | rows/s | rows per CPU s | warm-up on a tenth of the rows, s |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['way']} | {r['rows_per_s']:.1f} | {r['rows_per_cpu_s']:.1f} | {r['warmup_s']:.1f} |")


if __name__ == "__main__":
    main()
