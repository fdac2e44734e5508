"""The frozen-prefix cache: run the frozen embeddings and blocks once per split, train only what is above them.

With `trainable_layers=k`, the embeddings and blocks 0..L-k-1 never change, so their output for an example is the
same in every epoch. It is computed once per split in inference mode (no dropout), stored as float16 (only the
real tokens: a flat `[sum of lengths, hidden]` array plus offsets), and the training model is the last k blocks,
the pooler and the head applied to it. With k=0 only the [CLS] row is stored, since only it reaches the pooler.

It works for every encoder family of `tf_transfer.models.families`: the prefix ends at the embeddings (after
ELECTRA's projection) or at a block's output, and the suffix applies the remaining blocks as the backbone does,
DeBERTa-v3's with their shared relative-position table, which is part of the frozen embeddings (it feeds the frozen
blocks too, so training it would change what the cache holds) and depends only on the batch size.

Deviation from the transfer-learning paper: there, dropout stayed active inside the frozen blocks; here they run in
inference mode. `--cache_frozen` is therefore off by default and off in the paper's flagfiles.

Caches are keyed by preset, task, split, sequence length, the exact token ids (so tokenizer and data are covered),
frozen depth, precision and, for `--padding=pack`, packing (the prefix then runs on packed rows,
`packed.prefix_model`, and the feed lays each batch out in packed rows again for `packed.suffix_classifier`); they
are kept in memory for the process (a learning-rate or seed sweep pays once; a run's training and validation
splits, which its seed draws from one file, are cached together: `tf_transfer.data.cache_pool`) and, with
`cache_dir`, on disk as
`.npy` files loaded by memory map (for tasks too large for memory). A cache on disk is trusted only whole: its
meta.json records each array's SHA-256 as written, every process checks them when it opens the cache, and one that
fails (damaged, cut short, or written before digests were recorded) is named, removed and built again. A build
writes into a `.tmp-*` folder naming its process; a later open removes such a folder of a dead process.

The two models on either side of the cache, the frozen prefix and the trained suffix, are built in
`tf_transfer.models.cached_prefix`; this module holds the cached arrays and their batches.

Example:

>>> from tf_transfer.data import cache
>>> from tf_transfer.models import cached_prefix
>>> prefix = cached_prefix.prefix_model(backbone, trainable_layers=2)  # doctest: +SKIP
>>> key = cache.Prefix("bert_base_en_uncased", "rte", depth=10).key("train", encoded)  # doctest: +SKIP
>>> cached, seconds, reused = cache.build(prefix, encoded, key)  # doctest: +SKIP
>>> model = cached_prefix.suffix_classifier(backbone, trainable_layers=2, head=head)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from typing import Optional

import numpy as np

from tf_transfer.data import inputs, packing
from tf_transfer.core import disk, machine
from tf_transfer.core.errors import TransferError
from tf_transfer.core.setting_groups import InputSettings

_MEMORY: dict = {}


@dataclasses.dataclass
class CachedSplit:
    """Frozen-prefix outputs of one split: `hidden[offsets[i]:offsets[i+1]]` is example i's `[length, H]` rows."""

    hidden: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    regression: bool
    # What building it cost (wall and CPU seconds), kept with the cache so that a run reusing it can still be
    # charged for it when times are compared (None for caches written before this was recorded).
    build_s: Optional[float] = None
    build_cpu_s: Optional[float] = None
    # A split read from a pooled cache (`cache_pool.select`): example i is the pool's example `rows[i]` (`hidden` and
    # `offsets` are the pool's); None: example i is row i.
    rows: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def hidden_dim(self) -> int:
        return self.hidden.shape[1]

    @property
    def nbytes(self) -> int:
        """The bytes of its examples' outputs (a split read from a pool: its share of the pool's)."""
        rows = self.hidden.shape[0] if self.rows is None else int(self.lengths.sum())
        return rows * self.hidden_dim * self.hidden.itemsize

    def span(self, index: int) -> tuple:
        """`(start, stop)`: example `index`'s rows of `hidden`."""
        row = index if self.rows is None else self.rows[index]
        return self.offsets[row], self.offsets[row + 1]


