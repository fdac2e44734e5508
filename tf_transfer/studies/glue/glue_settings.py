"""`GlueSettings`: every setting of one GLUE run, frozen, validated, hashed into the run's name; each is a flag of
`python -m tf_transfer.glue` (`tf_transfer.core.settings`).

Example:

>>> from tf_transfer.studies.glue.glue_settings import GlueSettings
>>> settings = GlueSettings(task="rte", trainable_layers=4, lr=1e-3)
>>> settings.default_output_dir("runs")
'runs/rte/k4_lr0.001_bs1_93f4de70/seed0'
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import json
import os
from typing import ClassVar, Optional

from tf_transfer.core import settings as settings_lib
from tf_transfer.core.choices import JIT_COMPILE, LR_SCHEDULES
from tf_transfer.core.errors import TransferError
from tf_transfer.core.settings import RunSettings, setting, take
from tf_transfer.data import inputs
from tf_transfer.data import tasks, user_data
from tf_transfer.models import freezing, methods
# The first run's rate per kind of route (one table, read by `compare` and the freezing grid too).
from tf_transfer.models.first_run_rates import FIRST_RUN_LR, first_run_lr  # noqa: F401
from tf_transfer.studies import study_method


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlueSettings(RunSettings):
    """The settings of one training run. Defaults are the transfer-learning paper's (Wang) where it fixes them.

    `validation_fraction=0` trains on the whole of GLUE train (Lee, Tang & Lin's protocol): nothing is held out or
    scored as validation, so early stopping must be off (`patience=0`), every epoch up to `max_epochs` is trained,
    no epoch is chosen (`best_epoch` stays null) and the run's result is its last epoch.

    Optimizer defaults follow Google BERT's `optimization.py`: AdamW, decoupled weight decay 0.01 on all but
    LayerNorm and bias variables, epsilon 1e-6, gradients clipped to global norm 1.0.
    """

    task: Optional[str] = setting(None, "GLUE task: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte or wnli; or "
                                        "tfds:<name> for a TensorFlow Datasets data set (with --text_columns and "
                                        "--label_column). Your own files: --train_file instead.")
    train_file: Optional[str] = setting(None, "Your own data instead of --task: a .csv (standard quoting), .tsv "
                                              "(quoting off, as GLUE) or .jsonl training file with a header (JSON "
                                              "Lines: keys) naming --text_columns and --label_column. "
                                              "--preset, --batch_size, --max_epochs, --trainable_layers, "
                                              "--padding and --cache_frozen not given get a first run's values "
                                              "(docs/glue.md).")
    validation_file: Optional[str] = setting(None, "Validation file for early stopping, in --train_file's format; "
                                                   "without it a seeded --validation_fraction of train is held out.")
    test_file: Optional[str] = setting(None, "Test file, in --train_file's format, scored after every epoch.")
    text_columns: tuple = setting((), "With --train_file or --task=tfds:...: the text column, or two (a sentence "
                                      "pair), comma-separated.")
    take(vars(), "label_column", note="With --train_file or --task=tfds:...: strings or integers (numbers with "
                                      "--regression).")
    encoding: str = setting("utf-8", "Text encoding of --train_file, --validation_file and --test_file (e.g. cp1252 "
                                     "or latin-1 for Windows or older Western files); UTF-8 may start with a "
                                     "byte-order mark.")
    regression: bool = setting(False, "The label is a number: mean squared error loss; Spearman, Pearson and MSE.")
    positive_label: Optional[str] = setting(None, "Two labels: the positive class, whose F1 is reported (default: "
                                                  "the second label in sorted order).")
    allow_many_labels: bool = setting(False, "Train even when the training file has fewer than 5 rows per label "
                                             "(three labels or more), which is refused otherwise.")
    train_split: str = setting("train", "--task=tfds:...: the split to train on.")
    validation_split: Optional[str] = setting(None, "--task=tfds:...: the validation split (default: a seeded "
                                                    "--validation_fraction of the training split).")
    test_split: Optional[str] = setting(None, "--task=tfds:...: a split scored as test after every epoch.")
    take(vars(), "preset", note="A BERT, RoBERTa, DistilBERT, ELECTRA or DeBERTa-v3 encoder.")
    take(vars(), "trainable_layers")
    method: str = setting(methods.DEFAULT, methods.registry.method_help())
    # Every registered method's own settings (LoRA's rank, BitFit's LayerNorm switch, ...), here in the class's
    # field order: each a flag, a `config` entry of summary.json and part of the run's fingerprint.
    settings_lib.add_fields(vars(), methods.registry.setting_fields())
    take(vars(), "lr", note="The paper: 2e-5 fine-tuning, 1e-3 transfer.")
    take(vars(), "batch_size", default=1, why="The paper (Wang) trains at batch 1.")
    take(vars(), "max_epochs", note="The paper: 30.")
    take(vars(), "patience", default=2, why="The paper (Wang) stops after 2 epochs without improvement.")
    take(vars(), "min_delta")
    data_dir: Optional[str] = setting(None, "GLUE folder in the original TSV layout (default $GLUE_DIR); with "
                                            "neither, tensorflow-datasets glue/<task> is used.")
    take(vars(), "validation_fraction", note="Here of GLUE train or --train_file, when no validation file is given "
                                             "(the paper: 10%).")
    take(vars(), "max_train_examples", "lr_schedule", "warmup_proportion", "weight_decay", "clip_norm",
         "adam_epsilon")
    take(vars(), "dropout", note="Also in the head.")
    metric: Optional[str] = setting(None, "Validation metric for early stopping (default: the task's primary "
                                          "metric).")
    take(vars(), "padding", "bucket_step", "eval_batch_size", "skip_bad_rows")
    cache_frozen: bool = setting(
        False, "Compute the frozen embeddings and blocks once per split (inference mode, stored as float16) and "
               "train only the last k blocks and head on them. Deviates from the paper (no dropout inside the frozen "
               "blocks); off in the paper's flagfiles.")
    cache_dir: Optional[str] = setting(None, "Keep frozen-prefix caches on disk here (memory-mapped) and reuse "
                                             "them.")
    take(vars(), "jit_compile", "steps_per_execution", "init_checkpoint", "bert_config_file", "vocab_file")

    CHECKS: ClassVar[dict] = {
        **settings_lib.CHECKS,
        "lr_schedule": settings_lib.one_of(LR_SCHEDULES),
        "warmup_proportion": (settings_lib.in_range(0.0, 1.0), "must be in [0, 1)"),
        "padding": settings_lib.one_of(inputs.PADDINGS),
        "jit_compile": ((lambda value: str(value).lower() in JIT_COMPILE), f"must be one of {', '.join(JIT_COMPILE)}"),
        "steps_per_execution": (settings_lib.at_least(1), "must be at least 1"),
        "method": methods.registry.name_check(),
        "encoding": (settings_lib.known_encoding, "must be a text encoding Python knows (e.g. utf-8, cp1252, "
                                                  "latin-1)"),
    }
    # Where data and caches live and knobs that only change speed: they never change a run's results.
    NOT_RESULT_SETTINGS: ClassVar[tuple] = ("data_dir", "cache_dir", "steps_per_execution", "eval_batch_size",
                                            "train_file", "validation_file", "test_file", "allow_many_labels")
    # Settings added after runs were made, with the value those runs had: a setting at that value changes no run's
    # name, and an older run matches it.
    ADDED_SETTINGS: ClassVar[dict] = {"train_file": None, "validation_file": None, "test_file": None,
                                      "text_columns": [], "label_column": None, "regression": False,
                                      "positive_label": None, "train_split": "train", "validation_split": None,
                                      "test_split": None, "method": methods.DEFAULT,
                                      **methods.registry.older_runs(), "allow_many_labels": False,
                                      "encoding": "utf-8"}

    OWN_DATA_SETTINGS: ClassVar[tuple] = ("train_file", "validation_file", "test_file", "text_columns", "label_column",
                                          "regression", "positive_label", "train_split", "validation_split",
                                          "test_split", "allow_many_labels", "encoding")

    def __post_init__(self):
        self._set("text_columns", tuple(self.text_columns))
        for name, (kind, _) in methods.registry.setting_fields().items():
            if kind is tuple:
                self._set(name, tuple(getattr(self, name)))
        self._set("trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        if settings_lib.known_encoding(self.encoding):  # UTF8, utf_8 and utf-8 are one encoding and one run
            self._set("encoding", codecs.lookup(self.encoding).name)
        if self.task and self.train_file:
            raise TransferError("give --task (a GLUE task, or tfds:<name>) or --train_file (your own data), not both")
        if not self.task and not self.train_file:
            raise TransferError("--task is required: one of cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, or "
                                "tfds:<name>; or give --train_file for your own data")
        if self.data_spec is None:
            self._check_glue_task()
        else:
            self._check_own_data()
        super().__post_init__()

    def _check_glue_task(self) -> None:
        task = tasks.get_task(self.task)
        self._set("task", task.name)
        own = [name for name in self.OWN_DATA_SETTINGS if self.to_dict()[name] != self.ADDED_SETTINGS[name]]
        if own:
            raise TransferError(f"--{own[0]} is for your own data (--train_file or --task=tfds:<name>), not for "
                                f"the GLUE task {task.name}")
        if self.metric is not None and self.metric not in task.metrics:
            raise TransferError(f"--metric={self.metric} is not computed for {task.name}: use one of "
                                f"{', '.join(task.metrics)}")

    def _check_own_data(self) -> None:
        source = "--train_file" if self.train_file else f"--task={self.task}"
        if len(self.text_columns) not in (1, 2) or not self.label_column:
            raise TransferError(f"{source} needs --text_columns (one column, or two for sentence pairs) and "
                                "--label_column")
        if self.train_file:
            for flag in ("train_file", "validation_file", "test_file"):
                if getattr(self, flag):
                    user_data.check_file(getattr(self, flag), flag)
        if self.regression and self.positive_label is not None:
            raise TransferError("--positive_label is for two classes, not for --regression")
        allowed = (user_data.REGRESSION_METRICS if self.regression
                   else tuple(dict.fromkeys(user_data.BINARY_METRICS + user_data.MULTICLASS_METRICS)))
        if self.metric is not None and self.metric not in allowed:
            raise TransferError(f"--metric={self.metric} is not computed for "
                                f"{'regression' if self.regression else 'classification'}: use one of "
                                f"{', '.join(allowed)}")

    def check_together(self) -> list:
        methods.registry.check_configs(self)  # each method's settings, as its config checks them
        return [
            # Nothing held out: nothing to stop early on or to pick an epoch by (every epoch is trained).
            (self.validation_fraction > 0 or self.patience == 0,
             "--validation_fraction=0 holds nothing out to stop early on: give --patience=0 (early stopping off)"),
            *methods.registry.method_rules(self),
            (not (self.cache_frozen and self.trainable_layers == freezing.ALL),
             "--cache_frozen needs frozen embeddings: use --trainable_layers=0..L, not 'all'"),
            # XLA compiles one program per input shape, and a packed batch's row count and width vary with its
            # examples' lengths (up to --batch_size rows, times the widths: dozens of programs, each compiled in
            # seconds to minutes), where a bucketed batch has one shape per bucket.
            (not (self.padding == "pack" and str(self.jit_compile).lower() == "true"),
             "--padding=pack gives batches of varying row counts and widths, and XLA compiles a program for each "
             "shape: use --padding=bucket with --jit_compile=true, or --jit_compile=auto (off on a CPU) or false "
             "with packing"),
            *methods.registry.other_methods_rules(self),
        ]

    # Settings that mean nothing under other methods, left out of their runs' records and names (a method's setting
    # that came after runs of every method were made, with another default than those runs had: see ADDED_SETTINGS).
    METHOD_ONLY: ClassVar[dict] = methods.registry.recorded_only_for()

    def to_dict(self) -> dict:
        values = super().to_dict()
        for name, method in self.METHOD_ONLY.items():
            if self.method != method:
                values.pop(name)
        return values

    def added_settings(self) -> dict:
        """`ADDED_SETTINGS` for a run of this method: what older runs of it had (settings of other methods left
        out, as `to_dict` leaves them out)."""
        return {k: v for k, v in self.ADDED_SETTINGS.items() if self.METHOD_ONLY.get(k, self.method) == self.method}

    @property
    def data_spec(self) -> Optional[user_data.DataSpec]:
        """Where a user's own data set is (files or TFDS); None for a GLUE task."""
        if self.train_file or (self.task or "").startswith(user_data.TFDS_PREFIX):
            tfds = self.task[len(user_data.TFDS_PREFIX):] if self.task else None
            return user_data.DataSpec(self.train_file, self.validation_file, self.test_file, tfds, self.train_split,
                                      self.validation_split, self.test_split, self.text_columns, self.label_column,
                                      self.regression, self.positive_label, self.allow_many_labels,
                                      self.encoding)
        return None

    @property
    def dataset(self) -> str:
        """The data set's name in folders, HParams and tables: the GLUE task, the file's stem or `tfds_<name>`."""
        spec = self.data_spec
        return self.task if spec is None else spec.name

    @property
    def task_spec(self) -> tasks.Task:
        """The GLUE task (a user's own data set is described once it has been read: `user_data.load`)."""
        return tasks.get_task(self.task)

    @property
    def metric_name(self) -> str:
        """The metric that drives early stopping and best-epoch selection."""
        if self.metric:
            return self.metric
        if self.data_spec is not None:
            return user_data.REGRESSION_METRICS[0] if self.regression else "accuracy"
        return self.task_spec.primary_metric

    def fingerprint(self) -> str:
        """A short hash of every setting that can change results: not the seed (a folder of its own), where the data
        and caches live, or knobs that only change speed."""
        settings = {k: v for k, v in self.to_dict().items() if k not in ("seed",) + self.NOT_RESULT_SETTINGS
                    and not (k in self.ADDED_SETTINGS and v == self.ADDED_SETTINGS[k])}
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]

    def run_name(self) -> str:
        method = methods.get(self.method).run_name_part(self)
        return f"{method}k{self.trainable_layers}_lr{self.lr:g}_bs{self.batch_size}_{self.fingerprint()}"

    def default_output_dir(self, root: str = "runs") -> str:
        return os.path.join(root, self.dataset, self.run_name(), f"seed{self.seed}")



