"""Writes GLUE's SST-2 as a user would have it: CSV files with their own column names and string labels.

    python reports/freezing_sst2/make_csv.py --glue_dir=../shared/data/glue --out=/work/runs/freezing_sst2

`train.tsv` and `dev.tsv` (sentence<TAB>label, quoting off) become `reviews_train.csv` and `reviews_dev.csv` with the
header `review,sentiment` and the labels `negative` (0) and `positive` (1), in standard CSV quoting, row for row: so
the freezing grid reads SST-2 through `--train_file` exactly as a user's file, and the same rows sorted into the same
classes as `--task=sst2` (the labels sort as negative, positive: GLUE's 0, 1).
"""

import argparse
import csv
import os

LABELS = {"0": "negative", "1": "positive"}


def convert(source: str, target: str) -> int:
    with open(source, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    with open(target, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "sentiment"])
        writer.writerows([sentence, LABELS[label]] for sentence, label in rows[1:])
    return len(rows) - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue_dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for split in ("train", "dev"):
        count = convert(os.path.join(args.glue_dir, "SST-2", f"{split}.tsv"),
                        os.path.join(args.out, f"reviews_{split}.csv"))
        print(f"{split}: {count} rows")


if __name__ == "__main__":
    main()
