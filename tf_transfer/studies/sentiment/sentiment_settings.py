"""`SentimentBertSettings`: one BERT model of Hart's sentiment study and how it is trained, each setting a flag of
`python -m tf_transfer.sentiment --approach=bert`; what the study compares (`APPROACHES`, `BERT_MODES`).

Example:

>>> from tf_transfer.studies.sentiment.sentiment_settings import SentimentBertSettings
>>> settings = SentimentBertSettings(preset="all_minilm_l6_v2_en", mode="top2")
>>> settings.file_name, settings.epochs
('bert_top2_cls.json', 3)
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from tf_transfer.core import setting_groups
from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.core.settings import RunSettings, setting, take
from tf_transfer.models import freezing, methods
from tf_transfer.models.sentence_features import POOLINGS
from tf_transfer.studies import study_method

APPROACHES = ("sparse", "bert", "report")
BERT_MODES = {"frozen": 0, "unfrozen": freezing.ALL, "top2": 2}

# The paper gives no epoch counts. Fine-tuning: 3, inside BERT's recommended 2-4. Frozen: only the head trains, and
# at the paper's lr of 5e-5 it needs thousands of Adam steps. The paper's head (one logistic layer) on frozen
# all-MiniLM-L6-v2 [CLS] features of 800 SST-2 sentences (25 steps per epoch), mean of 3 seeds: accuracy 0.58 after
# 30 epochs (750 steps), 0.63 after 100, 0.67 after 300, 0.675 after 1,000. 100 epochs of Kaggle's 6,090 training
# tweets are 19,100 steps, past that plateau (a 64-unit ReLU head learns faster: on 1,600 SST-2 sentences 0.70
# after 20 epochs, 0.73 after 50 and 100).
FINE_TUNING_EPOCHS = 3
FROZEN_EPOCHS = 100


def check_choice(flag: str, value, choices) -> None:
    """Raises `TransferError` unless `value` is one of `choices` (absl enums would exit 1 with the usage text)."""
    if value not in choices:
        raise TransferError(f"unknown --{flag}={value!r}: choose one of {', '.join(choices)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SentimentBertSettings(RunSettings):
    """One BERT model of the study and how it is trained; the paper's values where it gives them.

    `mode` is frozen (static features, backbone in inference mode), unfrozen (everything trains) or top2 (the last
    two encoder blocks train); `trainable_layers` (0..L or "all"), when given, overrides it. `hidden_units` 0 is
    the paper's head (one logistic layer on the features); more puts a ReLU layer of that many units before it.
    `seed` seeds the held-out split; run r (from 0) uses seed `seed + r` for the head's initialisation, dropout and
    data order.
    `epochs` defaults to `FINE_TUNING_EPOCHS` when encoder blocks train and `FROZEN_EPOCHS` when only the head does.
    `precision` is a Keras dtype policy for the backbone; the head, its outputs and the loss are float32 under any
    of them. `distribution` only decides where the steps run, so it is not one of the settings runs must share.
    """

    take(vars(), "preset", note="The paper used BERT.")
    mode: str = setting("frozen", "frozen: static features (backbone in inference mode, computed once), only the head "
                                  "trains; unfrozen: everything trains; top2: only the last two encoder blocks (and "
                                  "the head) train (the paper's results table: 'Last Two Layers'; its method section "
                                  "says 'the first two encoders').", flag="bert_mode")
    trainable_layers: Optional[object] = setting(None, "Overrides --bert_mode: train the last k encoder blocks (0 = "
                                                       "frozen, 'all' = unfrozen).")
    # The method's settings (LoRA's rank, ...), each a flag; recorded in the results file's settings and the model's
    # name only for a method other than the default (`study_method.recorded`): older results still match.
    settings_lib.add_fields(vars(), study_method.fields("What of BERT trains, within --bert_mode's blocks (unfrozen "
                                                        "or top2)"))
    pooling: str = setting("cls", "Text vector fed to the head: cls (last block's [CLS] vector), mean (mean over "
                                  "tokens), or last4_concat ([CLS] vectors of the last four hidden states "
                                  "concatenated, the BERT authors' feature-based suggestion).")
    runs: int = setting(10, "BERT runs (seeds) per model on the same split (the paper: 10).")
    take(vars(), "seed", note="Here it also draws the cross-validation folds; BERT run r (from 0) uses seed --seed + "
                              "r for its initialisation, dropout and data order.")
    test_fraction: float = setting(0.2, "Share of rows held out (stratified) to score the BERT models. The paper "
                                        "holds out one fixed split without giving its size; 0.2 is our choice.")
    epochs: Optional[int] = setting(
        None, "BERT training epochs per run; the paper does not say. Default 3 when encoder blocks train (BERT's "
              "recommended 2-4) and 100 for frozen, where only the head trains and at lr 5e-5 needs thousands of "
              "steps (100 epochs of Kaggle's 6,090 training tweets are 19,100; on a smaller file give more).")
    take(vars(), "batch_size", note="The paper does not say; 32 is one of BERT's recommended values.")
    take(vars(), "lr", default=5e-5, why="The paper: 5e-5.")
    hidden_units: int = setting(
        0, "0: the paper's head, BERT's features into a single dense layer with a logistic activation (one sigmoid "
           "unit; a softmax layer for more than two labels), i.e. logistic regression as for the sparse features. "
           "N > 0: a dense ReLU layer of N units before it (e.g. 64, the head of the results committed before the "
           "paper's head could be run).")
    take(vars(), "max_seq_length", note="Longer texts are cut, and the results file counts the texts that fill the "
                                        "budget.")
    take(vars(), "precision", note="mixed_float16 scales the loss. Part of the settings a rerun must match.")
    take(vars(), "distribution", note="For --approach=bert. Not part of the settings a rerun must match.")

    CHECKS: ClassVar[dict] = {
        **settings_lib.CHECKS,
        "runs": (settings_lib.at_least(1), "must be at least 1"),
        "test_fraction": (settings_lib.in_range(0.0, 1.0, low_open=True), "must be between 0 and 1"),
        "epochs": (settings_lib.at_least(1), "must be at least 1"),
        "hidden_units": (settings_lib.at_least(0), "must be 0 (the paper's logistic layer) or more"),
        "max_seq_length": (settings_lib.at_least(4), "must be at least 4"),
        **study_method.checks("the sentiment study"),
    }
    NOT_RESULT_SETTINGS: ClassVar[tuple] = ("distribution",)
    # The group settings not taken have their group's default (`tf_transfer.core.setting_groups`), unused here:
    # sentiment_bert trains with plain Adam at --lr (the paper's), not the optimizer group, on every row of its
    # training split (--test_fraction is held out, no validation split: nothing stops early), and scores at its own
    # INFERENCE_BATCH_SIZE; a bad row is refused, naming it.

    def __post_init__(self):
        check_choice("bert_mode", self.mode, tuple(BERT_MODES))
        check_choice("pooling", self.pooling, POOLINGS)
        if self.trainable_layers is not None and self.trainable_layers != "":
            self._set("trainable_layers", freezing.parse_trainable_layers(self.trainable_layers))
        else:
            self._set("trainable_layers", None)
        if self.epochs is None:
            self._set("epochs", FROZEN_EPOCHS if self.k == 0 else FINE_TUNING_EPOCHS)
        study_method.normalise(self)
        super().__post_init__()

    def check_together(self) -> list:
        return [(self.method == methods.DEFAULT or self.k != 0,
                 f"--method={self.method} trains inside BERT's blocks, and --bert_mode=frozen trains the head alone "
                 "on static features: give --bert_mode=unfrozen or top2 (or --trainable_layers=k)"),
                *study_method.rules(self, self.k)]

    @property
    def loop(self) -> setting_groups.LoopSettings:
        """`epochs` every run trains; no validation split, so nothing stops early."""
        return setting_groups.view(self, setting_groups.LoopSettings, max_epochs=self.epochs)

    @property
    def model(self) -> setting_groups.ModelSettings:
        """The blocks `k` trains, at the preset's own dropout: the paper names none, and every sentiment run so far
        took the preset's (the group's 0.1 is BERT's, which the other studies set)."""
        return setting_groups.view(self, setting_groups.ModelSettings, trainable_layers=self.k, dropout=None)

    @property
    def k(self):
        """Encoder blocks trained, counted from the top: 0 (frozen), an integer, or "all"."""
        return BERT_MODES[self.mode] if self.trainable_layers is None else self.trainable_layers

    @property
    def model_name(self) -> str:
        k = self.k
        blocks = "frozen" if k == 0 else "unfrozen" if k == freezing.ALL else f"top{k}"
        return study_method.name_part(self) + blocks  # e.g. lora_r8_unfrozen; the default method adds nothing

    @property
    def stem(self) -> str:
        """The model's name in file names: its results, its work folder, its TensorBoard folder."""
        return f"bert_{self.model_name}_{self.pooling}"

    @property
    def file_name(self) -> str:
        return f"{self.stem}.json"

    @property
    def work_name(self) -> str:
        """The run folder of the seed in training (its finished epochs and last checkpoint)."""
        return f"{self.stem}.in_progress"

    def comparable(self) -> dict:
        """The settings that runs must share to be merged into one file (all but the number of runs and where the
        steps run)."""
        return {"preset": self.preset, "model": self.model_name, "trainable_layers": self.k,
                "pooling": self.pooling, "split_seed": self.seed, "test_fraction": self.test_fraction,
                "epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "hidden_units": self.hidden_units, "max_seq_length": self.max_seq_length,
                "precision": self.precision, **study_method.recorded(self)}


study_method.follow(SentimentBertSettings)  # a method registered later brings its settings
