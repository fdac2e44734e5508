"""Data for the stack-and-finetune study: CoNLL-2003 NER, labelled texts, and Quora question pairs.

Readers return plain Python/NumPy examples or raise `TransferError` naming the file and line; encoders turn them
into token ids with the preset's tokenizer (TensorFlow is imported only there).

  * `read_conll`: CoNLL-2003 column format. `-DOCSTART-` lines are skipped, a blank line ends a sentence, the token
    is the first column and the IOB NER tag the last one.
  * `read_texts`: text classification from a CSV or TSV file with a header row (a text and a label column).
  * `read_pairs`: question pairs in the GLUE QQP layout (`id qid1 qid2 question1 question2 is_duplicate`) or the
    CS224N Quora layout (`<index> id sentence1 sentence2 is_duplicate`, labels 0.0/1.0, tab-separated although
    named .csv).

Rows with an empty label are skipped and counted (the CS224N Quora file has two); any other malformed row is an
error. Texts and pairs are read by `table_reader` with the dialect of the header line: a tab makes it a TSV with quoting
off (lone quote characters in GLUE and Quora texts would otherwise swallow the tabs and lines after them), else a
comma-separated CSV with standard quoting.

Example:

>>> from tf_transfer.data import stack_data
>>> pairs = stack_data.read_pairs("../shared/data/cs224n_minbert/quora-dev.csv")  # doctest: +SKIP
>>> len(pairs), pairs.skipped_rows, pairs.label_names  # doctest: +SKIP
(20212, 2, ('0', '1'))
>>> encoded = stack_data.encode_pairs_separately(pairs, tokenizer, max_seq_length=128)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional, Sequence

import numpy as np

from tf_transfer.core.errors import TransferError
from tf_transfer.data import table_reader
# stack_inputs splits texts, pairs and CoNLL sentences alike as stack_data.split.
from tf_transfer.data.examples import Examples

DOCSTART = "-DOCSTART-"
IGNORED_LABEL = -1  # word pieces after a word's first one, [CLS], [SEP] and padding carry no tag
TAG_PREFIXES = ("B", "I")
TEXT_COLUMNS = ("text", "sentence", "review", "content")
LABEL_COLUMNS = ("label", "sentiment", "target", "class")
PAIR_LAYOUTS = {
    "glue_qqp": ("question1", "question2", "is_duplicate"),
    "cs224n_quora": ("sentence1", "sentence2", "is_duplicate"),
}


@dataclasses.dataclass
class Sentences:
    """Tagged sentences: `words[i]` and `tags[i]` are lists of equal length."""

    words: list
    tags: list
    source: str = ""

    def __len__(self) -> int:
        return len(self.words)

    def take(self, indices: Sequence[int]) -> "Sentences":
        indices = list(indices)
        return Sentences([self.words[i] for i in indices], [self.tags[i] for i in indices], self.source)

    def tag_names(self) -> set:
        return {tag for sentence in self.tags for tag in sentence}


def _check_file(path: str) -> None:
    if not os.path.isfile(path):
        raise TransferError(f"data file {path} does not exist")


def _check_tag(tag: str, path: str, line_no: int) -> None:
    if tag == "O":
        return
    prefix, sep, kind = tag.partition("-")
    if not sep or prefix not in TAG_PREFIXES or not kind:
        raise TransferError(f"{path}:{line_no}: NER tag {tag!r} is not O, B-<type> or I-<type> (IOB format, the "
                            "last column of a CoNLL-2003 line)")


def read_conll(path: str) -> Sentences:
    """Reads a CoNLL-2003 file (`eng.train`, `train.txt`, ...): one `token ... tag` line per word."""
    _check_file(path)
    words, tags, sentence_words, sentence_tags = [], [], [], []

    def end_sentence():
        if sentence_words:
            words.append(list(sentence_words))
            tags.append(list(sentence_tags))
            sentence_words.clear()
            sentence_tags.clear()

    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                columns = line.split()
                if not columns:
                    end_sentence()
                    continue
                if columns[0] == DOCSTART:
                    end_sentence()
                    continue
                if len(columns) < 2:
                    raise TransferError(f"{path}:{line_no}: expected a token and an NER tag separated by whitespace, "
                                        f"found {line.strip()!r}")
                _check_tag(columns[-1], path, line_no)
                sentence_words.append(columns[0])
                sentence_tags.append(columns[-1])
    except UnicodeDecodeError as e:
        raise TransferError(f"{path}: not valid UTF-8 text ({e.reason} at byte {e.start})") from None
    end_sentence()
    if not words:
        raise TransferError(f"{path}: no sentences (expected CoNLL-2003 lines `token ... tag`)")
    return Sentences(words, tags, path)


def _column(header: list, wanted: Optional[str], candidates: tuple, path: str, what: str, flag: str) -> int:
    if wanted is not None:
        if wanted not in header:
            raise TransferError(f"{path}:1: no {what} column {wanted!r} (header: {', '.join(header)}); set {flag}")
        return header.index(wanted)
    for name in candidates:
        if name in header:
            return header.index(name)
    raise TransferError(f"{path}:1: no {what} column among {', '.join(candidates)} (header: {', '.join(header)}); "
                        f"name it with {flag}")


def _label_key(value: str) -> str:
    """`"1.0"` and `"1"` are the same class (the CS224N files write labels as floats)."""
    try:
        number = float(value)
    except ValueError:
        return value
    return str(int(number)) if number.is_integer() else value


def _sorted_labels(values) -> tuple:
    def order(value):
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        # "nan" sorts with the words: a NaN key has no order and would make the classes depend on set order.
        return (0, number, value) if number == number else (1, 0.0, value)

    return tuple(sorted(set(values), key=order))


def _read_labelled(path: str, choose: Callable[[list], tuple], label_names: Optional[Sequence[str]]) -> Examples:
    """Reads the texts and label at the positions `choose(header)` gives; classes are `label_names` or the file's."""
    _check_file(path)

    def columns(header):
        text_positions, label_position = choose(header)
        needed = max([*text_positions, label_position]) + 1

        def convert(row):
            if len(row.fields) < needed:
                raise table_reader.BadRow(f"expected at least {needed} columns, found {len(row.fields)}")
            label = row.fields[label_position].strip()
            if not label:
                raise table_reader.SkipRow()  # the CS224N Quora file has two such rows
            texts = tuple(row.fields[p] for p in text_positions)
            if any(not text.strip() for text in texts):
                raise table_reader.BadRow("empty text")
            return row.line, texts, _label_key(label)

        return convert

    rows = table_reader.read_rows(path, columns)  # the dialect from the header line: tabs mean a GLUE-style TSV
    names = tuple(label_names) if label_names is not None else _sorted_labels(label for *_, label in rows.records)
    index = {name: i for i, name in enumerate(names)}
    for line, _, label in rows.records:  # after reading, as the file's own classes are only known then
        if label not in index:
            raise TransferError(f"{path}:{line}: label {label!r} is not one of {', '.join(names)}")
    return Examples.from_records([(texts, index[label]) for _, texts, label in rows.records], np.int64, source=path,
                                 skipped_rows=rows.skipped, label_names=names)


