"""Google's original TensorFlow 1 BERT checkpoints (google-research/bert) in and out of keras-hub's `BertBackbone`.

`load_tf1_bert` takes what `run_classifier.py` takes (`--init_checkpoint=.../bert_model.ckpt`, `--bert_config_file`,
`--vocab_file`), builds the matching `keras_hub.models.BertBackbone` and `BertTokenizer`, and copies every encoder
variable across. `save_tf1_bert` writes a backbone back in exactly that layout (name-based TF1 checkpoint, plain
names such as `bert/encoder/layer_0/attention/self/query/kernel`, plus `bert_config.json` and `vocab.txt`).

Layout. TF1 BERT and Keras both store dense kernels as [in, out], so no transpose is needed (the Hugging Face
converter in keras-hub transposes because torch stores [out, in]). Only the attention projections change shape:
keras-hub's `EinsumDense` keeps the heads as an axis, and BERT splits a [hidden] vector into heads head-major
(`reshape(..., [heads, head_dim])`), so query/key/value kernels [hidden, hidden] are reshaped to [hidden, heads,
head_dim], their biases [hidden] to [heads, head_dim], and the attention output kernel [hidden, hidden] to [heads,
head_dim, hidden]. Every other variable keeps its shape.

What is checked on load: the three files exist; the config has every field the model needs, `hidden_act` is "gelu"
and `hidden_size` divides into heads; every backbone weight gets exactly one checkpoint variable of exactly the
shape the config implies (a missing variable or a wrong shape raises `TransferError` naming the variable, the file
and the expected and found shapes); every variable under `bert/` is used (an extra one, e.g. a 13th layer, means the
config does not match the checkpoint). Variables outside `bert/` (the pre-training heads `cls/...`, `global_step`, a
fine-tuned classifier's `output_weights`) and optimizer slots (`.../adam_m`, `.../adam_v`) are not part of the
encoder; they are skipped and counted in `LoadedPreset.source`. Position embeddings and the vocabulary are never cut.

Activation. Google's `modeling.py` calls its "gelu" the tanh approximation,
`0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))`, and keras-hub's `BertBackbone` builds every
`TransformerEncoder` with `activation=gelu_approximate` (`keras.activations.gelu(x, approximate=True)`), the same
formula. Layer-norm epsilon is 1e-12 in both, and both mask only padded keys. So a loaded backbone computes what
Google's BERT computes, up to float32 rounding: there is no activation approximation to account for. (This is
verified on load: if a future keras-hub switched to the exact erf GELU, loading raises instead of silently computing
something slightly different.) Note that Hugging Face's `hidden_act: "gelu"` is the exact erf form; keras-hub uses
the tanh form for those checkpoints too, which is a keras-hub matter and does not affect TF1 checkpoints.

Tokenizer. Google's `do_lower_case=True` lowercases and strips accents; keras-hub's `BertTokenizer(lowercase=True)`
only lowercases, so `strip_accents` is set to `lowercase` here to tokenize as Google does ("Café" -> "cafe").

Example (a tiny random backbone, written and read back):

>>> import os, shutil, tempfile
>>> import keras_hub
>>> from tf_transfer.models import tf1_checkpoint
>>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat"]
>>> backbone = keras_hub.models.BertBackbone(vocabulary_size=7, num_layers=1, num_heads=2, hidden_dim=8,
...                                          intermediate_dim=16, max_sequence_length=16)
>>> folder = tempfile.mkdtemp()
>>> files = tf1_checkpoint.save_tf1_bert(backbone, os.path.join(folder, "bert_model.ckpt"), vocab=vocab)
>>> loaded = tf1_checkpoint.load_tf1_bert(files["checkpoint"], files["config"], files["vocab"])
>>> loaded.backbone.num_layers, loaded.tokenizer.vocabulary_size()
(1, 7)
>>> shutil.rmtree(folder)
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Optional, Sequence, Union

import numpy as np
from absl import logging

from tf_transfer.models.backbones import LoadedPreset
from tf_transfer.core.errors import TransferError

# bert_config.json fields the backbone is built from (dropout comes from `dropout=` or the two *_prob fields).
_REQUIRED_INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                        "max_position_embeddings", "type_vocab_size")
# Google BERT's LayerNorm (tf.contrib.layers.layer_norm) epsilon.
_GOOGLE_LAYER_NORM_EPSILON = 1e-12
# Names Google's AdamWeightDecayOptimizer gives its slots ("<variable>/adam_m", "<variable>/adam_v").
_OPTIMIZER_SLOT = re.compile(r"/(adam_m|adam_v|Adam|Adam_1|Momentum)$")
_CHECKPOINT_FILE_SUFFIX = re.compile(r"^(.*)\.(index|meta|data-\d{5}-of-\d{5})$")


def google_gelu(x):
    """The activation Google's `modeling.py` calls "gelu" (the tanh approximation), in NumPy."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def weight_table(backbone) -> list:
    """`[(tf1_name, keras_variable, tf1_shape)]` for every weight of a keras-hub `BertBackbone`.

    `tf1_shape` is the shape Google's BERT gives the variable; the Keras value is the same array reshaped (see the
    module docstring for why a reshape, and no transpose, is right).
    """
    hidden, inter = backbone.hidden_dim, backbone.intermediate_dim
    table = [
        ("bert/embeddings/word_embeddings", backbone.get_layer("token_embedding").embeddings,
         (backbone.vocabulary_size, hidden)),
        ("bert/embeddings/position_embeddings", backbone.get_layer("position_embedding").position_embeddings,
         (backbone.max_sequence_length, hidden)),
        ("bert/embeddings/token_type_embeddings", backbone.get_layer("segment_embedding").embeddings,
         (backbone.num_segments, hidden)),
        ("bert/embeddings/LayerNorm/gamma", backbone.get_layer("embeddings_layer_norm").gamma, (hidden,)),
        ("bert/embeddings/LayerNorm/beta", backbone.get_layer("embeddings_layer_norm").beta, (hidden,)),
    ]
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attention = block._self_attention_layer
        prefix = f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            dense = getattr(attention, f"{part}_dense")
            table += [(f"{prefix}/attention/self/{part}/kernel", dense.kernel, (hidden, hidden)),
                      (f"{prefix}/attention/self/{part}/bias", dense.bias, (hidden,))]
        table += [
            (f"{prefix}/attention/output/dense/kernel", attention.output_dense.kernel, (hidden, hidden)),
            (f"{prefix}/attention/output/dense/bias", attention.output_dense.bias, (hidden,)),
            (f"{prefix}/attention/output/LayerNorm/gamma", block._self_attention_layer_norm.gamma, (hidden,)),
            (f"{prefix}/attention/output/LayerNorm/beta", block._self_attention_layer_norm.beta, (hidden,)),
            (f"{prefix}/intermediate/dense/kernel", block._feedforward_intermediate_dense.kernel, (hidden, inter)),
            (f"{prefix}/intermediate/dense/bias", block._feedforward_intermediate_dense.bias, (inter,)),
            (f"{prefix}/output/dense/kernel", block._feedforward_output_dense.kernel, (inter, hidden)),
            (f"{prefix}/output/dense/bias", block._feedforward_output_dense.bias, (hidden,)),
            (f"{prefix}/output/LayerNorm/gamma", block._feedforward_layer_norm.gamma, (hidden,)),
            (f"{prefix}/output/LayerNorm/beta", block._feedforward_layer_norm.beta, (hidden,)),
        ]
    pooler = backbone.get_layer("pooled_dense")
    table += [("bert/pooler/dense/kernel", pooler.kernel, (hidden, hidden)),
              ("bert/pooler/dense/bias", pooler.bias, (hidden,))]

    # The table must cover the backbone exactly: a weight keras-hub adds in a later version would otherwise keep its
    # random initial value without anyone noticing.
    covered = {id(variable) for _, variable, _ in table}
    uncovered = [w.path for w in backbone.weights if id(w) not in covered]
    if uncovered or len(covered) != len(table):
        raise TransferError(f"this keras-hub BertBackbone has weights with no TF1 BERT counterpart ({uncovered}); "
                            "TF1 checkpoints are supported for keras-hub 0.32's BertBackbone layout")
    for name, variable, tf1_shape in table:
        if int(np.prod(variable.shape)) != int(np.prod(tf1_shape)):
            raise TransferError(f"internal layout mismatch for {name}: Keras {tuple(variable.shape)} vs {tf1_shape}")
    return table


