"""What `python -m tf_transfer.glue` does once its settings are built: the checks that need no TensorFlow (the export
format, the depth against the preset, a user's files), the run folder taken, then the run trained, or a completed
run found again (and exported, with an export folder), and the lines it prints: what was chosen and read, the
method's closing line, and the last line (`done: best epoch 2 of 4, validation accuracy 0.8261, ...`).

Example:

>>> scores_text({"accuracy": 0.86142, "f1": 0.8032})
'accuracy 0.8614, f1 0.8032'
"""

from __future__ import annotations

import os
from typing import Optional

from absl import logging

from tf_transfer.core import strategies
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.glue.glue_settings import GlueSettings
from tf_transfer.training import locks


def run(config: GlueSettings, first_run: Optional[str], output_dir: Optional[str], runs_dir: str,
        overwrite: bool = False, export_dir: Optional[str] = None, export_format: str = "preset") -> None:
    """Trains (or finds, or exports) the run of `config` in `output_dir` (default under `runs_dir`); `first_run`
    is the line naming the defaults a first run took (None: none), said once the folder has not refused the run."""
    from tf_transfer.models import backbones, loader, serving

    serving.check_format(export_format)
    loader.check_depth(config.model)  # from the preset's config, before the data, TensorFlow or the weights
    read = []
    if config.data_spec is not None:  # bad files are one line within a second or two, not after TensorFlow's start
        from tf_transfer.data import user_data

        read = user_data.check_files(config.data_spec, config.skip_bad_rows, config.metric)  # said once, below
    if first_run and not config.model.init_checkpoint:  # a preset no source gives, refused before that line
        backbones.check_preset(config.model.preset)
    output_dir = output_dir or config.default_output_dir(runs_dir)
    logging.set_verbosity(logging.INFO)
    with locks.run_folder(output_dir, config.distribution):  # writable and this command's alone, before TensorFlow
        _train(config, output_dir, [line for line in (first_run, *read) if line], overwrite, export_dir,
               export_format)


def _train(config: GlueSettings, output_dir: str, announced: list, overwrite: bool, export_dir: Optional[str],
           export_format: str) -> None:
    """Trains (or finds, or exports) the run; `announced` (what was chosen and read) is printed once the folder has
    not refused the run, so that a refusal's `error:` line comes alone."""
    from tf_transfer.models import methods
    from tf_transfer.studies.glue import glue_task as study

    # Other settings or other data in a folder: exit 2, never a false "done". Multi-worker runs ask the chief inside
    # run_glue, once every worker has joined (a chief leaving alone would stop the others on the timeout).
    found = (_completed_run(config, output_dir, overwrite, export_dir) if config.distribution != "multi_worker"
             else None)
    for line in announced:
        print(line, flush=True)
    if found is not None:
        results = results_text(found)
        if export_dir:
            summary = study.export_finished(config, output_dir, export_dir, export_format)
            print(f"{output_dir} already holds a completed run; not training again: exported its epoch-"
                  f"{summary['exported']['epoch'] or len(summary['epochs'])} model to {export_dir}"
                  f"{f' ({results})' if results else ''}")
            return
        print(f"{output_dir} already holds a completed run; not training again (--overwrite starts afresh)"
              f"{f': {results}' if results else ''}")
        return
    summary = study.run_glue(config, output_dir, overwrite=overwrite, export_dir=export_dir,
                             keep_weights=True, export_format=export_format)
    closing = methods.get(config.method).closing_line(summary)  # e.g. when each block froze, before the last line
    if closing:
        print(closing)
    if summary["best_epoch"]:
        folder = strategies.results_folder(output_dir, config.distribution)
        print(f"done: {results_text(summary)}; summary in {folder}{not_beaten(summary.get('constant_prediction'))}")


