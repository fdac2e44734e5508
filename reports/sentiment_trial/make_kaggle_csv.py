"""Writes a Kaggle "NLP with Disaster Tweets"-format train.csv from GLUE's SST-2 train.tsv, for a smoke-sized trial.

The real Kaggle file is not in the repository. This keeps its layout and its awkward parts: the header
`id,keyword,location,text,target`, empty `keyword`/`location` fields, locations with a comma inside quotes, and texts
with a quoted line break. The texts and labels are SST-2 movie-review sentences (1 = positive), not tweets: the
numbers it gives say nothing about Hart's study.

    python reports/sentiment_trial/make_kaggle_csv.py --sst2=../shared/data/glue/SST-2/train.tsv \\
        --rows_per_class=200 --output=/tmp/sentiment_trial/train.csv
"""

import argparse
import csv
import random


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sst2", required=True, help="GLUE SST-2 train.tsv (sentence<TAB>label, with a header)")
    parser.add_argument("--rows_per_class", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    by_label = {"0": [], "1": []}
    with open(args.sst2, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)
        for sentence, label in rows:
            words = sentence.split()
            if len(words) >= 6:  # whole sentences rather than SST-2's short phrases
                by_label[label].append(" ".join(words))
    rng = random.Random(args.seed)
    chosen = [(text, label) for label in ("0", "1") for text in rng.sample(by_label[label], args.rows_per_class)]
    rng.shuffle(chosen)
    keywords = ["", "", "", "film", "story", "acting"]
    locations = ["", "", "London", "Birmingham, UK", "La Ronge, Sask."]
    with open(args.output, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)  # standard quoting, as Kaggle's file: quoted commas and line breaks
        writer.writerow(["id", "keyword", "location", "text", "target"])
        for i, (text, label) in enumerate(chosen):
            if i % 10 == 0:
                words = text.split(" ")
                text = " ".join(words[:3]) + "\n" + " ".join(words[3:])
            writer.writerow([i + 1, keywords[i % len(keywords)], locations[i % len(locations)], text, label])


if __name__ == "__main__":
    main()
