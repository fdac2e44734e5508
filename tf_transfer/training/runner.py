"""The one run sequence every study's task goes through (`tf_transfer.training.task.Task`):

    run(task, output_dir)
      strategy (multi-worker: the workers join first) -> lost workers become one error line
      RunFolder: completed with these settings and data? return it; other ones? refuse; unfinished? resume
      train(task, folder)
        task.build(strategy)            data -> tokens -> backbone from its preset -> model, feed, optimizer
        task.parameter_table()          printed, and in the summary
        folder.start(fresh summary)     or the unfinished run's summary, to continue (each write checked
                                        against the task's kind of run record, `run_record`)
        TensorBoard HParams             task.hparams()
        Engine: for each task.stages()  warm-up, restore the last finished epoch, fit epoch by epoch (a hook
                                        may pause the run: it ends here unfinished, to resume later)
        task.finish(engine)             e.g. an export
        engine.finish()                 summary.json marked completed

Example:

>>> from tf_transfer.training import runner
>>> from tf_transfer.studies.glue.glue_task import GlueTask
>>> summary = runner.run(GlueTask(settings), "/tmp/rte")  # doctest: +SKIP
"""

from __future__ import annotations

from absl import logging

from tf_transfer.core import strategies
from tf_transfer.training import distributed, record
from tf_transfer.training import engine as engine_lib
from tf_transfer.training.engine import Engine
from tf_transfer.training.run_folder import RunFolder


def run(task, output_dir: str, strategy=None, overwrite: bool = False) -> dict:
    """Trains `task` in `output_dir` (resuming an unfinished run of the same settings) and returns the final summary;
    a completed run of the same settings is returned as it is, unless `overwrite`.

    Raises `TransferError` for bad input before anything is written, or (non-finite loss) after the completed
    epochs' summary has been written with `completed: false`. Under `--distribution=multi_worker` the workers join
    first, so that the chief can tell the others what `output_dir` holds; only the chief writes there, the others
    in a temporary folder they remove (docs/distributed.md).
    """
    settings = task.settings
    if strategy is None and settings.distribution == "multi_worker":
        strategy = strategies.make_strategy(settings.distribution)
    with distributed.lost_workers(strategy):
        folder = RunFolder(output_dir, task.compared_settings(), settings.NOT_RESULT_SETTINGS, overwrite,
                           added=task.added_settings, strategy=strategy, data=task.data_hashes())
        try:
            if folder.completed:
                logging.info("%s is already completed; not training again (pass --overwrite to start afresh)",
                             output_dir)
                return folder.existing
            return train(task, folder, strategy)
        finally:
            folder.cleanup()


def train(task, folder: RunFolder, strategy=None) -> dict:
    """`run` once the run folder is known: trains `task` in `folder.path` (`output_dir`, or a non-chief worker's
    temporary folder) and returns the completed summary."""
    task.folder = folder
    folder.kind = task.summary_schema
    task.build(strategy)
    table = task.parameter_table()
    folder.start(task.fresh_summary(table))
    hparams = task.hparams()
    recorder = record.TensorBoardRecorder(folder.path, hparams, task.trial_name()) if hparams is not None else None
    loop = task.loop
    engine = Engine(folder, task.metric, loop.max_epochs, loop.patience, loop.min_delta, recorder, task.strategy)
    with engine:
        for stage in task.stages(engine):
            stage.ended_by = engine.fit(
                task.model, stage.train_epoch, stage.evaluate, optimizer=stage.optimizer,
                until_epoch=stage.until_epoch, stopper=stage.stopper, tags=stage.tags, after_epoch=stage.after_epoch,
                on_best=stage.on_best, steps=stage.steps, examples=stage.examples)
            if stage.ended_by == engine_lib.PAUSE:  # unfinished on purpose: a later run of the folder resumes here
                return engine.summary
        task.finish(engine)
        return engine.finish()
