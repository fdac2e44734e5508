"""The Python route against the command, uncached: `tf_transfer.freeze` / `apply_method`, then Keras' own `compile`
and `fit`, train as `python -m tf_transfer.glue` does (the cached route: test_cached_classifier.py; AutoFreeze:
test_freezing_callbacks.py)."""

import numpy as np
import pytest

import study_runs


def _python_route(settings, method: str, options: dict):
    """`settings`' run from Python: the command's classifier, data and batches (built as `glue_task` builds them,
    under the same seed), the method applied by the public API, one Keras `fit` over both epochs. Returns the
    per-epoch losses and `(validation, dev)` scores after each epoch."""
    import keras

    import tf_transfer
    from tf_transfer.data import feeds, inputs
    from tf_transfer.models import heads, loader
    from tf_transfer.studies.glue import glue_task
    from tf_transfer.training import optimizers

    task, train, validation, tests, _ = glue_task.load_data(settings)
    keras.utils.set_random_seed(settings.seed)
    loaded = loader.load_model(settings.model)
    classifier = heads.build_classifier(loaded.backbone, task.num_labels, settings.dropout,
                                        head=heads.pooled_head(task.num_labels, settings.dropout, loaded.backbone))
    tf_transfer.apply_method(classifier, method, trainable_layers=settings.trainable_layers, **options)
    splits = {"train": train, "validation": validation, **tests}
    feed = feeds.TokenFeed({name: inputs.encode(examples, loaded.tokenizer, settings.max_seq_length)
                            for name, examples in splits.items()}, settings.inputs)
    steps = feed.steps_per_epoch
    loss = (keras.losses.MeanSquaredError() if task.is_regression
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    classifier.compile(optimizer=optimizers.build_optimizer(settings.optimizer, steps * settings.max_epochs), loss=loss)
    # Built before `fit` (as the command's warm-up does): otherwise Keras creates the optimizer's variables while
    # tracing the step and traces it twice, 1.1 of the 2.5 CPU seconds this `fit` took. The numbers are the same.
    classifier.optimizer.build(classifier.trainable_variables)
    scored = []
    score = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: scored.append(
        (glue_task.scores(feed, classifier, task, "validation"), glue_task.scores(feed, classifier, task, "dev"))))
    batches = feed.train_batches(1)
    for epoch in range(2, settings.max_epochs + 1):
        batches = batches.concatenate(feed.train_batches(epoch))
    history = classifier.fit(batches, epochs=settings.max_epochs, steps_per_epoch=steps, shuffle=False, verbose=0,
                             callbacks=[score])
    return history.history["loss"], scored


def _check(command: dict, python_losses: list, python_scores: list) -> None:
    epochs = command["epochs"]
    assert len(epochs) == 2 and epochs[0]["loss"] != epochs[1]["loss"]  # it trained
    np.testing.assert_allclose(python_losses, [epoch["loss"] for epoch in epochs], rtol=1e-5)
    for (val, test), epoch in zip(python_scores, epochs, strict=True):
        assert val == pytest.approx(epoch["val"], rel=1e-5) and test == pytest.approx(epoch["test"], rel=1e-5)


@pytest.mark.xdist_group(study_runs.GROUP)
def test_freezing_from_python_trains_as_the_command_does(one_device_runs):
    """Against the suite's shared one-device GLUE run (tests/study_runs.py: MRPC, the last of two blocks training,
    uncached, clipped, dropout 0), trained once per test process: the per-epoch losses within rtol 1e-5 (float32
    rounding; measured equal bit for bit) and the same validation and dev scores."""
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    settings = GlueSettings(**one_device_runs.specs["glue"])
    assert settings.method == "freeze" and not settings.cache_frozen and settings.trainable_layers == 1
    _check(one_device_runs.run("glue"), *_python_route(settings, "freeze", {}))


@pytest.mark.parametrize("method, options", [("lora", {"rank": 2}), ("bitfit", {})])
def test_lora_and_bitfit_from_python_train_as_the_command_does(tmp_path, glue_dir, one_block_preset, method,
                                                               options):
    """With dropout 0.1: the command's warm-up puts the dropout layers' seed state back, so its epochs draw what
    `fit` draws from the same seed, and the losses agree within rtol 1e-5 (float32 rounding; measured equal bit for
    bit). STS-B, whose scores (Pearson, Spearman) move with any change of the outputs; one block, the cheapest
    preset, in the methods' scope with the embeddings frozen."""
    from tf_transfer.studies.glue import glue_task
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    settings = GlueSettings(**{**study_runs.GLUE, "task": "stsb", "preset": one_block_preset, "data_dir": glue_dir,
                               "dropout": 0.1, "method": method, **{f"{method}_{k}": v for k, v in options.items()}})
    command = glue_task.run_glue(settings, str(tmp_path))
    _check(command, *_python_route(settings, method, options))