def frozen_depth(trainable_layers, num_layers: int) -> int:
    """How many encoder blocks are frozen below the trained ones; `TransferError` when nothing is frozen."""
    if trainable_layers == "all":
        raise TransferError("--cache_frozen needs frozen embeddings: use --trainable_layers=0..L, not 'all'")
    return num_layers - int(trainable_layers)


@dataclasses.dataclass(frozen=True)
class Prefix:
    """What a frozen prefix's outputs depend on, besides the examples: the weights (a preset or a checkpoint),
    the data set, how many blocks deep it is, whether only [CLS] is kept, the precision it runs in, and whether it
    ran on packed rows (`--padding=pack`: the same real tokens, computed in other shapes, so other float rounding).

    >>> Prefix("bert_tiny_en_uncased", "mrpc", depth=2).key("train", encoded)  # doctest: +SKIP
    'mrpc-train-d2-a412c8767ef58dc7'
    >>> Prefix("bert_tiny_en_uncased", "mrpc", depth=2, packed=True).key("train", encoded)  # doctest: +SKIP
    'mrpc-train-d2-pack-...'
    """

    weights: str
    dataset: str
    depth: int
    cls_only: bool = False
    precision: str = "float32"
    packed: bool = False

    def key(self, split: str, encoded: inputs.Encoded) -> str:
        """The cache's name for `split` (in memory and as its folder in `cache_dir`): these settings and the exact
        token ids, so that tokenizer, sequence length and data are covered. Caches written by earlier versions
        keep their names (tests/training/test_performance.py): a packed prefix's adds "pack" to what is hashed and
        to the name, so a cache built from padded batches is never read as a packed one or the other way round."""
        digest = hashlib.sha256()
        for part in (self.weights, self.dataset, split, str(encoded.max_seq_length), str(self.depth),
                     str(self.cls_only), self.precision) + (("pack",) if self.packed else ()):
            digest.update(part.encode() + b"\0")
        digest.update(np.ascontiguousarray(encoded.token_ids).tobytes())
        digest.update(np.ascontiguousarray(encoded.segment_ids).tobytes())
        layout = "-pack" if self.packed else ""
        return f"{self.dataset}-{split}-d{self.depth}{layout}-{digest.hexdigest()[:16]}"