def read_texts(path: str, text_column: Optional[str] = None, label_column: Optional[str] = None,
               label_names: Optional[Sequence[str]] = None) -> Examples:
    """Reads labelled texts from a CSV/TSV file with a header row.

    Without `text_column`/`label_column`, the first of `TEXT_COLUMNS`/`LABEL_COLUMNS` in the header is used. The
    classes are the file's distinct labels (numbers in numeric order), unless `label_names` fixes them (for a test
    file, the training file's classes).
    """

    def choose(header):
        text = _column(header, text_column, TEXT_COLUMNS, path, "text", "--text_column")
        return [text], _column(header, label_column, LABEL_COLUMNS, path, "label", "--label_column")

    return _read_labelled(path, choose, label_names)


def pair_layout(header: list) -> Optional[str]:
    """`"glue_qqp"`, `"cs224n_quora"`, or None when the header is neither."""
    for name, columns in PAIR_LAYOUTS.items():
        if all(column in header for column in columns):
            return name
    return None


def read_pairs(path: str) -> Examples:
    """Reads question pairs (GLUE QQP or CS224N Quora layout, told apart by the header); classes are 0 and 1."""

    def choose(header):
        layout = pair_layout(header)
        if layout is None:
            expected = "; ".join(" ".join(columns) for columns in PAIR_LAYOUTS.values())
            raise TransferError(f"{path}:1: not a question-pair file: the header needs the columns of one layout "
                                f"({expected}), found {', '.join(header)}")
        first, second, label = (header.index(column) for column in PAIR_LAYOUTS[layout])
        return [first, second], label

    return _read_labelled(path, choose, ("0", "1"))


def tag_vocabulary(*sentence_sets: Sentences) -> tuple:
    """Every tag seen, `O` first, then sorted by type and prefix, so that class ids do not depend on file order."""
    tags = set().union(*(s.tag_names() for s in sentence_sets)) | {"O"}
    return ("O",) + tuple(sorted(tags - {"O"}, key=lambda t: (t.partition("-")[2], t)))


# --- encoding: the preset's tokenizer, TensorFlow imported here only ---------------------------------------------


@dataclasses.dataclass
class Sequences:
    """One packed model input: int32 `[N, max_seq_length]` ids padded with 0 (keras-hub's pad id), and lengths."""

    token_ids: np.ndarray
    segment_ids: np.ndarray
    lengths: np.ndarray

    def take(self, indices) -> "Sequences":
        return Sequences(self.token_ids[indices], self.segment_ids[indices], self.lengths[indices])