def check_matches_google_bert(backbone) -> None:
    """Raises TransferError unless every block uses Google's tanh GELU and LayerNorm epsilon 1e-12."""
    probe = np.linspace(-6.0, 6.0, 49, dtype=np.float32)
    layer_norms = [backbone.get_layer("embeddings_layer_norm")]
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        # Compared numerically rather than by function identity, so a renamed but equal function still passes; the
        # exact erf GELU differs from the tanh form by up to ~5e-4 on this range, far above the 1e-6 tolerance.
        found = np.asarray(block.activation(probe), np.float64)
        if not np.allclose(found, google_gelu(probe), atol=1e-6, rtol=0):
            raise TransferError(f"transformer_layer_{i} of this keras-hub BertBackbone does not use Google BERT's "
                                "tanh-approximated gelu; a TF1 checkpoint would compute different outputs")
        layer_norms += [block._self_attention_layer_norm, block._feedforward_layer_norm]
    for layer_norm in layer_norms:
        if layer_norm.epsilon != _GOOGLE_LAYER_NORM_EPSILON:
            raise TransferError(f"{layer_norm.name} has epsilon {layer_norm.epsilon}, Google BERT uses 1e-12")


# --------------------------------------------------------------------------------------------------------------
# Loading


def _resolve_checkpoint(path: Optional[str]) -> str:
    """The checkpoint prefix (the path without `.index`) for a prefix, one of its files, or a folder."""
    example = "--init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt (the prefix of bert_model.ckpt.index)"
    if not path:
        raise TransferError(f"no TF1 checkpoint given: pass {example}")
    if os.path.isdir(path):
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(path)  # a training folder with a `checkpoint` state file
        if latest:
            return latest
        indexes = sorted(glob.glob(os.path.join(path, "*.index")))
        if len(indexes) == 1:
            return indexes[0][: -len(".index")]
        raise TransferError(f"{path} is a folder with {len(indexes)} checkpoints (*.index files) and no `checkpoint` "
                            f"file: pass the prefix of one, e.g. {example}")
    match = _CHECKPOINT_FILE_SUFFIX.match(path)
    if match and not os.path.isfile(path + ".index"):
        path = match.group(1)  # bert_model.ckpt.index or .data-00000-of-00001 given: the prefix is what TF reads
    if not os.path.isfile(path + ".index"):
        raise TransferError(f"no TF1 checkpoint at {path} ({path}.index not found): pass {example}")
    return path


