"""One small setting per study for the distributed tests, and its run on one device, trained once per test process.

The mirrored tests (GLUE, stack, sentiment BERT, multitask) and the two-worker test
(tests/training/test_multi_worker_studies.py) all compare a strategy's run with the default strategy's run of the
same setting: `OneDeviceRuns.run(study)` trains that one-device run the first time a test asks and keeps its
summary, so each test pays only for its own strategy's run. The tests that use it are one pytest-xdist group
(`GROUP`; setup.cfg runs the suite with `--dist=loadgroup`), so they share one test process and each one-device run
is trained once in the suite.

Dropout 0 everywhere (the sentiment study has no dropout setting: its preset is the tiny one with dropout 0): after
initialisation nothing is random, so a strategy that computes what one device computes gives its numbers.

`run_study` is also what each worker process of the two-worker test runs (tests/training/multi_worker_worker.py):
this module imports nothing from the test setup at its top, so a worker can import it.
"""

from __future__ import annotations

import json
import os
import sys

GROUP = "one_device_runs"

TESTS = os.path.dirname(os.path.abspath(__file__))

# A clipping norm below the gradients' (about 0.4 at first): clipping each replica's (or worker's) own gradient
# would show. Bucketed padding: each replica's share is padded to its own bucket. One trainable block, trained on
# tokens (no cache: the mirrored LoRA test trains over the frozen-prefix cache). 12 examples in batches of 5, 5
# and 2: shares of 3 and 2, then 1 and 1, so that the loss is a weighted mean over shares of unequal size (two
# replicas each averaging their own share weigh the examples of the share of 2 more than one device does).
GLUE = dict(task="mrpc", trainable_layers=1, lr=1e-2, clip_norm=0.05, batch_size=5, max_train_examples=12,
            max_epochs=2, patience=0, max_seq_length=32, dropout=0.0, seed=0)
# AutoFreeze on the GLUE trainer: every block trains at first, a decision every 2 steps (batches of 4 SST-2
# sentences, one epoch), the 100th percentile so that the lowest block freezes within the epoch: the replicas' (or
# workers') gradient sums must be all-reduced for the decisions, and so the losses, to be one device's. On a
# two-block preset (`blocks_preset(2)`: block 0 freezes at step 4, the top one trains on): the fewest blocks with
# something to freeze below the kept top one, whose full-model step traces in about 4/5 of the three-block preset's
# time (one device, 7.6 against 9.8 CPU s).
AUTOFREEZE = dict(task="sst2", method="autofreeze", lr=1e-3, clip_norm=0.05, batch_size=4, max_epochs=1, patience=10,
                  max_seq_length=16, dropout=0.0, seed=0, freeze_interval_steps=2, freeze_percentile=100.0)
# Stack and multitask train every block they have, so how many there are changes nothing the distributed tests
# check: they run on a one-block preset (`blocks_preset(1)`), whose traces and graph optimisation take about half
# the three-block preset's time (the two workers' run of the four studies: 40-43 -> 32-33 s alone). GLUE needs a
# frozen block before the trained one: two blocks (`blocks_preset(2)`); sentiment too (`still_preset`): top2 trains
# both, below them the embeddings stay frozen, and frozen reads the features of the whole backbone at any depth
# (top2's one-device and mirrored runs: 12.9 -> 9.6 s with two blocks, one process on one core).
# 16 training pairs (the held-out fifth of 20 scored), batches of 8; both phases.
STACK = dict(task="quora", head="linear", strategy="stack_and_finetune", phase1_epochs=1, max_epochs=2, max_gap=1.0,
             batch_size=8, head_units=8, max_seq_length=16, dropout=0.0, seed=0)
QUORA_ROWS = 24
# 16 training texts in batches of 4 (the held-out fifth of 20). top2: the token feed and the last two blocks train
# (mirrored). frozen: the backbone's features of every text, then the head on shares of those arrays, the study's
# own input path (mirrored and two workers; cheaper than top2, whose token feed and warm-up are GLUE's).
SENTIMENT = dict(mode="top2", runs=1, epochs=2, batch_size=4, max_seq_length=16)
SENTIMENT_FROZEN = dict(SENTIMENT, mode="frozen")
KAGGLE_ROWS_PER_CLASS = 10
# Batches of 5 and 2 per task: uneven shares over the two replicas.
MULTITASK = dict(schedule="summed", pair_head="concat", max_epochs=2, batch_size=5, lr=1e-3, clip_norm=0.5,
                 max_seq_length=16, max_train_examples=7, dropout=0.0, head_dropout=0.0, seed=0)