class _NoRetracingWarning(logging.Filter):
    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def _bucket_retraces_unreported():
    """TensorFlow's warning about "excessive" retracing, held back while a cache is built: the prefix is traced once
    per bucket's shape, a few by design (one trace for all shapes computes other float16 bits), and a user saw the
    warning on every first run."""
    logger, quiet = logging.getLogger("tensorflow"), _NoRetracingWarning()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def build(prefix, encoded: inputs.Encoded, key: str, batching: InputSettings = InputSettings(), cls_only: bool = False,
          cache_dir: Optional[str] = None, run=None, packed: bool = False):
    """Returns `(CachedSplit, seconds spent building, reused?)`, from memory, disk or by running `prefix` (through
    `run`, a function of a batch's features, where given: `traced_inference`, shared by several splits) over
    batches of `batching.eval_batch_size` examples padded to `batching.bucket_step` buckets; `packed`: laid end to
    end in rows (`tf_transfer.data.packing`, widths in multiples of `packing.ROW_STEP`) for a prefix on packed rows
    (`packed.prefix_model`), so that the build computes (almost) only the real tokens it keeps."""
    if key in _MEMORY:
        return _labelled(_MEMORY[key], encoded), 0.0, True
    if cache_dir:
        remove_stale_builds(cache_dir)
        loaded = _open_checked(os.path.join(cache_dir, key), encoded)
        if loaded is not None:
            _MEMORY[key] = loaded
            return loaded, 0.0, True
    start, cpu_start = time.perf_counter(), machine.cpu_seconds()
    lengths = np.ones_like(encoded.lengths) if cls_only else encoded.lengths.copy()
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])  # where each example's rows start, and end
    hidden_dim = int(prefix.output.shape[-1])
    shape = (int(offsets[-1]), hidden_dim)
    import tensorflow as tf

    # A traced function: calling the Keras model eagerly per batch is several times slower on CPU.
    run_prefix = run or tf.function(lambda features: prefix(features, training=False), reduce_retracing=True,
                                    autograph=False)
    if not cache_dir:
        hidden = np.empty(shape, np.float16)
        with _bucket_retraces_unreported():
            _store_outputs(run_prefix, encoded, batching, packed, lengths, offsets, hidden)
        cached = CachedSplit(hidden, offsets, lengths, encoded.labels, encoded.regression)
        cached.build_s, cached.build_cpu_s = time.perf_counter() - start, machine.cpu_seconds() - cpu_start
        _MEMORY[key] = cached
        return cached, cached.build_s, False
    folder = os.path.join(cache_dir, key)
    with disk.writing(folder, "the frozen-prefix cache"), _build_folder(cache_dir) as tmp:
        hidden = _allocated_memmap(os.path.join(tmp, ARRAYS[0]), shape)
        with _bucket_retraces_unreported():
            _store_outputs(run_prefix, encoded, batching, packed, lengths, offsets, hidden)
        hidden.flush()
        del hidden  # unmapped before the folder is renamed (and removed, should that fail)
        build_s, build_cpu_s = time.perf_counter() - start, machine.cpu_seconds() - cpu_start
        np.save(os.path.join(tmp, ARRAYS[1]), offsets)
        # The digests are of the files as written, read back from the page cache: what every later open checks.
        digests = {name: disk.file_sha256(os.path.join(tmp, name)) for name in ARRAYS}
        with open(os.path.join(tmp, META), "w") as f:
            json.dump({"key": key, "examples": len(lengths), "hidden_dim": hidden_dim, "build_s": build_s,
                       "build_cpu_s": build_cpu_s, "sha256": digests}, f)
        try:
            os.rename(tmp, folder)
            ours = True
        except OSError:  # another process finished the same cache first: use theirs, once it passes its check
            ours = False
    cached = _open_checked(folder, encoded, checked=folder if ours else None)
    if cached is None:  # the other process's cache failed its check and is gone: ours is whole, build again
        return build(prefix, encoded, key, batching, cls_only, cache_dir, run, packed)
    _MEMORY[key] = cached
    return cached, cached.build_s, False


def _store_outputs(run_prefix, encoded: inputs.Encoded, batching: InputSettings, packed: bool, lengths: np.ndarray,
                   offsets: np.ndarray, hidden: np.ndarray) -> None:
    """Runs the prefix over `encoded` in scoring batches (padded to buckets, or packed) and writes each example's
    first `lengths[i]` outputs to `hidden[offsets[i]:]`."""
    padding = "pack" if packed else "bucket"
    plan = inputs.plan_eval_batches(encoded.lengths, batching.eval_batch_size, padding)
    step = packing.ROW_STEP if packed else batching.bucket_step
    for indices, features in zip(plan, inputs.batches(encoded, plan, padding, step, with_labels=False)):
        starts = features.pop("cls_positions") if packed else None
        _store_batch(run_prefix(features).numpy(), starts, indices, offsets, lengths, hidden)


def _store_batch(output: np.ndarray, starts, indices: np.ndarray, offsets: np.ndarray, lengths: np.ndarray,
                 hidden: np.ndarray) -> None:
    """Writes each of a batch's examples' first `lengths[i]` output vectors to `hidden[offsets[i]:]`: read from its
    place in the packed rows (`starts`: flat index of its first token) or from its own padded row (`starts` None)."""
    if starts is not None:
        output = output.reshape(-1, hidden.shape[1])
    for row, index in enumerate(indices):
        n = lengths[index]
        hidden[offsets[index]:offsets[index] + n] = (output[starts[row]:starts[row] + n] if starts is not None
                                                     else output[row, :n])


def traced_inference(model):
    """`model` in inference mode as one traced function of any batch size and length: traced once, on its first
    batch, for every split it then runs over (a function per call, with Keras' shape relaxing, traces a few times per
    split)."""
    import tensorflow as tf

    traced = None

    def run(features):
        nonlocal traced
        if traced is None:
            spec = {name: tf.TensorSpec([None] * np.ndim(value), tf.as_dtype(value.dtype))
                    for name, value in features.items()}
            traced = tf.function(lambda batch: model(batch, training=False), input_signature=[spec],
                                 autograph=False)
        return traced(features)

    return run


