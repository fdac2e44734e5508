"""Step 3 of the checklist, task: one toy run as the runner (`tf_transfer.training.runner`) asks for it: data, model and
feed (`build`), its first `summary.json` (`fresh_summary`) and its scores after each epoch (`evaluate`); each epoch
is one Keras `fit` over the feed (the `Task` default). `run_toy` is the whole run."""

from __future__ import annotations

import numpy as np

from tf_transfer.core import setting_groups
from tf_transfer.training import record, runner
from tf_transfer.training.task import Task


class ToyFeed:
    """The feed protocol (`tf_transfer.data.feeds`) on arrays: batches of 16, reshuffled each epoch."""

    batch_size = 16

    def __init__(self, features, labels, seed: int):
        self.features, self.labels, self.seed = features, labels, seed
        self.num_examples = len(labels)
        self.steps_per_epoch = -(-self.num_examples // self.batch_size)

    def train_batches(self, epoch: int):
        import tensorflow as tf

        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)
        return tf.data.Dataset.from_tensor_slices((self.features[order], self.labels[order])).batch(self.batch_size)

    def warmup_batches(self):
        return self.train_batches(0).take(1)


class ToyTask(Task):
    metric = "accuracy"
    summary_schema = None  # a test's toy: its summary.json is none of `training/run_record.py`'s kinds

    @property
    def loop(self):
        # Its own setting `epochs`, in the group the engine reads.
        return setting_groups.LoopSettings(max_epochs=self.settings.epochs)

    def build(self, strategy) -> None:
        import keras

        settings = self.settings
        keras.utils.set_random_seed(settings.seed)
        features = np.random.default_rng(settings.seed).normal(size=(settings.examples, 4)).astype("float32")
        labels = (features[:, 0] > 0).astype("int32")
        half, three_quarters = settings.examples // 2, 3 * settings.examples // 4
        self.splits = {"val": (features[half:three_quarters], labels[half:three_quarters]),
                       "test": (features[three_quarters:], labels[three_quarters:])}
        self.feed = ToyFeed(features[:half], labels[:half], settings.seed)
        self.model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        self.model.compile(keras.optimizers.Adam(settings.rate),
                           keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        self.optimizer, self.strategy = self.model.optimizer, strategy

    def parameter_table(self):
        return None  # no backbone blocks to count

    def describe(self) -> str:
        return f"rate={self.settings.rate}"

    def fresh_summary(self, table) -> dict:
        settings = self.settings
        return {"task": "toy", "rate": settings.rate, "seed": settings.seed, "metric": self.metric,
                "examples": settings.examples, **record.nothing_trained_yet(settings.to_dict(), self.describe())}

    def evaluate(self):
        def accuracy(split):
            features, labels = self.splits[split]
            return float(np.mean(np.argmax(self.model.predict(features, verbose=0), axis=1) == labels))

        return {"accuracy": accuracy("val")}, {"accuracy": accuracy("test")}


def run_toy(settings, output_dir: str) -> dict:
    return runner.run(ToyTask(settings), output_dir)
