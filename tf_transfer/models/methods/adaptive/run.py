"""A GLUE run whose frozen prefix grows while it trains: `--method=autofreeze` (AutoFreeze's rule) or
`--method=freezeout` (FreezeOut's schedule), over a frozen-prefix cache that is extended, not rebuilt.

The run starts as a freezing run of `--trainable_layers` (all by default) on tokens. An epoch is cut into segments at
the steps where a decision is due (every `--freeze_interval_steps` for AutoFreeze; each layer's freezing step for
FreezeOut), each segment one Keras `fit` over that part of the epoch's batches. When a decision freezes blocks 0..j
(with the embeddings), every split's cache is built (the first time, from the tokens) or extended (from the previous
prefix's stored outputs through the newly frozen blocks only, in inference mode), and training goes on with the
suffix model (blocks j+1.., pooler, head) on the cache, with the same optimizer (its Adam slots and step counter
continue) and the same weights. Each switch traces the new model's step once per warm-up shape; nothing else
retraces. With `--padding=pack` the caches are built and extended on packed rows and the suffix trains on packed
rows of the same batches, as the tokens did before the first freeze (and as `--cache_frozen` packs), so every step
computes the layout whose padding efficiency `summary.json` records.

What the run records (`summary.json` "freezing", TensorBoard, the final line): each freeze (step, epoch, blocks, the
statistic that decided it, trainable weights after it, the seconds its cache and compilation took), every AutoFreeze
decision's norms, changes and threshold, the time trained at each depth, and how often the step was traced.

Resume: the checkpoint holds every weight of the full classifier (the frozen blocks trained before they froze), the
optimizer and dropout state; the AutoFreeze gradient sums of the unfinished interval are saved beside it
(`freeze-state-epoch<N>.npz`); the freezes are replayed in order (the same cache builds and extensions, so the same
float16 numbers) before training continues.

Layers: this module is in the models layer, and the run is a GLUE task's. Each method's class here (`AutoFreezeRun`,
`FreezeOutRun`: its `trainer`) is a mixin that the GLUE study puts before `GlueTask` (`glue_task.task_for`),
with `tools`: the training layer's and the GLUE task's functions it calls (`glue_task.trainer_tools`), so that
nothing here imports a layer above models.

Example:

>>> settings = GlueSettings(task="sst2", method="autofreeze", preset="all_minilm_l6_v2_en", ...)  # doctest: +SKIP
>>> summary = glue_task.run_glue(settings, "/tmp/af")  # doctest: +SKIP
>>> [event["blocks"] for event in summary["freezing"]["events"]]  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import re
import time

import numpy as np
from absl import logging

from tf_transfer.core.errors import TransferError
from tf_transfer.models.methods.adaptive import decision_loop

STATE = "freeze-state-epoch{epoch}.npz"


def _examples(plan) -> int:
    return int(sum(len(indices) for indices in plan))


class GrowingPrefixRun:
    """Mixed in before `GlueTask`: the run's frozen prefix grows as it trains (see the module's docstring); each
    method's subclass (`AutoFreezeRun`, `FreezeOutRun`, its `trainer`) installs its rule. `tools` (set by the GLUE
    study) holds `warm_up`, `steps_of` and `Stage` (training.engine's and training.task's), `from_chief` and
    `keras_distributed` (training.distributed's), `write_npz_atomic` (training.checkpoints') and `scores`
    (glue_task's)."""

    tools = None

    def build(self, strategy=None) -> None:
        super().build(strategy)
        settings = self.settings
        self.num_blocks = int(self.backbone.num_layers)
        k = settings.trainable_layers
        self.first_block = 0 if k == "all" else self.num_blocks - k
        # `model` stays the full classifier (checkpointed: its frozen blocks trained before they froze; exported);
        # `current` is what trains now, on `current_feed`.
        self.current, self.current_feed, self.optimizer = self.model, self.feed, self.model.optimizer
        self.steps_per_epoch = self.feed.steps_per_epoch
        self.total_steps = self.steps_per_epoch * settings.loop.max_epochs
        self.frozen = -1  # blocks frozen: -1 while the embeddings still train
        self.caches, self.cache_keys, self.global_step, self.engine = None, None, 0, None
        self.decisions = self._decision_loop()
        self.record = self.decisions.record
        self.record.update(phases=[], traces=0, cache_s=0.0, compile_s=0.0)
        self.traced = 0
        self._count_traces(self.model)
        self.decisions.start(self.backbone, self.optimizer, self.strategy)
        self.gradients = self.decisions.gradients  # AutoFreeze's per-block gradient sums; FreezeOut: None

    def _decision_loop(self) -> decision_loop.DecisionLoop:
        """The method's decision loop, of the run's settings (each method's subclass)."""
        raise NotImplementedError

    def _count_traces(self, model) -> None:
        """Counts the traces of `model`'s training step (its Python body runs once per trace and replica of this
        process: a worker of a multi-worker cluster traces only its own)."""
        from tf_transfer.core import strategies

        step, replicas = model.train_step, strategies.local_replicas(self.strategy)

        def counted(data):
            self.traced += 1.0 / replicas
            return step(data)

        model.train_step = counted

    def describe(self) -> str:
        return f"{self.settings.dataset}, --method={self.settings.method} from trainable_layers=" \
               f"{self.settings.trainable_layers}"

    # --- training ------------------------------------------------------------------------------------------------

    def stages(self, engine):
        self.engine = engine
        compile_time_s = self.warm_up()
        last = engine.restore_last(self.model, self.optimizer, compile_time_s=compile_time_s,
                                   **self.resume_facts())
        if last is None:
            engine.summary["compile_time_s"] = compile_time_s
            if self.first_block or self.settings.trainable_layers != "all":
                self._freeze_to(self.first_block, epoch=0, why={"rule": "--trainable_layers"})
        else:
            self._replay(engine.summary.get("freezing") or {}, last)
        yield self.tools.Stage(self.train_epoch, self.evaluate, optimizer=self.optimizer, on_best=self.on_best,
                    after_epoch=self.after_epoch, steps=self.steps_per_epoch, examples=self.feed.num_examples)

    def warm_up(self):
        seconds = self.tools.warm_up(self.current, self.current_feed.warmup_batches(), self.strategy)
        if self.gradients is not None:
            self.gradients.reset()  # the warm-up's steps are undone; so are their gradients
        return seconds

    def _replay(self, saved: dict, last_epoch: int) -> None:
        """Rebuilds the frozen prefix of the run's last finished epoch: its freezes in order, then its state."""
        events = saved.get("events", [])
        self.record.update({k: saved[k] for k in ("events", "decisions", "phases", "previous_norms", "traces",
                                                  "cache_s", "compile_s") if k in saved})
        self.global_step = int(saved.get("global_step", 0))
        for event in events:
            self._freeze_to(event["frozen_blocks"], record=False)
        if self.gradients is not None:
            self.gradients.load(self._load_state(last_epoch))

    def train_epoch(self, epoch: int, progress) -> dict:
        plan = self.feed.plan(epoch)  # the token feed's: the same batches whatever the depth
        done, loss_sum, examples = 0, 0.0, 0
        while done < len(plan):
            stop = min(len(plan), done + self.decisions.steps_to_decision(self.global_step))
            segment = plan[done:stop]
            start = time.perf_counter()
            loss = self._fit(segment, progress, done)
            self._note_phase(time.perf_counter() - start, len(segment))
            loss_sum, examples = loss_sum + loss * _examples(segment), examples + _examples(segment)
            done, self.global_step = stop, self.global_step + len(segment)
            self._decide(epoch)
        self.record.update(global_step=self.global_step, traces=int(round(self.traced)))
        self.engine.summary["freezing"] = self.record
        self._save_state(epoch)
        return {"loss": loss_sum / max(examples, 1), "frozen_blocks": max(self.frozen, 0),
                "trainable_params": self._trainable(), "global_step": self.global_step}

    def _fit(self, segment: list, progress, offset: int) -> float:
        import keras

        class Offset(keras.callbacks.Callback):
            async_safe = True

            def on_train_batch_end(self, batch, logs=None):
                progress.on_train_batch_end(offset + batch, logs)

        dataset = self.current_feed.dataset(segment)
        history = self.current.fit(dataset, epochs=1, verbose=0, shuffle=False, callbacks=[Offset()],
                                 steps_per_epoch=self.tools.steps_of(dataset))
        return float(history.history["loss"][-1])

    def _note_phase(self, seconds: float, steps: int) -> None:
        phases = self.record["phases"]
        if not phases or phases[-1]["frozen_blocks"] != self.frozen:
            phases.append({"frozen_blocks": self.frozen, "from_step": self.global_step, "steps": 0, "train_s": 0.0})
        phases[-1]["steps"] += steps
        phases[-1]["train_s"] += seconds

    def _decide(self, epoch: int) -> None:
        decided = self.decisions.decide(self.global_step, epoch, self.frozen,
                                        # every worker freezes what the chief does
                                        agreed=lambda wanted: self.tools.from_chief(self.strategy, lambda: wanted))
        if decided is not None:
            wanted, why = decided
            self._freeze_to(wanted, epoch=epoch, why=why)

    # --- the growing prefix --------------------------------------------------------------------------------------

    def _freeze_to(self, frozen: int, epoch: int = 0, why: dict = None, record: bool = True) -> None:
        """Freezes the embeddings and blocks 0..frozen-1: caches every split at that depth, trains the suffix."""
        from tf_transfer.models import cached_prefix

        before = self.frozen
        start = time.perf_counter()
        self._grow_caches(before, frozen)
        cache_s = time.perf_counter() - start
        with self.strategy.scope():
            model = cached_prefix.suffix_classifier(self.backbone, self.num_blocks - frozen,
                                                    self.model.get_layer("head"), packed=self._packed)
        self.frozen, self.current = frozen, model
        self._compile_suffix()
        self._count_traces(model)
        compile_s = self.warm_up()
        self.record["cache_s"] += cache_s
        self.record["compile_s"] += compile_s
        if not record:
            return
        event = self.decisions.record_freeze(before, frozen, self.global_step, epoch, why, self._trainable(),
                                             cache_s=cache_s, compile_s=compile_s)
        self._announce(event)

    def _grow_caches(self, before: int, frozen: int) -> None:
        from tf_transfer.data import cache, feeds
        from tf_transfer.models import cached_prefix

        settings, backbone, packed = self.settings, self.backbone, self._packed
        if before < 0:
            prefix = cached_prefix.prefix_model(backbone, self.num_blocks - frozen, packed)
            run = cache.traced_inference(prefix)  # one trace for every split
            caches, keys = {}, {}
            identity = cache.Prefix(settings.model.weights, settings.dataset, frozen, precision=settings.precision,
                                    packed=packed)
            for name, split in self.encoded.items():
                keys[name] = identity.key(name, split) + f"-run{id(self)}"
                caches[name], _, _ = cache.build(prefix, split, keys[name], settings.inputs, run=run, packed=packed)
        else:
            blocks = cached_prefix.blocks_model(backbone, before, frozen, packed=packed)
            run = cache.traced_inference(blocks)
            caches, keys = {}, {}
            for name, cached in self.caches.items():
                keys[name] = f"{self.cache_keys[name]}+{frozen}"
                caches[name], _, _ = cache.extend(blocks, cached, keys[name], settings.inputs, run=run,
                                                  packed=packed)
        for name in self.caches or {}:
            cache.forget(self.cache_keys[name])  # the shallower prefix is not needed again
        self.caches, self.cache_keys = caches, keys
        self.current_feed = feeds.CachedFeed(caches, settings.inputs, settings.runtime.jit, packed=packed)
        self.current_feed.use_strategy(self.strategy)

    @property
    def _packed(self) -> bool:
        """`--padding=pack`: the cache is built and extended on packed rows and the suffix trains on them, as the
        tokens trained before the first freeze (and as `--cache_frozen` packs)."""
        return self.settings.padding == "pack"

    def _compile_suffix(self) -> None:
        # In the strategy's scope, as every model here: the loss tracker `compile` creates is then the strategy's
        # (summed across workers when `fit` reads the epoch's loss), not one worker's own.
        with self.strategy.scope():
            self.current.compile(optimizer=self.optimizer, loss=self.model.loss, jit_compile=self.settings.runtime.jit,
                                 steps_per_execution=1)
        self.tools.keras_distributed(self.current, self.strategy)

    def _trainable(self) -> int:
        return decision_loop.trainable_weights(self.current)

    def evaluate(self):
        scores = self.tools.scores
        test = {name: scores(self.current_feed, self.current, self.task, name) for name in self.test_names}
        if len(test) == 1:
            test = next(iter(test.values()))
        return scores(self.current_feed, self.current, self.task, "validation"), test

    def _announce(self, event: dict) -> None:
        what = (["the embeddings"] if event["embeddings"] else []) + [f"block {b}" for b in event["blocks"]]
        print(f"froze {', '.join(what) or 'nothing new'} at step {event['step']} (epoch {event['epoch']}); "
              f"{self.num_blocks - self.frozen} of {self.num_blocks} blocks still train "
              f"({event['trainable_params']:,} weights); cache {event['cache_s']:.1f} s", flush=True)
        if self.engine is not None and self.engine.recorder is not None:
            self.engine.recorder.scalars(self.global_step, {"freezing/frozen_blocks": self.frozen,
                                                            "freezing/trainable_params": event["trainable_params"]})

    # --- what survives a kill ------------------------------------------------------------------------------------

    def _save_state(self, epoch: int) -> None:
        if self.gradients is None:
            return
        state = self.gradients.state()  # every worker takes part (the sums are all-reduced); the chief writes
        if self.folder is None or not self.folder.chief:
            return
        self.tools.write_npz_atomic(os.path.join(self.folder.path, STATE.format(epoch=epoch)), state)
        for file in glob.glob(os.path.join(self.folder.path, STATE.format(epoch="*"))):
            match = re.search(r"epoch(\d+)\.npz$", file)
            if match and int(match.group(1)) < epoch - 1:
                os.remove(file)

    def _load_state(self, epoch: int):
        if self.folder is None or not self.folder.chief:
            return None
        file = os.path.join(self.folder.path, STATE.format(epoch=epoch))
        if not os.path.exists(file):
            raise TransferError(f"{self.folder.path}: {os.path.basename(file)} (the gradient sums of epoch {epoch}) "
                                "is missing; pass --overwrite to start afresh")
        with np.load(file) as saved:
            return {name: saved[name] for name in saved.files}

    def fresh_summary(self, table: list) -> dict:
        return {**super().fresh_summary(table), "freezing": self.record}

    def finish(self, engine) -> None:
        super().finish(engine)
        engine.summary["freezing"] = self.record
        for file in glob.glob(os.path.join(self.folder.path, STATE.format(epoch="*"))):
            os.remove(file)
        from tf_transfer.data import cache

        for key in (self.cache_keys or {}).values():
            cache.forget(key)
        logging.info("froze %s", [(e["step"], e["frozen_blocks"]) for e in self.record["events"]])


class AutoFreezeRun(GrowingPrefixRun):
    """`--method=autofreeze`: the blocks' gradient sums decide, every `--freeze_interval_steps`."""

    def _decision_loop(self) -> decision_loop.DecisionLoop:
        settings = self.settings
        return decision_loop.AutoFreezeLoop(self.num_blocks, self.total_steps, self.first_block,
                                            settings.min_trainable_layers, settings.freeze_interval_steps,
                                            settings.freeze_percentile)


class FreezeOutRun(GrowingPrefixRun):
    """`--method=freezeout`: each layer freezes at its scheduled step, its rate annealed to zero by then."""

    def _decision_loop(self) -> decision_loop.DecisionLoop:
        settings = self.settings
        return decision_loop.FreezeOutLoop(self.num_blocks, self.total_steps, self.first_block,
                                           settings.min_trainable_layers, settings.freezeout_t0,
                                           settings.freezeout_scale, settings.freezeout_scale_lr)
