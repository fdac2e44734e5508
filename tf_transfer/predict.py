"""Score a TSV, CSV or JSON Lines file with a classifier exported by `glue --export_dir` (a keras-hub preset folder,
or a SavedModel of `--export_format=saved_model`).

    python -m tf_transfer.predict --export_dir=exported/tweets --input=test.csv --output=submission.csv

Text columns default to the exported task's (e.g. sentence1/sentence2 for RTE, or the training file's own);
`--text_a_column` and `--text_b_column` name others. `.tsv` files are read with quoting disabled (GLUE), `.csv` with
standard quoting, `.jsonl` as one JSON object per line. Each output row is the input's id (`--id_column`, by default a
column named `id` when the input has one, else the row number from 0), then the predicted `label` and one
`prob_<label>` per label (a regression model: the predicted value, named as the trained label column). The output is
CSV, JSON Lines or TSV by `--output`'s extension (TSV on standard output); `--output_columns=id,target` keeps only
those columns, the predicted label under the trained label column's name (a Kaggle submission). `--encoding` reads
an input that is not UTF-8. `--padding=pack` lays each batch's rows end to end rather than padding them (the same
outputs up to float32 rounding, on fewer tokens; the default where the exported run trained packed); a SavedModel
pads each batch of rows sorted by length to its longest row. Progress (rows done, rows per second) goes to standard
error while it scores, and a final line there names the count and the output.
"""

from __future__ import annotations

import sys
import time

from absl import flags

from tf_transfer.core import cli
from tf_transfer.core import flags as flags_lib
from tf_transfer.data.prediction_files import (output_fields, read_rows, selected_columns, text_columns,
                                               write_predictions)

FLAGS = flags.FLAGS

flags.DEFINE_string("model", None, "Folder written by glue --export_dir, either --export_format (--export_dir "
                    "names it too).")
flags.DEFINE_string("input", None, "TSV (quoting disabled, as GLUE) or CSV (standard quoting) with a header row, "
                    "or JSON Lines.")
flags.DEFINE_string("output", None, "Where to write predictions: .csv, .jsonl, or anything else as TSV; default "
                    "standard output (TSV).")
flags.DEFINE_string("text_a_column", None, "Header name of the first text (default: the exported task's).")
flags.DEFINE_string("text_b_column", None, "Header name of the second text of pair tasks (default: the task's).")
flags.DEFINE_string("id_column", None, "Column carried to the output as each row's id (default: a column named id "
                    "when the input has one, else the row number from 0).")
flags.DEFINE_list("output_columns", None, "Write only these columns, in this order: the id column (by its name, or "
                  "row), label (or the trained label column's name, e.g. target: the predicted label under that "
                  "name), prob_<label>. E.g. id,target for a Kaggle submission. Default: all of them.")

COMMAND_FLAGS = flags_lib.common(batch_size=(64, "Prediction batch size."),
                                 export_dir=(None, "The folder written by glue --export_dir (the same as --model)."),
                                 encoding=("utf-8", "Text encoding of --input (e.g. cp1252 or latin-1 for Windows or "
                                                    "older Western files)."),
                                 padding=(None, "bucket: score rows in groups of similar length, each padded to its "
                                                "group's; pack: lay each batch's rows end to end, each seeing only "
                                                "itself (the same outputs up to float32 rounding, fewer tokens). "
                                                "Default: pack where the exported run trained with --padding=pack, "
                                                "else bucket."))
PROGRESS_EVERY_S = 10.0  # the least seconds between two progress lines (the first comes after the first batch)


class _Progress:
    """Called with the rows done after every batch: prints rows done, rate and time left on stderr after the first
    batch, then every `PROGRESS_EVERY_S` seconds."""

    def __init__(self, total: int):
        self.total, self.start, self.last = total, time.perf_counter(), None

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if done >= self.total or (self.last is not None and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        print(f"predict: {done:,}/{self.total:,} rows ({100 * done / self.total:.0f}%), {rate:,.1f} rows/s, about "
              f"{(self.total - done) / rate / 60:.1f} min left", file=sys.stderr, flush=True)


def main(argv):
    del argv
    from tf_transfer.core.errors import TransferError

    folder = FLAGS.model or FLAGS.export_dir
    if not folder or not FLAGS.input:
        raise TransferError("--export_dir (or --model: a folder written by glue --export_dir) and --input are "
                            "required")
    if FLAGS.model and FLAGS.export_dir and FLAGS.model != FLAGS.export_dir:
        raise TransferError("--model and --export_dir name the same folder: give one of them")
    from tf_transfer.models import export

    meta = export.read_meta(folder)  # the columns are checked before the model is loaded
    padding = export.check_padding(FLAGS.padding or export.trained_padding(meta))
    header, rows = read_rows(FLAGS.input, FLAGS.encoding)
    positions, id_column, id_position = text_columns(header, meta, FLAGS.input, FLAGS.text_a_column,
                                                     FLAGS.text_b_column, FLAGS.id_column)
    if meta.get("labels") or meta.get("regression"):  # the output's columns known before scoring
        selected_columns(output_fields(meta, id_column, len(meta.get("labels") or []))[0], meta,
                         FLAGS.output_columns)
    needed = max(positions + [id_position or 0]) + 1
    for line, row in enumerate(rows, start=2):
        if len(row) < needed:
            raise TransferError(f"{FLAGS.input}:{line}: expected at least {needed} columns, found {len(row)}")
    score, meta = export.load_scorer(folder, meta)  # meta: read and its files checked above
    start = time.perf_counter()
    text_a = [row[positions[0]] for row in rows]
    text_b = [row[positions[1]] for row in rows] if len(positions) > 1 else None
    values, predictions = score(text_a, text_b, FLAGS.batch_size, _Progress(len(rows)), padding)
    fields, labels = output_fields(meta, id_column, values.shape[1])
    fields, chosen = selected_columns(fields, meta, FLAGS.output_columns)
    idents = [row[id_position] for row in rows] if id_position is not None else range(len(rows))
    write_predictions(FLAGS.output, fields, chosen, idents, predictions, None if labels is None else values)
    print(f"predict: wrote {len(rows):,} rows ({', '.join(fields[:3])}{', ...' if len(fields) > 3 else ''}) to "
          f"{FLAGS.output or 'standard output'} in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    cli.run(main, COMMAND_FLAGS)