def _follow_older_runs(method, registered: bool) -> None:
    """A method registered after `GlueSettings` was made (outside the package) brings, beside its settings
    (`study_method.follow`), the value older runs had of each and whether other methods' runs record them; taken
    out, it takes them back."""
    if registered:
        GlueSettings.ADDED_SETTINGS.update({k: v for k, v in methods.registry.older_runs((method.name,)).items()
                                            if k not in GlueSettings.ADDED_SETTINGS})
        GlueSettings.METHOD_ONLY.update(methods.registry.recorded_only_for((method.name,)))
        return
    for name in (name for name in method.settings if name not in GlueSettings.__dataclass_fields__):
        GlueSettings.ADDED_SETTINGS.pop(name, None)
        GlueSettings.METHOD_ONLY.pop(name, None)


study_method.follow(GlueSettings, takes=methods.names, also=_follow_older_runs)

# A first run on a user's own data (--train_file or --task=tfds:...) when neither a flag nor a flagfile gives these
# settings: a small encoder that loads offline, a batch that keeps a CPU busy, a few epochs stopped early, the last 2
# blocks trained over a cache of the frozen rest at the rate `FIRST_RUN_LR` gives (the first-run benchmark's choice,
# reports/first_run: about a third of full fine-tuning's time, 1-2.5 points below it on the classification files' test
# sets, the mean over the compared seeds; on a regression file 2.6 and 5.4 points of Spearman below it, on SST-5's
# sentences read as scores and on STS-B: `FIRST_RUN_TRADE`, the one for the run's kind on its first line), and packed
# batches (the same model on fewer tokens: short texts padded to their batch's longest leave much of a step computing
# padding), so the run takes minutes on a CPU. The papers' settings stay in their flagfiles, and GLUE tasks keep the
# defaults above (but for a method's own `run_defaults`, e.g. adaptive freezing's).
FIRST_RUN = {"preset": "all_minilm_l6_v2_en", "batch_size": 32, "max_epochs": 5, "trainable_layers": 2,
             "padding": "pack"}
