"""The run record: what `summary.json` holds for each kind of run, key by key (its JSON type, whether every run writes
it, what a run written before the key existed is read as, and a one-line meaning), as `core.record_schema` fields.

Kinds: `glue` (the GLUE trainer, `tf_transfer.glue`, on GLUE or your own data, every training method, adaptive
freezing included), `stack` (stack-and-finetune and each ensemble member), `multitask` and `sentiment_bert` (the
sentiment study's work file for the seed that trains: `bert_<model>.in_progress/summary.json`; the study's results
are its own files, `studies/sentiment/sentiment_results.py`). The first three share the core trainer's keys (`CORE`)
and epoch record (`EPOCH`); a training method adds its own keys from its own module (`Method.record_fields`).

The tasks write through it: the runner gives the run folder the task's `summary_schema`, and every write of
`summary.json` is checked (`RunFolder.write`), so a key nobody declared, a required key left out or a value of
another type fails where it is written (`record_schema.RecordMismatch`). The readers read through it: `load` and
`read_summary` return a summary with the keys older runs lack filled in (`Field.older`: the one place those
defaults live). docs/outputs.md's tables are generated from here (`python docs/record_reference.py`) and
tests/training/test_run_record.py fails when they differ.

Example:

>>> from tf_transfer.training import run_record
>>> old = {"task": "rte", "metric": "accuracy", "epochs": [{"epoch": 1, "train_time_s": 9.5, "loss": 0.7}]}
>>> run_record.kind_of(old)
'glue'
>>> read = run_record.read(old)
>>> read["method"], read["peak_memory_mb"], read["epochs"][0]["train_cpu_s"]
('freeze', None, None)
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tf_transfer.core.record_schema import Field, Schema
from tf_transfer.models.methods.registry import DEFAULT as DEFAULT_METHOD
from tf_transfer.training import record

NUMBER, MAYBE_NUMBER, MAYBE_DICT = (float,), (float, type(None)), (dict, type(None))

EPOCH = Schema("epoch", (
    Field("epoch", (int,), "the epoch's number, counted from 1 (over both phases of a stack run)"),
    Field("epoch_time_s", NUMBER, "wall seconds of the epoch's training steps alone (no scoring, no compilation)"),
    Field("train_time_s", NUMBER, "the running sum of `epoch_time_s`"),
    Field("cpu_utilization", MAYBE_NUMBER, "`epoch_cpu_s` / `epoch_time_s`: about 2 when both cores of a 2-core "
          "machine did the work, 1 for a run pinned to one core", older=None),
    Field("epoch_cpu_s", MAYBE_NUMBER, "`epoch_time_s` on the process's CPU clock (all threads)", older=None),
    Field("train_cpu_s", MAYBE_NUMBER, "the running sum of `epoch_cpu_s` (a run resumed from before CPU seconds "
          "were recorded counts from 0)", older=None),
    Field("others_cpu_load", MAYBE_NUMBER, "CPU seconds the machine's other processes ran per wall second of the "
          "epoch (`/proc/stat`): 0 on an otherwise idle machine, about 1 when other work kept one core busy, more on 2 "
          "cores when other work also took turns on the run's own core: what ran beside the run, which can slow even "
          "a run pinned to its own core (`null` where not recorded)",
          older=None),
    Field("speed_probe_cpu_ms", MAYBE_NUMBER, "how fast the machine ran right after the epoch: the median CPU "
          "milliseconds of one fixed piece of a transformer's work, over calls that take 1% of the epoch's time "
          "(at most 1 s and 30 calls; `machine.speed_probe`); set an epoch's CPU seconds against it to compare "
          "times taken hours apart on a VM whose speed drifts (`null` after epochs under 5 s, and where not "
          "recorded)", older=None),
    Field("peak_memory_mb", MAYBE_NUMBER, "the most memory the run held while this epoch trained (below)",
          older=None),
    Field("loss", NUMBER, "the epoch's mean training loss"),
    Field("val", MAYBE_DICT, "validation scores, `{metric: value}` (`null` values: undefined, e.g. a constant "
          "prediction's correlation)"),
    Field("test", MAYBE_DICT, "test scores (GLUE dev), `{metric: value}`; MNLI `{dev_matched: {...}, "
          "dev_mismatched: {...}}`; `null` without test data"),
))

# The core trainer's keys: written by `record.nothing_trained_yet`, the engine and the run folder for every study of
# the kinds below, besides the study's own.
CORE = (
    Field("task", (str,), "the task: a GLUE task, your data set's name (`--train_file`, `--task=tfds:...`), a stack "
          "task, or `multitask`"),
    Field("preset", (str,), "the preset (or checkpoint) asked for"),
    Field("preset_source", (str,), "where its weights came from"),
    Field("num_layers", (int,), "encoder blocks of the backbone"),
    Field("trainable_layers", (int, str, type(None)), "the freezing rule's k (the last k blocks train), or `\"all\"`"),
    Field("method", (str,), "the training method (docs/methods.md)", older=DEFAULT_METHOD),
    Field("lr", MAYBE_NUMBER, "the learning rate"),
    Field("batch_size", (int,), "the training batch size"),
    Field("seed", (int,), "the seed (data order, split, dropout, new weights)"),
    Field("metric", (str,), "the validation metric that picks the best epoch and stops early"),
    Field("trainable_params", (int, type(None)), "parameters that train"),
    Field("total_params", (int, type(None)), "parameters of the model"),
    Field("examples", (dict,), "examples per split"),
    Field("skipped_rows", (int, dict), "rows skipped (`--skip_bad_rows`; per file or task)"),
    Field("machine", MAYBE_DICT, "what the run ran on: `{cpu, cores (those the process may use), isa: [avx2, "
          "avx512f, avx512_bf16, amx_bf16, amx_tile present]}`; each entry of `resumes` has its own", older=None),
    Field("code", MAYBE_DICT, "the code that ran: `{commit, dirty}` (dirty: uncommitted changes under "
          "`tf_transfer/`, `experiments/` or `flags/`), `null` outside a git checkout; each entry of `resumes` has "
          "its own", older=None),
    Field("precision", (str,), "`--precision`: the Keras dtype policy"),
    Field("compile_time_s", MAYBE_NUMBER, "seconds spent tracing/compiling the training step (once per batch "
          "shape), not training"),
    Field("epochs", (list,), "one record per finished epoch (the epoch table below)", item=EPOCH),
    Field("best_epoch", (int, type(None)), "the epoch with the best validation metric"),
    Field("stopped_early", (bool,), "true when patience ran out before `--max_epochs`"),
    Field("completed", (bool,), "true once the run has finished"),
    Field("config", (dict,), "every setting of the run (what a rerun in the folder must match)"),
    Field("started_at", (str,), "when the run started (local time, ISO 8601)"),
    Field("finished_at", (str,), "when it completed", required=False, at_end=True),
    Field("early_stopping", MAYBE_DICT, "the stopping rule's state: `{patience, min_delta, best, best_epoch, "
          "wait}`", required=False, older=None),
    Field("peak_memory_mb", MAYBE_NUMBER, "the run's peak memory while training, in MB: the largest of its epochs'",
          required=False, older=None),
    Field("peak_memory_source", (str, type(None)), "what `peak_memory_mb` measured", required=False, older=None),
    Field("resident_before_training_mb", MAYBE_NUMBER, "on a CPU: the process's resident set right before its first "
          "training step (the first process's, for a resumed run)", required=False, older=None),
    Field("peak_above_start_mb", MAYBE_NUMBER, "the largest epoch peak above the resident set before the first step "
          "of the process that trained it: what training adds (gradients, optimizer slots, activations, the traced "
          "step), without TensorFlow's own memory, the data and the weights", required=False, older=None),
    Field("resumes", (list,), "one entry per resume: `{after_epoch, compile_time_s, ..., machine, code, at}`",
          required=False, older=[]),
)

CORE_BY_NAME = {field.name: field for field in CORE}
# The core keys the GLUE and multitask tasks also write (`record.nothing_trained_yet`, the parameter table).
TRAINER = (
    Field("parameter_table", (list,), "trainable and total parameters per block: `[{part, trainable, total}]`"),
    Field("run_name", (str,), "the run's name (its folder's, and TensorBoard's trial)"),
)

GLUE_OWN = (
    Field("dataset", (dict,), "your own data: `{name, tfds, text_columns, label_column, kind, files: {flag: {path, "
          "sha256}}}`; absent for a GLUE task", required=False),
    Field("labels", (list, type(None)), "your own data: the labels in class order (`null` for a regression); absent "
          "for a GLUE task", required=False),
    Field("padding_efficiency", MAYBE_NUMBER,
          "real / computed tokens of the training batches (rows x width when packed)"),
    Field("cache_frozen", (bool,), "`--cache_frozen`"),
    Field("cache_time_s", MAYBE_NUMBER, "seconds this run spent building frozen-prefix caches (0 when reused)"),
    Field("cache_build_s", MAYBE_NUMBER, "what the caches it used cost to build (wall), whoever built them"),
    Field("cache_build_cpu_s", MAYBE_NUMBER, "the same on the CPU clock"),
    Field("cache_mb", MAYBE_NUMBER, "what the frozen-prefix caches of every split hold in memory (resident before "
          "the first step, so not in `peak_above_start_mb`)", older=None),
    Field("jit_compile", (str, bool), "`--jit_compile`"),
    Field("train_time_s", NUMBER, "training seconds of the whole run (the last epoch's `train_time_s`)",
          required=False, at_end=True),
    Field("constant_prediction", MAYBE_DICT, "the best constant prediction's validation score by the stopping metric "
          "beside the best epoch's (`{metric, score, best, prediction, beaten}`: `prediction` the class, or the mean "
          "of a numeric target; `beaten` false: the run learnt nothing a constant does not); `null` without a "
          "validation split", required=False, at_end=True, older=None),
    Field("exported", (dict,), "with `--export_dir` (after training, or on the completed run): the folder the best "
          "epoch's classifier went last, and that epoch (`{folder, epoch}`; epoch `null`: no epoch chosen, the last)",
          required=False),
)
GLUE_EPOCH = (
    Field("sweep", (str,), "a sweep's trial: why it stopped there (`reference`, `pruned`, `budget`)", required=False),
)

STACK_OWN = (
    Field("head", (str,), "the head"),
    Field("strategy", (str,), "stack_and_finetune, finetune_only or stack_only"),
    Field("method_in_phase1", (bool,), "`--method_in_phase1`", older=False),
    Field("phases", (list,), "per phase: `{phase, lr, trainable_layers, method, trainable_params, first_epoch, "
          "last_epoch, compile_time_s, ended_by}`"),
    Field("phase1_ended_by_gap", (bool,), "whether the gap rule ended phase 1"),
    Field("labels", (list,), "the labels in class order"),
    Field("train_sample_size", (int,), "examples of the training sample scored in phase 1"),
    Field("truncated_words", (dict,), "NER: words cut off by `--max_seq_length` per split (predicted `O`)",
          required=False),
    Field("dataset", (dict,), "the files read, `{files: {flag: {path, sha256}}}` (`data`, `test_data`): a rerun on "
          "other contents is refused", required=False),
)
STACK_EPOCH = (
    Field("phase", (int,), "1 or 2"),
    Field("train", (dict,), "phase 1: scores on the training sample", required=False),
    Field("gap", NUMBER, "phase 1: training minus validation accuracy", required=False),
    Field("rolled_back", (bool,), "the phase-1 epoch whose head weights the gap rule discarded", required=False),
)

MULTITASK_OWN = (
    Field("learning_rates", (dict,), "the rate of every parameter group"),
    Field("val_is_dev", (bool,), "true when `val` is the dev set (no validation split)"),
    Field("data_notes", (list,), "what the data readers noted (rows moved between splits, ...)"),
    Field("init_from", (str, type(None)), "the run whose weights this one started from"),
)
MULTITASK_EPOCH = (Field("task_loss", (dict,), "each task's mean loss in the epoch (`loss` is their sum)"),)

SENTIMENT_OWN = (Field("distribution", (str, type(None)), "`--distribution`"),)
SENTIMENT_KEYS = ("seed", "config", "epochs", "compile_time_s", "completed", "started_at", "finished_at",
                  "best_epoch", "stopped_early", "early_stopping", "peak_memory_mb", "peak_memory_source",
                  "resident_before_training_mb", "peak_above_start_mb", "resumes")


def method_fields(per_epoch: bool = False) -> tuple:
    """The keys the registered training methods add (`Method.record_fields`): of the run's summary beside `method`,
    or (`per_epoch`) of each epoch's record."""
    from tf_transfer.models import methods

    fields = {}
    for name in methods.names():
        for field in methods.get(name).record_fields:
            if field.per_epoch == per_epoch:
                fields.setdefault(field.name, field)
    return tuple(fields.values())


