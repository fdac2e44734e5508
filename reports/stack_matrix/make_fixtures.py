"""Small input files in the three formats `python -m tf_transfer.stack` reads, for the strategy x head check.

    python reports/stack_matrix/make_fixtures.py --out=/tmp/stack_matrix

Writes `conll.txt` (CoNLL-2003 columns: word, POS, chunk, IOB tag; `-DOCSTART-` lines, blank lines between
sentences; made-up sentences from templates, since CoNLL-2003 is not in this repository), `classification.csv`
(Kaggle's `id,keyword,location,text,target` layout with quoted commas and line breaks, from SST-2) and `quora.csv`
(the first 300 rows of the CS224N Quora sample, unchanged).
"""

import argparse
import csv
import os
import random

PEOPLE = [["John", "Smith"], ["Maria", "Garcia"], ["Wei", "Chen"], ["Anna"], ["Peter", "Jones"]]
PLACES = [["Paris"], ["New", "York"], ["Berlin"], ["Tokyo"], ["South", "Africa"]]
ORGS = [["Reuters"], ["Bank", "of", "England"], ["Siemens"], ["the", "United", "Nations"]]
TEMPLATES = [
    [("PER",), "visited", ("LOC",), "on", "Monday", "."],
    [("ORG",), "said", ("PER",), "will", "lead", "talks", "in", ("LOC",), "."],
    ["Shares", "in", ("ORG",), "rose", "3", "percent", "."],
    [("PER",), "won", "the", "German", "Open", "."],
]


def _sentence(rng):
    rows = []
    for part in rng.choice(TEMPLATES):
        if isinstance(part, tuple):
            kind = part[0]
            words = rng.choice({"PER": PEOPLE, "LOC": PLACES, "ORG": ORGS}[kind])
            rows += [(w, "NNP", "I-NP", ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]
        elif part == "German":
            rows.append((part, "JJ", "I-NP", "B-MISC"))
        else:
            rows.append((part, "NN", "I-NP", "O"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--glue_dir", default="../shared/data/glue")
    parser.add_argument("--quora", default="../shared/data/cs224n_minbert/quora-dev.csv")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(0)

    with open(os.path.join(args.out, "conll.txt"), "w") as f:
        for doc in range(4):
            f.write("-DOCSTART- -X- -X- O\n\n")
            for _ in range(25):
                f.write("".join(" ".join(row) + "\n" for row in _sentence(rng)) + "\n")

    with open(os.path.join(args.glue_dir, "SST-2", "train.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    rows = [r for r in rows if len(r[0].split()) >= 6][:200]
    with open(os.path.join(args.out, "classification.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "keyword", "location", "text", "target"])
        for i, (text, label) in enumerate(rows):
            text = text.replace(" , ", ", ", 1) if i % 3 else text.replace(" ", "\n", 1)
            writer.writerow([i, "" if i % 2 else "storm", "Birmingham, UK" if i % 5 == 0 else "", text, label])

    with open(args.quora) as f, open(os.path.join(args.out, "quora.csv"), "w") as out:
        for _, line in zip(range(301), f):
            out.write(line)


if __name__ == "__main__":
    main()
