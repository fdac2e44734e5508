"""tf-transfer: how much of BERT to train, measured.

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
