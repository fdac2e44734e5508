"""The Task interface: what one study's run is, in the terms the runner (`tf_transfer.training.runner`) asks for.

As TF Model Garden's `base_task.Task` beside its trainer: the runner knows no study. A task holds its settings and
builds its data, model and feed (`build`), says what its `summary.json` and TensorBoard HParams hold, and trains in
one or more `Stage`s, each one `Engine.fit`: by default one stage of `train_epoch` and `evaluate` after a warm-up
(`warm_up`) and the resume of an interrupted run; a study with phases (stack-and-finetune) yields one stage per
phase. The runner gives the task its run folder (`self.folder`) before `build`.

Adding a study is one subclass (its task file), one settings class (`tf_transfer.core.settings.RunSettings`) and a
command module; docs/layout.md shows the sequence.

Example (a task whose epochs are Keras `fit` calls over a feed, as GLUE's):

>>> class MyTask(Task):  # doctest: +SKIP
...     metric = "accuracy"
...     def build(self, strategy):
...         self.strategy, self.model, self.backbone, self.feed = ...
...     def evaluate(self):
...         return {"accuracy": ...}, None
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Optional

from tf_transfer.training import engine as engine_lib


@dataclasses.dataclass
class Stage:
    """One `Engine.fit` of a run: its epoch function and scoring, and what bounds and watches its epochs (see
    `Engine.fit`). The runner sets `ended_by` ("epochs", "patience", "hook" or `engine.PAUSE`) once the stage has
    trained."""

    train_epoch: Callable
    evaluate: Callable
    optimizer: Any = None
    until_epoch: Optional[int] = None
    stopper: Optional[engine_lib.EarlyStopping] = None
    tags: Optional[dict] = None
    after_epoch: Optional[Callable] = None
    on_best: Optional[Callable] = None
    steps: Optional[int] = None
    examples: Optional[int] = None
    ended_by: Optional[str] = None


class Task:
    """One run of a study. Subclasses implement `build`, `fresh_summary` and `evaluate`, and either `train_epoch`
    or the default's Keras `fit` over `self.feed` (a `tf_transfer.data.feeds` feed), or `stages` for several."""

    metric: str = "accuracy"  # the validation score that picks the best epoch and stops early (higher is better)
    # Called with each epoch's record after it is scored; True ends the run there (a sweep's pruner, its budget),
    # `engine.PAUSE` ends it unfinished, to resume later (a sweep's reference).
    after_epoch: Optional[Callable] = None
    # Whether `parameter_table` prints the table (it is in `summary.json` either way): a sweep's trials do not, its
    # report has each candidate's trainable parameters and a table per trial buried its own lines.
    print_table: bool = True
    # Settings introduced after runs were made, with the value those runs had (`RunFolder`).
    added_settings: Optional[dict] = None
    # The kind of its `summary.json` in `tf_transfer.training.run_record` (every write is checked against it); None:
    # not checked (a test's toy task).
    summary_schema: Optional[str] = None

    def __init__(self, settings):
        self.settings = settings
        self.folder = None  # the run folder, set by the runner
        self.strategy = self.model = self.backbone = self.feed = self.optimizer = None

    # --- what the runner records -----------------------------------------------------------------------------------

    @property
    def loop(self):
        """The run's `LoopSettings` (`tf_transfer.core.setting_groups`): its epochs at most, and when it stops early."""
        return self.settings.loop

    def compared_settings(self) -> dict:
        """What a rerun in the same folder must match (its `NOT_RESULT_SETTINGS` aside)."""
        return self.settings.to_dict()

    def data_hashes(self) -> dict:
        """`{flag: SHA-256}` of the data files the run reads, which a rerun in the same folder must match where the
        run records them (`record.refuse_other_data`); `{}`: none (data the settings name fully)."""
        return {}

    def build(self, strategy) -> None:
        """Reads the data and builds `self.model`, `self.backbone`, `self.feed` (and `self.optimizer`) under
        `strategy` (None: the one the settings name), setting `self.strategy`. Bad input raises `TransferError`."""
        raise NotImplementedError

    def parameter_table(self) -> Optional[list]:
        """The trainable and total parameters per block (`freezing.parameter_table`), printed (`print_table`) and
        given to `fresh_summary`; None where it is the stages' to say."""
        from tf_transfer.models import freezing

        table = freezing.parameter_table(self.model, self.backbone)
        if self.print_table:
            print(f"trainable parameters per block ({self.describe()}):")
            print(freezing.format_table(table), flush=True)
        return table

    def describe(self) -> str:
        return f"trainable_layers={self.settings.trainable_layers}"

    def fresh_summary(self, table: Optional[list]) -> dict:
        """The first `summary.json` of a run that starts afresh."""
        raise NotImplementedError

    def hparams(self) -> Optional[dict]:
        """The run's TensorBoard HParams entry (None: no TensorBoard events)."""
        return None

    def trial_name(self) -> str:
        return ""

    # --- how it trains ---------------------------------------------------------------------------------------------

    def stages(self, engine) -> Iterator[Stage]:
        """The run's stages. By default: warm up, resume after the last finished epoch (when there is one), then one
        stage of `train_epoch` and `evaluate`."""
        compile_time_s = self.warm_up()
        # Compilation after a resume is not training time: it goes with the resume.
        if engine.restore_last(self.model, self.optimizer, compile_time_s=compile_time_s,
                               **self.resume_facts()) is None:
            engine.summary["compile_time_s"] = compile_time_s
        yield Stage(self.train_epoch, self.evaluate, optimizer=self.optimizer, on_best=self.on_best,
                    after_epoch=self.after_epoch, steps=self.feed.steps_per_epoch, examples=self.feed.num_examples)

    def warm_up(self) -> Optional[float]:
        """Traces the training step on every shape it will see, changing nothing; returns the seconds it took."""
        seconds = engine_lib.warm_up(self.model, self.feed.warmup_batches(), self.strategy)
        from absl import logging

        logging.info("compiled the training step in %.1f s", seconds)
        return seconds

    def resume_facts(self) -> dict:
        """What a resume records beside its compile time (e.g. a cache rebuilt in this process)."""
        return {}

    def train_epoch(self, epoch: int, progress) -> dict:
        """One epoch; returns `{"loss": ..., extras}`. By default one Keras `fit` over the feed's batches."""
        return engine_lib.fit_epoch(self.model, self.feed.train_batches(epoch), progress)

    def evaluate(self):
        """`(validation scores, test scores)` after an epoch, in inference mode."""
        raise NotImplementedError

    def on_best(self, epoch: int) -> None:
        """Called when `epoch` becomes the best on validation."""

    def finish(self, engine) -> None:
        """After the last stage, before the run is marked completed (e.g. an export)."""