@dataclasses.dataclass
class EncodedSplit:
    """A split ready for the model.

    `inputs` maps an input-name suffix to its `Sequences`: `""` for one packed sequence (`token_ids`, ...), `"_a"`
    and `"_b"` for the two sentences of a pair encoded separately (`token_ids_a`, ..., `token_ids_b`, ...).
    `labels` is `[N]` class ids, or for tagging `[N, max_seq_length]` with `IGNORED_LABEL` off the first pieces.
    For tagging, `word_positions[i]` holds the position of each word's first piece (words cut off by
    `max_seq_length` have none) and `gold_tags[i]` every word's tag.
    """

    inputs: dict
    labels: np.ndarray
    word_positions: Optional[list] = None
    gold_tags: Optional[list] = None
    truncated_words: int = 0

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        """Per example, the longest of its sequences (what a batch must be padded to)."""
        return np.max(np.stack([s.lengths for s in self.inputs.values()]), axis=0)

    @property
    def tagging(self) -> bool:
        return self.labels.ndim == 2

    def take(self, indices) -> "EncodedSplit":
        indices = np.asarray(indices)
        pick = lambda items: None if items is None else [items[i] for i in indices]  # noqa: E731
        return EncodedSplit({k: v.take(indices) for k, v in self.inputs.items()}, self.labels[indices],
                            pick(self.word_positions), pick(self.gold_tags), self.truncated_words)


def _from_core(encoded) -> Sequences:
    return Sequences(encoded.token_ids, encoded.segment_ids, encoded.lengths)


def encode_texts(texts: Examples, tokenizer, max_seq_length: int) -> EncodedSplit:
    """Packs each example as `[CLS] a [SEP]` (or `[CLS] a [SEP] b [SEP]` for pairs), as BERT's classifier does."""
    from tf_transfer.data import inputs

    return EncodedSplit({"": _from_core(inputs.encode(texts, tokenizer, max_seq_length))}, texts.labels)


def encode_pairs_separately(texts: Examples, tokenizer, max_seq_length: int) -> EncodedSplit:
    """Packs each sentence of a pair on its own (`[CLS] a [SEP]`, `[CLS] b [SEP]`) for the matching heads."""
    from tf_transfer.data import inputs

    if texts.text_b is None:
        raise ValueError("encode_pairs_separately needs pairs")
    sequences = {}
    for suffix, side in (("_a", texts.text_a), ("_b", texts.text_b)):
        examples = Examples(side, None, texts.labels, texts.source)
        sequences[suffix] = _from_core(inputs.encode(examples, tokenizer, max_seq_length))
    return EncodedSplit(sequences, texts.labels)


def word_pieces(words: Sequence[str], tokenizer) -> dict:
    """`{word: [piece ids]}` for every distinct word, tokenized one word at a time (as CoNLL gives them)."""
    import tensorflow as tf

    distinct = sorted(set(words))
    unknown = tokenizer.token_to_id("[UNK]")
    pieces = {}
    for start in range(0, len(distinct), 4096):
        chunk = distinct[start:start + 4096]
        tokenized = tokenizer(tf.constant(chunk))
        # Eagerly keras-hub returns plain lists for ragged output; inside a tf.function a RaggedTensor.
        for word, ids in zip(chunk, tokenized.to_list() if hasattr(tokenized, "to_list") else tokenized):
            # A word the tokenizer drops entirely (control characters) still needs a position for its tag.
            pieces[word] = [int(i) for i in ids] or [unknown]
    return pieces


def encode_sentences(sentences: Sentences, tokenizer, max_seq_length: int, tag_names: Sequence[str]) -> EncodedSplit:
    """Packs tagged sentences as `[CLS] pieces... [SEP]`, the tag id on each word's first piece.

    Words whose first piece does not fit in `max_seq_length` are cut off and counted (`truncated_words`); they are
    predicted as `O` when scoring, so that the scores stay over every word of the file.
    """
    tag_index = {tag: i for i, tag in enumerate(tag_names)}
    pieces = word_pieces([w for sentence in sentences.words for w in sentence], tokenizer)
    n = len(sentences)
    token_ids = np.full((n, max_seq_length), tokenizer.pad_token_id, np.int32)
    labels = np.full((n, max_seq_length), IGNORED_LABEL, np.int32)
    lengths = np.zeros(n, np.int32)
    positions, truncated = [], 0
    budget = max_seq_length - 1  # the last position is kept for [SEP]
    for i, (words, tags) in enumerate(zip(sentences.words, sentences.tags)):
        ids, first = [tokenizer.cls_token_id], []
        for word, tag in zip(words, tags):
            word_ids = pieces[word]
            if len(ids) >= budget:
                truncated += 1
                continue
            first.append(len(ids))
            labels[i, len(ids)] = tag_index[tag]
            ids.extend(word_ids[:budget - len(ids)])
        ids.append(tokenizer.sep_token_id)
        token_ids[i, :len(ids)] = ids
        lengths[i] = len(ids)
        positions.append(np.asarray(first, np.int32))
    sequences = Sequences(token_ids, np.zeros_like(token_ids), lengths)
    return EncodedSplit({"": sequences}, labels, positions, [list(t) for t in sentences.tags], truncated)
