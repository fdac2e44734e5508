"""Stack-and-finetune (arXiv 1907.05338): train a head on a frozen BERT, then fine-tune BERT and the head together.

Strategies:
  * `stack_and_finetune`: phase 1 trains only the head (the whole backbone, pooler included, frozen) at
    `phase1_lr`, for `phase1_epochs` or until the head starts to overfit: as soon as an epoch leaves training
    accuracy more than `max_gap` above validation accuracy, phase 1 ends and that epoch's head weights are thrown
    away (the head is restored to what it was before the epoch), except on phase 1's first epoch, which is kept:
    undoing it would hand phase 2 the untrained head, and on a small validation set the gap after one epoch is
    often noise. Phase 2 unfreezes everything, recompiles with a fresh optimizer (no moments carried over from
    phase 1) and trains at `phase2_lr` for the remaining epochs of `max_epochs`.
  * `finetune_only`: phase 2 alone, for `max_epochs`.
  * `stack_only`: phase 1 alone, for `max_epochs` (no gap rule: there is no phase to hand over to).

Training accuracy for the gap rule is measured like validation accuracy (inference mode, no dropout) on a fixed
seeded sample of the training set as large as the validation set, so that the two numbers are comparable; the
running accuracy that Keras reports during an epoch is dropout-noised and averaged over changing weights.

Both phases train through the one runner (`tf_transfer.training.runner`, see `stack_task`): every epoch is
checkpointed and an interrupted run resumes after its last epoch. `precision` sets the backbone's Keras policy, while
heads, logits and losses stay float32; `distribution` names the tf.distribute strategy.

Both phases use BERT's AdamW (`tf_transfer.training.optimizers`: decoupled weight decay 0.01, not on LayerNorm
or bias, gradients clipped to norm 1.0) at a constant rate. `summary.json` has the core trainer's schema, every
epoch marked with its `phase`, plus `phases` (one entry per phase: rate, what trained, epochs, why it ended).

Modules: `stack_settings` (settings, phases), `stack_inputs` (data and scores), `tf_transfer.data.stack_feed`
(batches), `stack_task` (one head's run), this one (a run of one head or an ensemble).

Example:

>>> from tf_transfer.studies.stack import stack_ensemble
>>> from tf_transfer.studies.stack.stack_settings import StackSettings
>>> settings = StackSettings(
...     task="quora", data="../shared/data/cs224n_minbert/quora-dev.csv", head="bimpm",
...     stack_strategy="stack_and_finetune", preset="all_minilm_l6_v2_en", phase1_epochs=1, max_epochs=2,
...     batch_size=16, max_train_examples=256)
>>> summary = stack_ensemble.run_stack(settings, "/tmp/stack")  # doctest: +SKIP
>>> [(e["epoch"], e["phase"], e["val"]["accuracy"]) for e in summary["epochs"]]  # doctest: +SKIP
"""

from __future__ import annotations

import os

from absl import logging

from tf_transfer.core.errors import TransferError
from tf_transfer.studies.stack import stack_inputs, stack_task
from tf_transfer.studies.stack.stack_settings import PAIR_HEADS, StackSettings
from tf_transfer.training import record

ENSEMBLE_FILE = "ensemble.json"


def _check_same_run(existing: dict, config: StackSettings, output_dir: str) -> None:
    """See `record.refuse_other_settings` and `record.refuse_other_data` (the files' SHA-256, where recorded)."""
    record.refuse_other_settings(existing, config.to_dict(), output_dir, config.NOT_RESULT_SETTINGS)
    record.refuse_other_data(existing, stack_inputs.data_hashes(config), output_dir)


def result_path(config: StackSettings, output_dir: str) -> str:
    """Where the run's result goes: `summary.json`, or for an ensemble `ensemble.json`."""
    return os.path.join(output_dir, ENSEMBLE_FILE if config.ensemble else record.SUMMARY)


def completed_result(config: StackSettings, output_dir: str):
    """The result of a completed run of `config` in `output_dir`, or None; `TransferError` if the completed run
    there had other settings (so that a changed command is never answered with an old result)."""
    path = result_path(config, output_dir)
    if not os.path.exists(path):
        return None
    existing = record.read_json(path)  # an unreadable file is one line naming it (a grid sets it aside)
    if not existing.get("completed"):
        return None
    _check_same_run(existing, config, output_dir)
    return existing


def run_stack(config: StackSettings, output_dir: str, overwrite: bool = False, strategy=None) -> dict:
    """Trains every head of `config` (one, or the members of --ensemble) under `strategy` (default: the one
    `config.distribution` names) and returns the result.

    One head: its `summary.json` in `output_dir`. An ensemble: each member's `summary.json` in
    `output_dir/<head>/`, and the averaged probabilities' scores in `output_dir/ensemble.json`.

    A completed run is returned as it is (unless `overwrite`); an unfinished one resumes (see `stack_task`;
    an ensemble's finished members are not trained again) if it has the same settings, else `TransferError`.
    """
    from tf_transfer.core import strategies
    from tf_transfer.training import distributed

    if strategy is None and config.distribution == "multi_worker":
        # The workers join first, so that the chief can tell the others what `output_dir` holds.
        strategy = strategies.make_strategy(config.distribution)
    with distributed.lost_workers(strategy):
        return _run_stack(config, output_dir, overwrite, strategy)