def _require_file(path: Optional[str], flag: str, name: str, checkpoint: str) -> str:
    sibling = os.path.join(os.path.dirname(checkpoint), name)
    hint = f"pass --{flag}={sibling}" if os.path.isfile(sibling) else f"pass --{flag}=<folder>/{name} (it ships " \
                                                                      "with the checkpoint)"
    if not path:
        raise TransferError(f"no --{flag} given for TF1 checkpoint {checkpoint}: {hint}")
    if not os.path.isfile(path):
        raise TransferError(f"--{flag} {path} does not exist: {hint}")
    return path


def read_bert_config(config_file: str) -> dict:
    """Reads and checks a Google `bert_config.json`; returns it as a dict."""
    try:
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise TransferError(f"could not read BERT config {config_file}: {e}") from None
    if not isinstance(config, dict):
        raise TransferError(f"BERT config {config_file} is not a JSON object")
    missing = [key for key in _REQUIRED_INT_FIELDS + ("hidden_act",) if key not in config]
    if missing:
        raise TransferError(f"BERT config {config_file} lacks {', '.join(missing)}: pass the bert_config.json that "
                            "came with the checkpoint")
    for key in _REQUIRED_INT_FIELDS:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise TransferError(f"BERT config {config_file}: {key} must be a positive integer, found {value!r}")
    if config["hidden_act"] != "gelu":
        raise TransferError(f"BERT config {config_file}: hidden_act is {config['hidden_act']!r}; keras-hub's "
                            "BertBackbone only computes Google BERT's \"gelu\"")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise TransferError(f"BERT config {config_file}: hidden_size {config['hidden_size']} is not divisible by "
                            f"num_attention_heads {config['num_attention_heads']}")
    return config