def extend(blocks, cached: CachedSplit, key: str, batching: InputSettings = InputSettings(), run=None,
           packed: bool = False):
    """Returns `(CachedSplit, seconds spent, reused?)`: `cached` (a prefix's outputs, every real token) run through
    `blocks` (a model from `{"hidden", "padding_mask"}` to the next blocks' output, `cached_prefix.blocks_model`) in
    inference mode, for a deeper frozen prefix, without running the embeddings and the earlier blocks again. Kept in
    memory under `key` (which must name the whole sequence of depths: the stored float16 outputs are rounded at each
    depth, so an extended cache differs from one built at once in the last float16 bits). Batched as `build`
    batches, up to `batching.max_seq_length`; `packed`: in packed rows, for `blocks` on packed rows
    (`{"hidden", "example_ids"}`, `cached_prefix.blocks_model(..., packed=True)`), as `build(..., packed=True)`."""
    if key in _MEMORY:
        return _labelled(_MEMORY[key], cached), 0.0, True
    start, cpu_start = time.perf_counter(), machine.cpu_seconds()
    run_blocks = run or traced_inference(blocks)
    offsets = np.concatenate([[0], np.cumsum(cached.lengths, dtype=np.int64)])  # its own, not a pool's
    hidden = np.empty((int(offsets[-1]), int(blocks.output.shape[-1])), np.float16)
    plan = inputs.plan_eval_batches(cached.lengths, batching.eval_batch_size, "pack" if packed else "bucket")
    step = packing.ROW_STEP if packed else batching.bucket_step
    for indices, features in zip(plan, batches(cached, plan, step, batching.max_seq_length, with_labels=False,
                                               packed=packed)):
        starts = features.pop("cls_positions") if packed else None
        _store_batch(run_blocks(features).numpy(), starts, indices, offsets, cached.lengths, hidden)
    extended = CachedSplit(hidden, offsets, cached.lengths, cached.labels, cached.regression)
    extended.build_s, extended.build_cpu_s = time.perf_counter() - start, machine.cpu_seconds() - cpu_start
    _MEMORY[key] = extended
    return extended, extended.build_s, False


# A cache folder: meta.json (what it is, what it cost, each array's SHA-256 as written) and its arrays.
META, ARRAYS = "meta.json", ("hidden.npy", "offsets.npy")
# In a folder being built (`.tmp-*`): who builds it, so that a later open can tell a dead builder's leftovers.
OWNER = "owner.json"
# Caches of this process read back from disk, or rebuilt there after failing their check: `{folder: what}`, for
# the likely causes of a non-finite loss (`suspects`).
_FROM_DISK: dict = {}