def _kind(kind: str, core: tuple, own: tuple, epoch_own: tuple) -> Schema:
    """`core` and `own` keys with the methods' keys, epochs of `EPOCH`'s keys with `epoch_own` and the methods'."""
    epoch = EPOCH.with_fields(f"{kind} epoch", *epoch_own, *method_fields(per_epoch=True))
    core = tuple(dataclasses.replace(f, item=epoch) if f.name == "epochs" else f for f in core)
    return Schema(kind, (*core, *method_fields(), *own))


def schema(kind: str) -> Schema:
    """The schema of a kind of run (`KINDS`), with the methods registered now."""
    if kind == "glue":
        return _kind(kind, CORE + TRAINER, GLUE_OWN, GLUE_EPOCH)
    if kind == "stack":
        return _kind(kind, CORE, STACK_OWN, STACK_EPOCH)
    if kind == "multitask":
        return _kind(kind, CORE + TRAINER, MULTITASK_OWN, MULTITASK_EPOCH)
    if kind == "sentiment_bert":  # the work file of one seed: few of the core keys, none from its start
        written = ("seed", "config", "epochs", "compile_time_s", "completed", "started_at")
        core = tuple(f if f.name in written else dataclasses.replace(f, required=False, at_end=False)
                     for f in CORE if f.name in SENTIMENT_KEYS)
        return Schema(kind, (*core, *SENTIMENT_OWN)).with_fields(
            kind, dataclasses.replace(CORE_BY_NAME["epochs"], item=EPOCH))
    raise ValueError(f"no run record of kind {kind!r}: one of {', '.join(KINDS)}")