def _dropout_from_config(config: dict, config_file: str) -> float:
    # keras-hub has one dropout rate for both places BERT applies dropout; refuse to pick one of two different rates.
    rates = {key: config.get(key) for key in ("hidden_dropout_prob", "attention_probs_dropout_prob")}
    if any(not isinstance(rate, (int, float)) or isinstance(rate, bool) for rate in rates.values()):
        raise TransferError(f"BERT config {config_file} lacks a numeric hidden_dropout_prob and "
                            "attention_probs_dropout_prob: pass dropout= (--dropout)")
    if rates["hidden_dropout_prob"] != rates["attention_probs_dropout_prob"]:
        raise TransferError(f"BERT config {config_file} has two dropout rates {rates}; keras-hub uses one for both: "
                            "pass dropout= (--dropout)")
    return float(rates["hidden_dropout_prob"])


def _check_vocabulary(tokenizer, config: dict, vocab_file: str, config_file: str, lowercase: bool) -> None:
    size = tokenizer.vocabulary_size()
    if size > config["vocab_size"]:
        # Token ids past the embedding table would fail (CPU) or silently embed as zeros (GPU).
        raise TransferError(f"vocabulary {vocab_file} has {size} tokens but {config_file} has vocab_size "
                            f"{config['vocab_size']}: pass the vocab.txt that came with the checkpoint")
    if size < config["vocab_size"]:
        logging.warning("vocabulary %s has %d tokens, %s has vocab_size %d: embedding rows %d..%d are never used",
                        vocab_file, size, config_file, config["vocab_size"], size, config["vocab_size"] - 1)
    words = [t for t in tokenizer.get_vocabulary() if not (t.startswith("[") and t.endswith("]"))]
    cased = sum(any(c.isupper() for c in t) for t in words)
    # An uncased vocabulary has no capitals; lowercasing a cased one makes its capitalised entries unreachable, and
    # not lowercasing for an uncased one turns capitalised words into [UNK]. Google checks this by checkpoint name.
    if lowercase and cased > 0.01 * max(len(words), 1):
        logging.warning("vocabulary %s has %d capitalised tokens (a cased model) but lowercase=True", vocab_file, cased)
    if not lowercase and cased == 0 and words:
        logging.warning("vocabulary %s has no capitalised tokens (an uncased model) but lowercase=False", vocab_file)


def _summarise_unused(names: Sequence[str]) -> str:
    groups: dict = {}
    for name in names:
        key = "optimizer slots" if _OPTIMIZER_SLOT.search(name) else name.split("/")[0] + ("/" if "/" in name else "")
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(f"{key} ({count})" for key, count in sorted(groups.items()))