def run_study(name: str, spec: dict, output_dir: str, strategy=None, distribution: str = "default") -> dict:
    """Trains study `name` with `spec` (its settings' keyword arguments, data paths and preset included) through
    the function its command calls, under `strategy` (None: the default strategy); returns what that function
    returns (the summary; the sentiment study's results)."""
    if name in ("glue", "autofreeze"):
        from tf_transfer.studies.glue import glue_task as glue
        from tf_transfer.studies.glue.glue_settings import GlueSettings

        return glue.run_glue(GlueSettings(**spec, distribution=distribution), output_dir, strategy=strategy)
    if name == "stack":
        from tf_transfer.studies.stack import stack_ensemble as stack
        from tf_transfer.studies.stack.stack_settings import StackSettings

        return stack.run_stack(StackSettings.from_dict({**spec, "distribution": distribution}), output_dir, strategy=strategy)
    if name in ("sentiment", "sentiment_frozen"):
        from tf_transfer.data import labelled_texts
        from tf_transfer.studies.sentiment import sentiment_bert, sentiment_settings

        settings = sentiment_settings.SentimentBertSettings(**spec["settings"], distribution=distribution)
        return sentiment_bert.run_bert(labelled_texts.read_labelled_texts(spec["data"]), output_dir, settings,
                                       strategy=strategy)
    if name == "multitask":
        from tf_transfer.studies.multitask import multitask_task as multitask
        from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings

        return multitask.run_multitask(MultitaskSettings(**spec, distribution=distribution), output_dir,
                                       strategy=strategy)
    raise ValueError(f"unknown study {name!r}")


def from_study_tests(module_name: str, function: str):
    """A data writer of a test module in tests/studies (write_kaggle_csv, write_cs224n)."""
    sys.path.insert(0, os.path.join(TESTS, "studies"))
    try:
        return getattr(__import__(module_name), function)
    finally:
        sys.path.pop(0)


class OneDeviceRuns:
    """The studies' settings with their data and presets (`specs`, JSON: what the worker processes read) and their
    runs under the default strategy (`run`), each trained at most once.

    >>> runs = OneDeviceRuns(tmp_path, glue_dir)  # doctest: +SKIP
    >>> runs.run("glue")["epochs"][0]["loss"]  # doctest: +SKIP
    """

    def __init__(self, root, glue_dir: str):
        self.root = root
        self.glue_dir = glue_dir
        self._specs = None
        self._runs = {}

    @property
    def specs(self) -> dict:
        if self._specs is None:
            from conftest import quora_rows

            data = self.root / "data"
            data.mkdir(parents=True, exist_ok=True)
            quora = data / "quora-dev.csv"
            quora.write_text(quora_rows(QUORA_ROWS, empty_label=False), encoding="utf-8")
            kaggle = from_study_tests("test_sentiment", "write_kaggle_csv")(
                data / "train.csv", rows_per_class=KAGGLE_ROWS_PER_CLASS)
            cs224n = from_study_tests("test_multitask", "write_cs224n")(str(data / "cs224n"))
            self._specs = {
                "glue": {**GLUE, "preset": self.blocks_preset(2), "data_dir": self.glue_dir},
                "autofreeze": {**AUTOFREEZE, "preset": self.blocks_preset(2), "data_dir": self.glue_dir},
                "stack": {**STACK, "preset": self.blocks_preset(1), "data": str(quora)},
                "sentiment": {"data": str(kaggle), "settings": {**SENTIMENT, "preset": self.still_preset()}},
                "sentiment_frozen": {"data": str(kaggle),
                                     "settings": {**SENTIMENT_FROZEN, "preset": self.still_preset()}},
                "multitask": {**MULTITASK, "preset": self.blocks_preset(1), "data_dir": cs224n},
            }
        return self._specs

    def blocks_preset(self, blocks: int) -> str:
        """The tiny preset's shape and tokenizer with `blocks` blocks (stack and multitask train all blocks: one;
        AutoFreeze freezes the lower of two, GLUE caches it: two)."""
        folder = self.root / f"{blocks}_block_preset"
        if not folder.exists():
            from conftest import make_tiny_backbone, make_tiny_tokenizer

            make_tiny_backbone(num_layers=blocks).save_to_preset(str(folder))
            make_tiny_tokenizer().save_to_preset(str(folder))
        return str(folder)

    def still_preset(self) -> str:
        """The tiny preset with two blocks and dropout 0 (the sentiment study has no dropout setting)."""
        folder = self.root / "still_preset"
        if not folder.exists():
            import keras_hub

            from conftest import make_tiny_backbone, make_tiny_tokenizer

            tiny = make_tiny_backbone(num_layers=2)
            still = keras_hub.models.BertBackbone(**{**tiny.get_config(), "dropout": 0.0})
            still.set_weights(tiny.get_weights())
            still.save_to_preset(str(folder))
            make_tiny_tokenizer().save_to_preset(str(folder))
        return str(folder)

    def run(self, study: str) -> dict:
        """The default strategy's run of `study`'s setting, as JSON gives it back (what a summary file holds)."""
        if study not in self._runs:
            result = run_study(study, self.specs[study], str(self.root / "runs" / study))
            self._runs[study] = json.loads(json.dumps(result, default=float))
        return self._runs[study]