@contextlib.contextmanager
def _build_folder(cache_dir: str):
    """A new `.tmp-*` folder in `cache_dir`, with the process that builds it recorded in it (`OWNER`); removed if
    the block fails, so a failed build (a full disk included) leaves nothing that looks like a cache. Yields its
    path; the block renames it into place when it succeeds."""
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir)
    try:
        with open(os.path.join(tmp, OWNER), "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname()}, f)
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.isdir(tmp):  # not renamed: another process's cache took its place
        shutil.rmtree(tmp, ignore_errors=True)


def _allocated_memmap(path: str, shape: tuple) -> np.memmap:
    """A float16 `.npy` memory map of `shape` whose blocks are allocated at once: writing into the pages of a sparse
    file on a full disk kills the process (SIGBUS), where allocating says ENOSPC first."""
    hidden = np.lib.format.open_memmap(path, "w+", np.float16, shape)
    with open(path, "r+b") as f:
        try:
            os.posix_fallocate(f.fileno(), 0, os.fstat(f.fileno()).st_size)
        except OSError as e:
            if disk.is_no_space(e):
                raise
            # A file system without fallocate (EOPNOTSUPP, EINVAL): the sparse file it was before.
    return hidden


def remove_stale_builds(cache_dir: str, log=None) -> list:
    """Removes `.tmp-*` folders in `cache_dir` left by a build whose process is dead (its `OWNER` names a process of
    this machine that no longer runs: a killed build leaves tens of megabytes for good otherwise); says so through
    `log` (default: absl's warning). Folders of live processes, of other machines, and without an owner (a build
    that has only just begun) are left. Returns the folders removed."""
    removed = []
    for tmp in glob.glob(os.path.join(cache_dir, ".tmp-*")):
        try:
            with open(os.path.join(tmp, OWNER)) as f:
                owner = json.load(f)
            pid, host = int(owner["pid"]), owner["host"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host != socket.gethostname() or machine.pid_alive(pid):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
        (log or logging.getLogger("absl").warning)(
            f"removed {tmp}: an unfinished frozen-prefix cache of process {pid}, which is no longer running")
    return removed


def _open_checked(folder: str, encoded: inputs.Encoded, checked: Optional[str] = None) -> Optional[CachedSplit]:
    """The cache in `folder`, after each array is checked against the SHA-256 its meta.json records (`checked`: the
    folder this process has just written and hashed, not read again); None when there is none, or when it fails its
    check: then it is named, said to be rebuilt (absl's warning) and removed, so that the caller builds it again.
    `TransferError` where it cannot be removed."""
    if not os.path.isdir(folder):
        return None
    why = None if checked == folder else damage(folder)
    why = why or _shape_mismatch(folder, encoded)
    if why is None:
        loaded = _load(folder, encoded)
        _FROM_DISK.setdefault(folder, "was read back from disk")
        return loaded
    _FROM_DISK[folder] = f"failed its check ({why}) and was rebuilt"
    logging.getLogger("absl").warning(f"frozen-prefix cache {folder}: {why}; rebuilding it")
    try:
        shutil.rmtree(folder)
    except OSError as e:
        raise TransferError(f"frozen-prefix cache {folder}: {why}, and it cannot be removed to be rebuilt "
                            f"({e.strerror}): delete the folder (or give another --cache_dir) and rerun") from None
    return None


def damage(folder: str) -> Optional[str]:
    """What is wrong with the cache in `folder` (named file first), or None when every array matches the SHA-256
    recorded when it was written: a cache is only trusted whole (random bytes, or plausible float16 values over
    some of its rows, trained other scores without a word before it was checked)."""
    if not os.path.exists(os.path.join(folder, META)):
        return f"{META} is missing"
    try:
        with open(os.path.join(folder, META)) as f:
            recorded = json.load(f)["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return (f"{META} records no SHA-256 of its arrays (written by an earlier version, or damaged: "
                f"{type(e).__name__})")
    for name in ARRAYS:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            return f"{name} is missing"
        if disk.file_sha256(path) != recorded.get(name):
            return f"{name} does not match the SHA-256 recorded when it was written (damaged or changed since)"
    return None


def _shape_mismatch(folder: str, encoded: inputs.Encoded) -> Optional[str]:
    """Whether the arrays (whole, by their digests) fit the split: a cache of as many examples as it was keyed by."""
    try:
        offsets = np.load(os.path.join(folder, ARRAYS[1]))
        hidden = np.load(os.path.join(folder, ARRAYS[0]), mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        return f"its arrays cannot be read ({type(e).__name__}: {e})"
    if len(offsets) != len(encoded.lengths) + 1 or hidden.ndim != 2 or hidden.shape[0] != offsets[-1]:
        return (f"its arrays do not fit the split ({len(offsets) - 1} examples and {hidden.shape[0]} rows recorded "
                f"for {len(encoded.lengths)} examples)")
    return None


def _labelled(cached: CachedSplit, split) -> CachedSplit:
    """`cached` with the labels of `split` (an `inputs.Encoded` or a `CachedSplit`): a key names the texts, not
    what a run predicts from them, so the same texts under another label column, or read as scores, reuse the
    outputs kept in memory and train on their own labels (a cache read from disk takes them from the split too)."""
    if cached.regression == split.regression and np.array_equal(cached.labels, split.labels):
        return cached
    return dataclasses.replace(cached, labels=split.labels, regression=split.regression)


def suspects() -> dict:
    """`{folder: what}` of the caches this process read back from disk or rebuilt after a failed check: the first
    place to look when a loss turns non-finite."""
    return dict(_FROM_DISK)


def _load(folder: str, encoded: inputs.Encoded) -> CachedSplit:
    with open(os.path.join(folder, META)) as f:
        meta = json.load(f)
    offsets = np.load(os.path.join(folder, ARRAYS[1]))
    hidden = np.load(os.path.join(folder, ARRAYS[0]), mmap_mode="r")
    return CachedSplit(hidden, offsets, np.diff(offsets).astype(np.int32), encoded.labels, encoded.regression,
                       meta.get("build_s"), meta.get("build_cpu_s"))


def clear_memory() -> None:
    _MEMORY.clear()


def forget(key: str) -> None:
    """Drops one cache from the process's memory (a prefix that will not be read again)."""
    _MEMORY.pop(key, None)


def batches(cached: CachedSplit, plan: list, bucket_step: int, max_length: int, with_labels: bool = True,
            fill_to: Optional[int] = None, packed: bool = False):
    """Yields `({"hidden", "padding_mask"}, labels, sample_weights)` (or the features) per planned batch, padded to
    the batch's bucket length; `fill_to` fills partial batches with zero-weight repeats (`inputs.fill_batch`).
    `packed`: the batch's examples laid end to end in rows of at most `max_length` (`packing.place`), features
    `{"hidden", "example_ids", "cls_positions"}` for `packed.suffix_classifier`."""
    for indices in plan:
        weights = None
        if with_labels:
            indices, weights = inputs.fill_batch(indices, fill_to)
        features = (_packed_features(cached, indices, bucket_step, max_length) if packed
                    else _padded_features(cached, indices, bucket_step, max_length))
        if not with_labels:
            yield features
            continue
        labels = cached.labels[indices]
        yield features, (labels.astype(np.float32)[:, None] if cached.regression else labels.astype(np.int32)), weights


def _padded_features(cached: CachedSplit, indices: np.ndarray, bucket_step: int, max_length: int) -> dict:
    length = inputs.padded_length(cached.lengths[indices], "bucket", max_length, bucket_step)
    hidden = np.zeros((len(indices), length, cached.hidden_dim), np.float16)
    for row, index in enumerate(indices):
        start, stop = cached.span(index)
        hidden[row, :stop - start] = cached.hidden[start:stop]
    mask = (np.arange(length)[None, :] < cached.lengths[indices, None]).astype(np.int32)
    return {"hidden": hidden, "padding_mask": mask}


def _packed_features(cached: CachedSplit, indices: np.ndarray, bucket_step: int, max_length: int) -> dict:
    rows, width, row_of, offset_of = packing.place(cached.lengths[indices], max_length, bucket_step)
    hidden = np.zeros((rows, width, cached.hidden_dim), np.float16)
    example_ids = np.full((rows, width), -1, np.int32)
    for example, index in enumerate(indices):
        start, stop = cached.span(index)
        span = slice(offset_of[example], offset_of[example] + stop - start)
        hidden[row_of[example], span] = cached.hidden[start:stop]
        example_ids[row_of[example], span] = example
    return {"hidden": hidden, "example_ids": example_ids,
            "cls_positions": (row_of * width + offset_of).astype(np.int32)}


def to_dataset(cached: CachedSplit, plan: list, bucket_step: int, max_length: int, with_labels: bool = True,
               fill_to: Optional[int] = None, packed: bool = False):
    import tensorflow as tf

    features = {"hidden": tf.TensorSpec([None, None, cached.hidden_dim], tf.float16)}
    if packed:
        features.update(example_ids=tf.TensorSpec([None, None], tf.int32),
                        cls_positions=tf.TensorSpec([None], tf.int32))
    else:
        features["padding_mask"] = tf.TensorSpec([None, None], tf.int32)
    label = tf.TensorSpec([None, 1], tf.float32) if cached.regression else tf.TensorSpec([None], tf.int32)
    signature = (features, label, tf.TensorSpec([None], tf.float32)) if with_labels else features
    dataset = tf.data.Dataset.from_generator(
        lambda: batches(cached, plan, bucket_step, max_length, with_labels, fill_to, packed),
        output_signature=signature)
    return inputs.prefetched(dataset, len(plan))