def results_text(summary: dict) -> str:
    """`best epoch 2 of 4, validation accuracy 0.8261, test accuracy 0.8255` of a run's summary (what `done:` and a
    completed run found again say); empty when no epoch was chosen (nothing held out for validation).

    >>> results_text({"best_epoch": 1, "epochs": [{"val": {"accuracy": 0.5}, "test": None}]})
    'best epoch 1 of 1, validation accuracy 0.5000'
    """
    best = summary.get("best_epoch")
    if not best:
        return ""
    scores = summary["epochs"][best - 1]
    test = scores_text(scores.get("test"))
    return (f"best epoch {best} of {len(summary['epochs'])}{still_improving(summary)}, validation "
            f"{scores_text(scores.get('val')) or 'none'}{f', test {test}' if test else ''}")


def still_improving(summary: dict) -> str:
    """What the results add for a run that went to its epoch cap and scored best on validation at its last epoch: it
    was still improving on validation when it stopped. A fact, not a promise of a better test score: on the
    first-run benchmark's STS-B file, where the default scored best at the last of its 5 epochs on every compared
    seed, up to 10 epochs moved the test score by +0.5 [-0.5, +1.4] points for it and -0.1 [-1.4, +1.1] for full
    fine-tuning (benchmarks/LOG.md, 2026-11-29). A run early stopping ended never qualifies: its best epoch is
    `patience` epochs before its last (both count only gains above `min_delta`).

    >>> still_improving({"best_epoch": 5, "epochs": [{}] * 5, "config": {"max_epochs": 5}})
    ' (the last; still improving on validation when --max_epochs stopped it)'
    """
    epochs, cap = len(summary.get("epochs") or []), (summary.get("config") or {}).get("max_epochs")
    if epochs > 1 and cap and epochs == int(cap) and summary.get("best_epoch") == epochs:
        return " (the last; still improving on validation when --max_epochs stopped it)"
    return ""


def _completed_run(config: GlueSettings, output_dir: str, overwrite: bool, export_dir: Optional[str]) -> Optional[dict]:
    """The summary of the completed run of `config` that `output_dir` holds, else None (`TransferError` for another
    run there; a completed run whose kept best weights fail their check is one line too, said as an export's refusal
    with `export_dir`)."""
    from tf_transfer.data import user_data
    from tf_transfer.training import checkpoints, record
    from tf_transfer.training.run_folder import RunFolder

    try:
        found = RunFolder(output_dir, config.to_dict(), config.NOT_RESULT_SETTINGS, overwrite,
                          data=user_data.file_hashes(config.data_spec))
        return found.existing if found.completed else None
    except record.UnreadableRecord as e:
        if not export_dir or os.path.basename(e.path) != checkpoints.BEST:
            raise
        raise TransferError(f"--export_dir: nothing exported: the completed run's best weights {e.path} are "
                            f"unreadable ({e.why}); rerun with --overwrite to train it again") from None


def scores_text(scores: dict, prefix: str = "") -> str:
    """`accuracy 0.8614, f1 0.8032` (4 decimals; MNLI's two dev sets by name); empty for no scores."""
    parts = []
    for name, value in (scores or {}).items():
        if isinstance(value, dict):
            parts.append(scores_text(value, f"{prefix}{name} "))
        elif isinstance(value, (int, float)) and value == value:  # NaN (an undefined correlation) left out
            parts.append(f"{prefix}{name} {value:.4f}")
    return ", ".join(p for p in parts if p)


def not_beaten(constant) -> str:
    """What the final line adds for a run whose best validation score does not beat the constant prediction."""
    if not constant or constant["beaten"]:
        return ""
    prediction = (f"always {constant['prediction']:.3g}" if isinstance(constant["prediction"], float)
                  else f"always {constant['prediction']!r}")
    return (f"; it does NOT beat the constant prediction ({prediction}: {constant['metric']} "
            f"{constant['score']:.3f} on validation): the model learnt nothing usable; more data, epochs, trainable "
            "blocks or another learning rate may help")