# By --regression: the trade measured on files of the run's kind (docs/glue.md), and on a regression file the advice
# the measurements give.
FIRST_RUN_TRADE = {
    False: ("the last 2 blocks: about a third of full fine-tuning's time, 1-2.5 points below its test score on the "
            "first-run benchmark's classification files, docs/glue.md; --trainable_layers=all fine-tunes everything"),
    True: ("the last 2 blocks: about a third of full fine-tuning's time, 2.6 and 5.4 points of Spearman correlation "
           "below it on two regression files, docs/glue.md; on a regression file, --trainable_layers=all fine-tunes "
           "everything"),
}
PACKING_WHY = ("--padding=pack lays each batch's examples end to end: the same model on fewer tokens, trained as "
               "another seed would train it")


def first_run_defaults(settings: GlueSettings, given: set) -> tuple:
    """`(settings, line)`: `settings` with the method's `run_defaults` and, on a user's data set, `FIRST_RUN` for
    each of those settings not in `given` (the flags set on the command line), the frozen prefix cached when
    something is frozen and the method is freezing (the cached run trains the same last k blocks on the frozen
    blocks' outputs), packed batches unless `--jit_compile=true` asks for XLA, and the line saying what was chosen,
    why, and how to change it; `(settings, None)` when nothing was chosen (a GLUE task with a method that has no
    defaults of its own keeps the defaults above)."""
    method_defaults, why = methods.get(settings.method).run_defaults
    from_method = {name: value for name, value in method_defaults.items() if name not in given}
    chosen = {}
    if settings.data_spec is not None:
        chosen = {name: value for name, value in FIRST_RUN.items() if name not in given}
        if "trainable_layers" in chosen and settings.method != methods.DEFAULT:
            del chosen["trainable_layers"]  # the other methods' default is every block
        frozen = (freezing.parse_trainable_layers(chosen.get("trainable_layers", settings.trainable_layers))
                  != freezing.ALL)
        if "cache_frozen" not in given and frozen and settings.method == methods.DEFAULT:
            chosen["cache_frozen"] = True
        if "lr" not in given:  # named on the first line: the rate is a choice as much as the blocks it trains
            chosen = _after(chosen, "trainable_layers", "lr", first_run_lr(
                settings.method, chosen.get("trainable_layers", settings.trainable_layers)))
        if str(settings.jit_compile).lower() == "true":  # XLA would compile a program per packed row count
            chosen.pop("padding", None)
    chosen.update(from_method)  # the method's own, where they differ from a first run's
    if not chosen:
        return settings, None
    settings = dataclasses.replace(settings, **chosen)
    shown = [_flag_text(name, value) for name, value in chosen.items()]
    stopping = (f" (early stopping after {settings.patience} epochs without improvement)"
                if "max_epochs" in chosen and settings.patience else "")
    full = f" ({FIRST_RUN_TRADE[bool(settings.regression)]})" if "trainable_layers" in chosen else ""
    packing = f" ({PACKING_WHY})" if "padding" in chosen else ""
    because = f" (--method={settings.method}: {why})" if from_method else ""
    start = "first run" if settings.data_spec is not None else "run"
    return settings, (f"{start} on {settings.dataset}: chose {', '.join(shown)}{stopping}{full}{packing}{because}; "
                      "give any of these flags (or a --flagfile) to change them")


def _after(chosen: dict, before: str, name: str, value) -> dict:
    """`chosen` with `name` set to `value`, placed after `before` (at the end if `before` is absent)."""
    items = [(k, v) for k, v in chosen.items() if k != name]
    at = next((i + 1 for i, (k, _) in enumerate(items) if k == before), len(items))
    return dict([*items[:at], (name, value), *items[at:]])


def _flag_text(name: str, value) -> str:
    if isinstance(value, bool):
        return f"--{name}={str(value).lower()}"
    return f"--{name}={value:g}" if isinstance(value, float) else f"--{name}={value}"