def _run_stack(config: StackSettings, output_dir: str, overwrite: bool, strategy) -> dict:
    """`run_stack` once a multi-worker cluster (if any) has joined: only its chief reads and writes `output_dir`,
    and tells the other workers what it holds (`distributed.from_chief`)."""
    from tf_transfer.core import strategies
    from tf_transfer.training import distributed

    member_dirs = {head: os.path.join(output_dir, head) if config.ensemble else output_dir for head in config.heads}
    chief = strategies.is_chief(strategy)
    existing = None if overwrite else distributed.from_chief(strategy, lambda: _existing(config, output_dir,
                                                                                         member_dirs))
    if existing:
        logging.info("%s is already completed; not training again (pass --overwrite to start afresh)", output_dir)
        return existing
    # An ensemble's members completed before (with their probabilities): the chief's word, the same on every worker.
    finished = [] if overwrite or not config.ensemble else distributed.from_chief(
        strategy, lambda: [head for head in config.heads if _finished_member(member_dirs[head])])

    data = stack_inputs.read_data(config)
    import keras

    from tf_transfer.models import loader

    if strategy is None:
        strategy = strategies.make_strategy(config.distribution)
    if config.batch_size < strategy.num_replicas_in_sync:
        raise TransferError(f"--batch_size={config.batch_size} is smaller than the "
                            f"{strategy.num_replicas_in_sync} replicas of --distribution={config.distribution}")
    # The policy is global in Keras and read when layers are built: set it (float32 included) before loading.
    keras.mixed_precision.set_global_policy(config.precision)
    if chief and config.ensemble and os.path.exists(result_path(config, output_dir)):
        os.remove(result_path(config, output_dir))  # an --overwrite: the old result no longer holds
    loaded, encodings, members = None, {}, {}
    for head_name in config.heads:
        member_dir = member_dirs[head_name]
        if head_name in finished:
            logging.info("ensemble member %s is already completed in %s", head_name, member_dir)
            members[head_name] = None  # read on the chief, which alone writes the ensemble's result
            continue
        keras.utils.set_random_seed(config.seed)
        # Each member starts from the pretrained weights: the preset is loaded afresh for every head.
        with strategy.scope():
            loaded = loader.load_model(config.model, supported=("bert",), purpose="stack-and-finetune")
        pair_head = head_name in PAIR_HEADS
        if pair_head not in encodings:
            encodings[pair_head] = stack_inputs.encode(config, data, loaded.tokenizer, pair_head)
        members[head_name] = stack_task.train_head(config, head_name, data, encodings[pair_head], loaded,
                                                    member_dir, strategy, overwrite=overwrite,
                                                    keep_probabilities=bool(config.ensemble))
    if not config.ensemble:
        return members[config.head][0]

    # The ensemble's result: computed and written by the chief (from the members' files in `output_dir`),
    # handed to the other workers.
    return distributed.from_chief(strategy, lambda: _ensemble_result(config, output_dir, data, loaded, encodings,
                                                                     members, member_dirs))


def _existing(config: StackSettings, output_dir: str, member_dirs: dict):
    """The completed result in `output_dir` (or None), after refusing a member folder with other settings."""
    existing = completed_result(config, output_dir)
    if existing:
        return existing
    for member_dir in member_dirs.values():
        held = record.read_summary(member_dir)
        if held:
            _check_same_run(held, config, member_dir)
    return None


def _finished_member(member_dir: str) -> bool:
    held = record.read_summary(member_dir)
    return bool(held and held.get("completed")
                and os.path.exists(os.path.join(member_dir, stack_task.PROBABILITIES_FILE)))


def _ensemble_result(config: StackSettings, output_dir: str, data, loaded, encodings: dict, members: dict,
                     member_dirs: dict) -> dict:
    """Averages the members' probabilities (a member finished before: from its folder) and writes the result."""
    from tf_transfer.models import loader

    for head_name, member in list(members.items()):
        if member is None:  # finished before this run
            members[head_name] = (record.read_summary(member_dirs[head_name]),
                                  stack_task.load_probabilities(member_dirs[head_name]))
    if not encodings:  # every member had finished before: their labels are still needed for the scores
        loaded = loader.load_model(config.model, supported=("bert",), purpose="stack-and-finetune")
        encodings[False] = stack_inputs.encode(config, data, loaded.tokenizer, False)
    encoded = next(iter(encodings.values()))
    result = {"task": config.task, "heads": list(config.heads), "strategy": config.stack_strategy,
              "preset": config.preset, "seed": config.seed, "precision": config.precision, "metric": config.metric,
              "members": {}, "completed": True, "dataset": {"files": stack_inputs.data_files(config)}}
    for name in [n for n in ("validation", "test") if n in encoded]:
        averaged = stack_inputs.average_probabilities([probabilities[name] for _, probabilities in members.values()])
        result["val" if name == "validation" else "test"] = stack_inputs.score(encoded[name], averaged,
                                                                             data.label_names)
    if "test" not in result:
        result["test"] = None
    for head_name, (summary, _) in members.items():
        last = summary["epochs"][-1]
        result["members"][head_name] = {"summary": os.path.join(head_name, record.SUMMARY),
                                        "final_val": last["val"], "final_test": last["test"]}
    result["config"] = config.to_dict()
    record.write_json_atomic(result_path(config, output_dir), result)
    return result