def load_tf1_bert(init_checkpoint: str, bert_config_file: str, vocab_file: str, dropout: Optional[float] = None,
                  lowercase: bool = True) -> LoadedPreset:
    """Builds a keras-hub BERT backbone and tokenizer from a Google TF1 BERT checkpoint.

    Args:
      init_checkpoint: the checkpoint prefix (`.../bert_model.ckpt`), one of its files, or a folder holding one.
      bert_config_file: Google's `bert_config.json` for that checkpoint.
      vocab_file: its `vocab.txt`.
      dropout: dropout rate for the backbone; by default the config's (both rates must then be equal).
      lowercase: lowercase and strip accents, as Google's `--do_lower_case` (True for "uncased" checkpoints).

    Returns:
      `LoadedPreset(backbone, tokenizer, source)`; `source` names the files and the variables that were skipped.

    Raises:
      TransferError: a missing file, a config that does not fit the checkpoint, or a missing or misshapen variable.

    Example (with `files` from `save_tf1_bert`, see the module docstring):

    >>> loaded = load_tf1_bert("uncased_L-12_H-768_A-12/bert_model.ckpt", "uncased_L-12_H-768_A-12/bert_config.json",
    ...                        "uncased_L-12_H-768_A-12/vocab.txt", dropout=0.1)  # doctest: +SKIP
    >>> loaded.backbone.num_layers  # doctest: +SKIP
    12
    """
    import keras_hub

    prefix = _resolve_checkpoint(init_checkpoint)
    config_file = _require_file(bert_config_file, "bert_config_file", "bert_config.json", prefix)
    vocab_file = _require_file(vocab_file, "vocab_file", "vocab.txt", prefix)
    config = read_bert_config(config_file)
    rate = _dropout_from_config(config, config_file) if dropout is None else float(dropout)
    try:
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=lowercase, strip_accents=lowercase)
    except (ValueError, OSError, UnicodeDecodeError) as e:  # a special token such as [CLS] is missing, or bad bytes
        raise TransferError(f"could not use vocabulary {vocab_file}: {str(e).strip().splitlines()[0]}") from None
    _check_vocabulary(tokenizer, config, vocab_file, config_file, lowercase)
    reader, shapes = _read_checkpoint(prefix)

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], dropout=rate,
        max_sequence_length=config["max_position_embeddings"], num_segments=config["type_vocab_size"])
    check_matches_google_bert(backbone)
    table = weight_table(backbone)

    unused = _check_fits(table, shapes, prefix, config, config_file)
    for name, variable, _ in table:
        value = reader.get_tensor(name)
        if not np.issubdtype(value.dtype, np.floating):
            raise TransferError(f"variable {name} in checkpoint {prefix} has dtype {value.dtype}, expected a float")
        variable.assign(np.reshape(value, variable.shape).astype(variable.dtype))

    if unused:
        logging.info("TF1 checkpoint %s: %d variables are not part of the encoder and were skipped: %s", prefix,
                     len(unused), ", ".join(unused))
    skipped = f"; skipped (not part of the encoder): {_summarise_unused(unused)}" if unused else ""
    source = (f"TF1 checkpoint {os.path.abspath(prefix)} ({len(table)} variables; config "
              f"{os.path.abspath(config_file)}; vocab {os.path.abspath(vocab_file)}){skipped}")
    return LoadedPreset(backbone, tokenizer, source)


