"""tf-transfer: how much of BERT to train, measured.

From Python (docs/python.md), on a user's own keras-hub classifier or backbone:

>>> import tf_transfer
>>> tf_transfer.methods()[:3]  # the registry's, in registration order
('freeze', 'lora', 'bitfit')
>>> tf_transfer.freeze(classifier, trainable_layers=2)  # doctest: +SKIP

The library takes plain arguments; only the entry modules (`tf_transfer.glue`, ...) read absl flags.
"""

import os

# TensorFlow's oneDNN kernels are on by default only on CPUs with AVX-512-class features; on this project's AVX2
# machine, turning them on doubled training throughput (benchmarks/LOG.md, history). They change results only by
# floating-point summation order. Read when TensorFlow is first imported: importing tensorflow before tf_transfer
# keeps TensorFlow's own default. Set TF_ENABLE_ONEDNN_OPTS=0 to opt out.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# Before TensorFlow is imported, or its start-up chatter is already out: every command imports tf_transfer first.
# TF_CPP_MIN_LOG_LEVEL set by the user, or --verbosity >= 1, turns this off (tf_transfer/core/quiet.py).
from tf_transfer.core import quiet as _quiet  # noqa: E402

_quiet.install()

__version__ = "0.1.0"

# The public Python API: each name lives in its layer and is imported when first used, so that `import tf_transfer`
# stays light (every command imports it before TensorFlow) and the commands keep their start-up.
_PUBLIC = {
    "TransferError": "tf_transfer.core.errors",
    "freeze": "tf_transfer.models.user_model",
    "apply_method": "tf_transfer.models.user_model",
    "merge": "tf_transfer.models.user_model",
    "parameter_table": "tf_transfer.models.user_model",
    "ParameterTable": "tf_transfer.models.user_model",
    "backbone_of": "tf_transfer.models.user_model",
    "CachedClassifier": "tf_transfer.models.cached_classifier",
    "AutoFreeze": "tf_transfer.models.methods.adaptive.callbacks",
    "FreezeOut": "tf_transfer.models.methods.adaptive.callbacks",
    "export": "tf_transfer.models.export",
    "compare": "tf_transfer.reporting.comparison",
    "comparison_figure": "tf_transfer.reporting.comparison",
}
__all__ = ["__version__", "methods", *_PUBLIC]


def methods() -> tuple:
    """The training methods by name, in the registry's order (`apply_method`'s `method`).

    Examples:

    >>> import tf_transfer
    >>> "lora" in tf_transfer.methods()
    True
    """
    from tf_transfer.models.methods import registry

    return registry.names()


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tf_transfer' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_PUBLIC))
