"""The SavedModel's in-graph tokenizing and packing (`tf_transfer.models.serving`): the ids keras-hub's
preprocessor gives, without keras-hub. The SavedModel itself, served without keras-hub or tf_transfer:
tests/models/test_export.py."""

import numpy as np
import pytest

from tf_transfer.core.errors import TransferError
from tf_transfer.models import serving

from conftest import make_tiny_tokenizer

# Accents, capitals, punctuation runs, CJK characters, control, zero-width and NUL characters (a NUL once ended the
# text in the graph), an empty text, a word longer than the wordpiece limit, and pairs long enough for round-robin
# truncation at 16 tokens.
TEXTS_A = ["The Cat is HAPPY!!", "Café déjà vu, 東京 is big", "what did the man buy ? " * 4, "",
           "a\tdog\u200bruns\x00now", "he said \"yes\" — she ran", "x" * 150 + " the sea"]
TEXTS_B = ["yes", "the dog runs in the house with a big red car and a small blue plane", "no", "Ã©", "i ran",
           "what ?", "thé càt"]


@pytest.mark.parametrize("pair, strip_accents", [(False, False), (True, False), (True, True)])
def test_in_graph_packing_gives_keras_hubs_ids(pair, strip_accents):
    import keras_hub
    import tensorflow as tf

    tokenizer = make_tiny_tokenizer()
    tokenizer.strip_accents = strip_accents  # "thé càt": two words of the vocabulary, or two unknown ones
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=16,
                                                                   truncate="round_robin")
    texts = [TEXTS_A, TEXTS_B] if pair else [TEXTS_A]
    expected = preprocessor(x=tuple(tf.constant(t) for t in texts) if pair else tf.constant(TEXTS_A))
    packer = serving._Packer(preprocessor, ("token_ids", "segment_ids", "padding_mask"))
    packed = packer([tf.constant(t) for t in texts])
    width = packed["token_ids"].shape[1]
    assert width == 16  # the longest rows truncated to the sequence length
    # A batch is padded to its longest row, not to the sequence length: [CLS] the cat [SEP].
    assert packer([tf.constant(["the cat", "a"])] * len(texts))["token_ids"].shape[1] == 4 + pair * 3
    for name, ids in packed.items():
        full = np.asarray(expected[name]).astype(np.int32)
        np.testing.assert_array_equal(ids.numpy(), full[:, :width], err_msg=name)
        assert not full[:, width:].any()  # only padding past the batch's longest row
    assert len(set(map(tuple, packed["token_ids"].numpy().tolist()))) == len(TEXTS_A)  # the texts are told apart
    if pair:  # the accents were stripped, or not, as keras-hub's tokenizer was told
        assert (tokenizer.token_to_id("cat") in packed["token_ids"].numpy()[-1]) == strip_accents


def test_input_names_and_what_is_refused():
    assert serving.input_names(["text"]) == ["text"]
    assert serving.input_names(["Question 1", "question-2"]) == ["Question_1", "question_2"]
    with pytest.raises(TransferError, match="--export_format=onnx: choose one of preset, saved_model"):
        serving.check_format("onnx")
    from tf_transfer.core import family_table

    with pytest.raises(TransferError, match="not as RoBERTa's: export this run with --export_format=preset"):
        serving.check_family(family_table.FAMILIES["RobertaBackbone"])
    serving.check_family(family_table.FAMILIES["DistilBertBackbone"])  # WordPiece, one [SEP]: served
