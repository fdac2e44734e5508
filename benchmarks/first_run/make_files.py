"""The first-run benchmark's four user-like files, written from `../shared/data` as a user's CSVs with their own
held-out test file (each a file this project never trains on as a GLUE task here):

| file | from | train | test | label |
|---|---|---|---|---|
| `sst2` | GLUE SST-2 train (a seeded sample) / dev | 6,000 | 872 | `negative`/`positive` |
| `sst5` | CS224N `ids-sst-train` (a seeded sample) / `ids-sst-dev` | 6,000 | 1,101 | 0-4 |
| `quora` | CS224N `quora-dev` (a seeded shuffle: the first 6,000 / the next 2,000) | 6,000 | 2,000 | 0/1 |
| `stsb` | GLUE STS-B train / dev, as a regression CSV | 5,749 | 1,500 | 0-5 |

    python benchmarks/first_run/make_files.py --shared_data=../shared/data --out=/work/first_run/data

The same rows every time (seed 0), so each file's SHA-256 (printed, and recorded in every run's `summary.json`)
names it. The files hold the data sets' sentences: keep them out of the repository.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import random

TRAIN_ROWS = 6000


def _tsv(path: str, header: bool = True) -> list:
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [dict(zip(rows[0], r)) for r in rows[1:] if r] if header else rows


def _write(path: str, header: list, rows: list) -> str:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _sample(rows: list, n: int) -> list:
    rows = list(rows)
    random.Random(0).shuffle(rows)
    return rows[:n]


def sst2(shared: str) -> tuple:
    names = {"0": "negative", "1": "positive"}
    row = lambda r: [r["sentence"].strip(), names[r["label"]]]
    train = _sample(_tsv(os.path.join(shared, "glue/SST-2/train.tsv")), TRAIN_ROWS)
    test = _tsv(os.path.join(shared, "glue/SST-2/dev.tsv"))
    return ["sentence", "sentiment"], [row(r) for r in train], [row(r) for r in test]


def sst5(shared: str) -> tuple:
    row = lambda r: [r["id"], r["sentence"].strip(), r["sentiment"]]
    train = _sample(_tsv(os.path.join(shared, "cs224n_minbert/ids-sst-train.csv")), TRAIN_ROWS)
    test = _tsv(os.path.join(shared, "cs224n_minbert/ids-sst-dev.csv"))
    return ["id", "sentence", "sentiment"], [row(r) for r in train], [row(r) for r in test]


def quora(shared: str) -> tuple:
    rows = [r for r in _tsv(os.path.join(shared, "cs224n_minbert/quora-dev.csv")) if r["is_duplicate"].strip()]
    rows = _sample(rows, TRAIN_ROWS + 2000)
    row = lambda r: [r["id"], r["sentence1"], r["sentence2"], str(int(float(r["is_duplicate"])))]
    return (["id", "question1", "question2", "is_duplicate"], [row(r) for r in rows[:TRAIN_ROWS]],
            [row(r) for r in rows[TRAIN_ROWS:]])


def stsb(shared: str) -> tuple:
    row = lambda r: [r["sentence1"], r["sentence2"], r["score"]]
    train = _tsv(os.path.join(shared, "glue/STS-B/train.tsv"))
    test = _tsv(os.path.join(shared, "glue/STS-B/dev.tsv"))
    return ["sentence1", "sentence2", "score"], [row(r) for r in train], [row(r) for r in test]


FILES = {"sst2": sst2, "sst5": sst5, "quora": quora, "stsb": stsb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared_data", default="../shared/data")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, make in FILES.items():
        header, train, test = make(args.shared_data)
        for split, rows in (("train", train), ("test", test)):
            path = os.path.join(args.out, f"{name}_{split}.csv")
            print(f"{path}: {len(rows)} rows, sha256 {_write(path, header, rows)}")


if __name__ == "__main__":
    main()
