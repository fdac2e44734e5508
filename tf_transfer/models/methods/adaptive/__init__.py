"""Training methods decided while training: `--method=autofreeze` (AutoFreeze's rule) and `--method=freezeout`
(FreezeOut's schedule), a growing prefix of blocks frozen (and cached) as the run goes. Everything of theirs is here:

- `autofreeze`, `freezeout`: the two methods of the registry, on the pieces they share (`method`);
- `schedules`: the rule, the schedule and the freeze record as plain numbers (no TensorFlow);
- `decision_loop`: the one decision loop (the rule set up, when a decision is due, what it freezes, the record) that
  `run` and `callbacks` both call;
- `block_gradients` and `layer_rates`: what runs inside the training step (AutoFreeze's gradient sums, FreezeOut's
  annealed rates);
- `run`: the GLUE run whose prefix grows, each method's `trainer`: a class the GLUE study mixes into its task
  (`glue_task.task_for`), handed the training layer's functions it calls, so that this package, in the models
  layer, imports no layer above it (docs/layout.md);
- `callbacks`: the same decision loop as Keras callbacks for a user's own `model.fit` (the Python API's
  `tf_transfer.AutoFreeze` and `tf_transfer.FreezeOut`).

Example:

>>> from tf_transfer.models import methods
>>> methods.get("autofreeze").trainer.__name__
'AutoFreezeRun'
"""
