"""--method on the studies with a training loop of their own (stack, multitask, sentiment BERT): what they refuse.
Each study's runs with a method are in its own tests (test_stack.py, test_multitask.py, test_sentiment.py)."""

import pytest

from conftest import run_module
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.multitask.multitask_settings import MultitaskSettings
from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
from tf_transfer.studies.stack.stack_settings import StackSettings

STACK = dict(task="quora", data="pairs.csv", head="linear")


@pytest.mark.parametrize("command, flags", [
    ("tf_transfer.stack", ["--task=quora", "--data=pairs.csv", "--head=linear", "--method=autofreeze"]),
    ("tf_transfer.multitask", ["--data_dir=cs224n", "--method=freezeout"]),
    ("tf_transfer.sentiment", ["--approach=bert", "--data=train.csv", "--bert_mode=unfrozen", "--method=autofreeze"]),
], ids=["stack", "multitask", "sentiment"])
def test_a_method_that_brings_its_own_trainer_is_refused_in_one_line(tmp_path, command, flags):
    """Refused from the settings, before any data is read or model loaded: nothing is written."""
    output_dir = tmp_path / "run"
    done = run_module(command, *flags, f"--output_dir={output_dir}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: --method must be one of freeze, lora, bitfit in the ")
    assert "in the GLUE trainer alone: python -m tf_transfer.glue" in errors[0]
    assert not output_dir.exists()


@pytest.mark.parametrize("make, message", [
    (lambda: StackSettings(**STACK, method="lora", stack_strategy="stack_only"),
     "--method=lora acts in phase 2, which --strategy=stack_only does not have"),
    (lambda: StackSettings(**STACK, method_in_phase1=True), "--method_in_phase1 with --method=freeze would train"),
    (lambda: StackSettings(**STACK, method="bitfit", method_in_phase1=True, stack_strategy="finetune_only"),
     "--strategy=finetune_only has no phase 1"),
    (lambda: StackSettings(**STACK, lora_rank=4), "--lora_rank is for --method=lora, not --method=freeze"),
    (lambda: MultitaskSettings(data_dir="d", method="lora", trainable_layers=0),
     "--method=lora with --trainable_layers=0 trains nothing of the blocks"),
    (lambda: MultitaskSettings(data_dir="d", method="lora", lora_rank=0), "--lora_rank must be at least 1"),
    (lambda: SentimentBertSettings(method="lora"), "--bert_mode=frozen trains the head alone"),
])
def test_a_method_setting_a_study_cannot_use_is_refused(make, message):
    with pytest.raises(TransferError, match=message.replace("(", r"\(")):
        make()