def _read_checkpoint(prefix: str):
    """The checkpoint's reader and `{name: shape}`."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        return reader, reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as e:
        raise TransferError(f"could not read TF1 checkpoint {prefix}: {str(e).strip().splitlines()[0]} (the .index "
                            "and .data-* files must be complete and in the same folder)") from None


def _check_fits(table: list, shapes: dict, prefix: str, config: dict, config_file: str) -> list:
    """Checks every variable before anything is assigned, reporting the first problem plus how many more there
    are; returns the checkpoint's variables that are not the encoder's (skipped)."""
    dims = ", ".join(f"{key}={config[key]}" for key in _REQUIRED_INT_FIELDS)
    problems = []
    for name, _, expected in table:
        if name not in shapes:
            problems.append(f"variable {name} (expected shape {list(expected)}) is missing from checkpoint {prefix}")
        elif tuple(shapes[name]) != expected:
            problems.append(f"variable {name} in checkpoint {prefix} has shape {list(shapes[name])}, but "
                            f"{config_file} ({dims}) implies {list(expected)}")
    used = {name for name, _, _ in table}
    unused = sorted(set(shapes) - used)
    extra = [name for name in unused if name.startswith("bert/") and not _OPTIMIZER_SLOT.search(name)]
    problems += [f"variable {name} {list(shapes[name])} in checkpoint {prefix} has no place in the backbone "
                 f"{config_file} describes ({dims})" for name in extra]
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise TransferError(f"{problems[0]}{more}: pass the bert_config.json that came with this checkpoint")
    return unused


# --------------------------------------------------------------------------------------------------------------
# Saving


def bert_config_for(backbone) -> dict:
    """The Google `bert_config.json` contents describing a keras-hub `BertBackbone`."""
    return {
        "attention_probs_dropout_prob": float(backbone.dropout),
        "hidden_act": "gelu",
        "hidden_dropout_prob": float(backbone.dropout),
        "hidden_size": backbone.hidden_dim,
        "initializer_range": 0.02,  # keras-hub's bert_kernel_initializer stddev, as Google's default
        "intermediate_size": backbone.intermediate_dim,
        "max_position_embeddings": backbone.max_sequence_length,
        "num_attention_heads": backbone.num_heads,
        "num_hidden_layers": backbone.num_layers,
        "type_vocab_size": backbone.num_segments,
        "vocab_size": backbone.vocabulary_size,
    }


def save_tf1_bert(backbone, checkpoint_prefix: str, config_file: Optional[str] = None,
                  vocab: Union[None, str, Sequence[str], object] = None) -> dict:
    """Writes `backbone` as a Google TF1 BERT checkpoint (what `load_tf1_bert` and google-research/bert read).

    The checkpoint is name-based (a `tf.compat.v1.train.Saver` in a graph), so its variables have Google's plain
    names and shapes, e.g. `bert/encoder/layer_0/attention/self/query/kernel` [hidden, hidden], with no object-graph
    `/.ATTRIBUTES/VARIABLE_VALUE` suffixes, no optimizer slots and no `global_step`.

    Args:
      backbone: a keras-hub `BertBackbone`.
      checkpoint_prefix: e.g. `out/bert_model.ckpt`; writes `.index` and `.data-00000-of-00001` files.
      config_file: where to write `bert_config.json`; by default next to the checkpoint.
      vocab: optional vocabulary to write as `vocab.txt` next to the checkpoint: a list of tokens, a tokenizer with
        `get_vocabulary()`, or a path to an existing vocab file.

    Returns:
      `{"checkpoint": prefix, "config": path, "vocab": path or None}`.

    Example:

    >>> files = save_tf1_bert(backbone, "out/bert_model.ckpt", vocab=tokenizer)  # doctest: +SKIP
    >>> sorted(os.listdir("out"))  # doctest: +SKIP
    ['bert_config.json', 'bert_model.ckpt.data-00000-of-00001', 'bert_model.ckpt.index', 'vocab.txt']
    """
    import keras_hub
    import tensorflow as tf

    if not isinstance(backbone, keras_hub.models.BertBackbone):
        raise TransferError(f"save_tf1_bert needs a keras_hub.models.BertBackbone, got {type(backbone).__name__}")
    check_matches_google_bert(backbone)
    arrays = {name: np.reshape(np.asarray(variable.numpy(), np.float32), shape)
              for name, variable, shape in weight_table(backbone)}

    folder = os.path.dirname(os.path.abspath(checkpoint_prefix))
    os.makedirs(folder, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        # Values are fed through placeholders so they are not baked into the graph as constants (a GraphDef is
        # limited to 2 GB, and BERT-large's weights are 1.3 GB).
        feeds, variables = {}, {}
        for name, value in arrays.items():
            placeholder = tf.compat.v1.placeholder(tf.float32, value.shape)
            variables[name] = tf.compat.v1.Variable(placeholder, name=name)
            feeds[placeholder] = value
        saver = tf.compat.v1.train.Saver(var_list=variables, sharded=False,
                                         write_version=tf.compat.v1.train.SaverDef.V2)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.variables_initializer(list(variables.values())), feed_dict=feeds)
            # No .meta graph and no `checkpoint` state file: Google's released folders are read by prefix alone.
            saver.save(session, os.path.abspath(checkpoint_prefix), write_meta_graph=False, write_state=False)

    config_file = config_file or os.path.join(folder, "bert_config.json")
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(bert_config_for(backbone), f, indent=2, sort_keys=True)
        f.write("\n")
    vocab_file = _write_vocab(vocab, backbone, folder) if vocab is not None else None
    return {"checkpoint": checkpoint_prefix, "config": config_file, "vocab": vocab_file}


def _write_vocab(vocab, backbone, folder: str) -> str:
    """Writes `vocab` (tokens, a tokenizer, or a vocab file's path) as `folder/vocab.txt`; returns its path."""
    if isinstance(vocab, str):
        with open(vocab, encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
    elif hasattr(vocab, "get_vocabulary"):
        tokens = list(vocab.get_vocabulary())
    else:
        tokens = list(vocab)
    if len(tokens) > backbone.vocabulary_size:
        raise TransferError(f"vocabulary has {len(tokens)} tokens, more than the backbone's "
                            f"{backbone.vocabulary_size} embedding rows")
    vocab_file = os.path.join(folder, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.write("".join(f"{token}\n" for token in tokens))
    return vocab_file
