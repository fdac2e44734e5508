"""Shared fixtures: a tiny random BERT saved as a Keras preset folder, and small GLUE files in the real layouts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = (
    "the a an is was are of to and in on at for with by from this that it he she they we you i not no yes "
    "cat dog man woman car house tree plane sky sea red blue green big small good bad happy sad run runs "
    "ran walk eat eats play plays what who where when why how did does do can will would should could "
    "friends buy analysis next one more question answer sentence pair true false quote said \" ' , . ? !"
).split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(WORDS))
NUM_LAYERS = 3


def make_tiny_backbone(num_layers: int = NUM_LAYERS, seed: int = 1):
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    return keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=num_layers, num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_sequence_length=64, num_segments=2, dropout=0.1,
    )


def make_tiny_tokenizer():
    import keras_hub

    return keras_hub.models.BertTokenizer(vocabulary=list(VOCAB), lowercase=True)


@pytest.fixture(scope="session")
def tiny_preset(tmp_path_factory):
    """A local Keras-format preset folder (config, weights, tokenizer) of a 3-block, 16-wide random BERT."""
    folder = str(tmp_path_factory.mktemp("tiny_preset"))
    make_tiny_backbone().save_to_preset(folder)
    make_tiny_tokenizer().save_to_preset(folder)
    return folder


SENTENCES = [
    "the cat is happy", "a dog runs in the house", "he said \" yes", "she eats a big red tree",
    "what did the man buy ?", "they play with the small blue car", "we walk to the sea", "the plane is in the sky",
    "i will not run", "who ran from the green house ?", "this is a good question", "that answer was bad",
]


def _pairs(n, offset=0):
    return [(SENTENCES[(i + offset) % len(SENTENCES)], SENTENCES[(i * 5 + 3 + offset) % len(SENTENCES)])
            for i in range(n)]


def _write(path, lines, header=None, bom=False, final_newline=True):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "\n".join(([header] if header else []) + lines) + ("\n" if final_newline else "")
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as f:
        f.write(text)


def write_glue(root: str, n_train: int = 40, n_dev: int = 12) -> str:
    """Writes every GLUE task's train and dev files in the original TSV layouts under `root`."""
    for split, n in (("train", n_train), ("dev", n_dev)):
        offset = 0 if split == "train" else 1
        pairs = _pairs(n, offset)
        # CoLA: no header, 4 columns; dev has no final newline (as the real file).
        _write(f"{root}/CoLA/{split}.tsv", [f"gj04\t{i % 2}\t{'' if i % 2 else '*'}\t{a}" for i, (a, _) in
                                           enumerate(pairs)], final_newline=split == "train")
        _write(f"{root}/SST-2/{split}.tsv", [f"{a} \t{i % 2}" for i, (a, _) in enumerate(pairs)], "sentence\tlabel")
        # MRPC: header starts with a UTF-8 byte-order mark.
        _write(f"{root}/MRPC/{split}.tsv", [f"{i % 2}\t{1000 + i}\t{2000 + i}\t{a}\t{b}" for i, (a, b) in
                                           enumerate(pairs)], "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", bom=True)
        _write(f"{root}/STS-B/{split}.tsv",
               [f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{a}\t{b}\t{(i * 0.37) % 5:.3f}"
                for i, (a, b) in enumerate(pairs)],
               "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore")
        # QQP: a question with an unbalanced quote character (quoting must be disabled).
        _write(f"{root}/QQP/{split}.tsv", [f"{i}\t{10 + i}\t{20 + i}\t{a}\t{b}\t{i % 2}" for i, (a, b) in
                                          enumerate(pairs)], "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate")
        nli = ("entailment", "neutral", "contradiction")
        mnli_header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                       "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
        mnli_rows = [f"{i}\t{i}\t{i}e\tfiction\t( {a} )\t( {b} )\t(ROOT {a})\t(ROOT {b})\t{a}\t{b}\t{nli[i % 3]}\t"
                     f"{nli[i % 3]}" for i, (a, b) in enumerate(pairs)]
        if split == "train":
            _write(f"{root}/MNLI/train.tsv", mnli_rows, mnli_header)
        else:
            _write(f"{root}/MNLI/dev_matched.tsv", mnli_rows, mnli_header)
            _write(f"{root}/MNLI/dev_mismatched.tsv", mnli_rows[: n // 2], mnli_header)
        two = ("entailment", "not_entailment")
        _write(f"{root}/QNLI/{split}.tsv", [f"{i}\t{a}\t{b}\t{two[i % 2]}" for i, (a, b) in enumerate(pairs)],
               "index\tquestion\tsentence\tlabel")
        _write(f"{root}/RTE/{split}.tsv", [f"{i}\t{a}\t{b}\t{two[i % 2]}" for i, (a, b) in enumerate(pairs)],
               "index\tsentence1\tsentence2\tlabel")
        _write(f"{root}/WNLI/{split}.tsv", [f"{i}\t{a}\t{b}\t{i % 2}" for i, (a, b) in enumerate(pairs)],
               "index\tsentence1\tsentence2\tlabel")
    return root


@pytest.fixture(scope="session")
def glue_dir(tmp_path_factory):
    return write_glue(str(tmp_path_factory.mktemp("glue")))


def run_module(module: str, *args, env=None, timeout=600):
    """Runs `python -m module args...` from the repository root; returns the CompletedProcess."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    full_env.pop("GLUE_DIR", None) if env is None or "GLUE_DIR" not in env else None
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