KINDS = ("glue", "stack", "multitask", "sentiment_bert")


def kind_of(summary: dict) -> Optional[str]:
    """Which kind of run wrote `summary` (None: none of these, or not a run's summary at all)."""
    if not isinstance(summary.get("epochs"), list) or "transformers" in summary:
        return None  # the Hugging Face peer's summaries (they name their `transformers`) are not our runs
    if not isinstance(summary.get("task"), str):
        return "sentiment_bert" if "distribution" in summary else None
    if not isinstance(summary.get("metric"), str):
        return None
    if summary["task"] == "multitask":
        return "multitask"
    return "stack" if "phases" in summary and "head" in summary else "glue"


def read(summary: Optional[dict]) -> Optional[dict]:
    """`summary` as readers see it: with the keys older runs lack filled in (`Field.older`); as it is when it is of
    no known kind (a report skips or names it)."""
    if summary is None:
        return None
    kind = kind_of(summary)
    return schema(kind).read(summary) if kind else summary


def load(path: str) -> dict:
    """The summary in `path` as readers see it (`read`); `record.UnreadableRecord` naming the file when it is not a
    JSON object (truncated, emptied)."""
    return read(record.read_json(path))


def read_summary(output_dir: str) -> Optional[dict]:
    """The run's summary in `output_dir` as readers see it, None when there is none (`record.read_summary`)."""
    return read(record.read_summary(output_dir))


def check(kind: str, summary: dict, path: str, resumed: bool = False) -> None:
    """Raises `record_schema.RecordMismatch` when `summary`, about to be written to `path`, does not match its kind
    (`resumed`: a run started by an older version may lack the keys that came later)."""
    schema(kind).check(summary, path, older=resumed)
